"""A classifier's export serving single sentences, against its matrix products alone: how much of
a served sentence's time the products take. As a script, JSON:

    python -m benchmarks.served_products [--export=exported/sst-2/1 --sentences=64 --rounds=9]

The export runs as TF Serving runs it (`keras_bert/tf_serving.py`: its graph in a session, one
thread an op, TF Serving's best setting for single sentences on 2 cores), on the first SST-2 dev
sentences, one a call. Its products alone run as a served pooled-only classifier computes them
(`benchmarks.ceiling`'s classifier form: in column parts, weights in variables, in the precision of
the export's weights) in a session of their own with the same setting, one sequence of each of
`--seq_lengths` tokens a call (the first 64 SST-2 dev sentences average 24.5 of MiniLM's tokens).
One process, the jobs in alternating order round after round; medians, sentences/s, and the export's
rate over each length's products'.

TensorFlow's oneDNN setting is the environment's, or where it sets none TensorFlow's default for
the CPU, as in TF Serving: this script imports TensorFlow before keras_bert, which then leaves it.
"""

import collections
import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags

import benchmarks
from benchmarks import (
    checked_column_parts,
    define_served_export_flags,
    onednn_enabled,
    positive_integers,
    served_sentence_export,
    time_alternating,
)
from benchmarks.ceiling import MODELS, matmul_ceiling


def products_alone(config, seq, column_parts, dtype):
    """A callable running, in a session of its own with one thread an op, the products a served
    pooled-only classifier computes in `dtype` for one sequence of `seq` tokens."""
    graph = tf.Graph()
    with graph.as_default():
        output = matmul_ceiling(config, 1, seq, dtype, in_order=True, variables=True,
                                column_parts=column_parts, classifier=True)()  # fmt: skip
        initialize = tf.compat.v1.global_variables_initializer()
    options = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1)
    session = tf.compat.v1.Session(graph=graph, config=options)
    session.run(initialize)
    return session.make_callable(output)


def export_precision(export, config, column_parts):
    """The dtype an export's blocks compute in, read from its weights; a usage error unless they
    are those of a pooled-only classifier with `config`'s blocks in `column_parts` parts, whose
    products are the ones `products_alone` runs: other products would bound nothing."""
    reader = tf.train.load_checkpoint(os.path.join(export, "variables", "variables"))
    shape_of = {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()}
    shapes = collections.Counter(shape_of.values())
    hidden, layers = config.hidden_size, config.num_hidden_layers
    up = (hidden, config.intermediate_size // column_parts)
    if shapes[up] != layers * column_parts:
        raise app.UsageError(
            f"--export={export} does not compute --layers={layers} blocks of "
            f"--model={flags.FLAGS.model}'s widths in --column_parts={column_parts}: it holds "
            f"{shapes[up]} feed-forward weights of {up[0]} x {up[1]}, not "
            f"{layers * column_parts}; set the three flags to the export's")  # fmt: skip
    # Every block but the last computes each part's query, key and value in one product; the
    # last one too unless it runs for the first tokens alone (a pooled-only classifier).
    query_key_value = (hidden, 3 * hidden // column_parts)
    if shapes[query_key_value] != (layers - 1) * column_parts:
        raise app.UsageError(f"--export={export} is not a pooled-only classifier's export (its "
                             "last block computes every token): its products are not the ones "
                             "timed here")  # fmt: skip
    return next(dtype for name, dtype in reader.get_variable_to_dtype_map().items()
                if shape_of[name] == up)  # fmt: skip


def main(argv):
    del argv
    from keras_bert import BertConfig

    FLAGS = flags.FLAGS
    export, served, calls = served_sentence_export()
    config = BertConfig(num_hidden_layers=FLAGS.layers, **MODELS[FLAGS.model])
    checked_column_parts(config)
    dtype = export_precision(export, config, FLAGS.column_parts)
    lengths = positive_integers("seq_lengths", "give whole numbers of tokens, at least 1")
    jobs = {"export": lambda: [served(sentence=call) for call in calls]}
    for seq in lengths:
        products = products_alone(config, seq, FLAGS.column_parts, dtype)
        jobs[f"products_{seq}_tokens"] = lambda products=products: [products() for _ in calls]
    for job in jobs.values():  # each graph's first run builds what it keeps
        job()
    seconds = time_alternating(jobs, FLAGS.rounds)
    per_s = {name: len(calls) / float(np.median(times)) for name, times in seconds.items()}
    report = {"export": export, "onednn": onednn_enabled(),
              "sentences": len(calls), "rounds": FLAGS.rounds,
              "model": FLAGS.model, "layers": FLAGS.layers, "column_parts": FLAGS.column_parts,
              "precision": dtype.name,
              "sentences_per_s": {name: round(rate, 1) for name, rate in per_s.items()},
              "export_of_products": {f"{seq}_tokens": round(per_s["export"] /
                                                            per_s[f"products_{seq}_tokens"], 3)
                                     for seq in lengths},
              "rounds_s": {name: [round(s, 4) for s in times]
                           for name, times in seconds.items()}}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    define_served_export_flags("pooled-only", sentences=64, per="round")
    flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
    flags.DEFINE_list("seq_lengths", ["24", "25"], "Tokens of the sequence the products alone "
                      "are computed for, one job each.")  # fmt: skip
    flags.DEFINE_enum("model", "minilm", sorted(MODELS), "The export's widths: all-MiniLM-L6-v2's "
                      "(hidden 384, feed-forward 1536) or BERT-base's (768, 3072).")  # fmt: skip
    flags.DEFINE_integer("layers", 6, "The export's encoder blocks (MiniLM has 6).", lower_bound=1)
    flags.DEFINE_integer("column_parts", 2, "The export's column parts (exports/export.py "
                         "--column_parts; its default is 2).")  # fmt: skip
    flags.DEFINE_integer("rounds", 9, "Rounds; each runs every job once.", lower_bound=1)
    app.run(main)
