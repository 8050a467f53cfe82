"""What a served single sentence pays besides its products' arithmetic, in TensorFlow sessions set
up as TF Serving runs a request (one thread an op), as JSON:

    python -m benchmarks.call_costs [--model=minilm --column_parts=2 --rows=1,13,25 --weights=24
                                     --precision=float32]

- `product_us`: one product of each shape a served block computes, with its bias (in
  `--column_parts` parts, as an export computes them: a part's query, key and value in one
  product, its share of attention's output product and of the feed-forward's up and down
  products, the last two a share of their rows in float32 and of their columns in bfloat16) on
  each of `--rows` rows, microseconds a product, its inputs and weights in `--precision` (a
  bfloat16 export stores its weights in bfloat16; run with `TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`,
  as such an export is best served, to time them as it runs them).
  Each job runs `--weights` weights of its shape in turn, more than the CPU's caches hold, so
  that each comes from memory: the most a served sentence's weights can cost (some of them may
  still be in the caches when it reads them). Each product's first value is summed, so that
  none is pruned from the graph: one small op a product is in its time.
- `read_us`: a bare sum over the same weights (`reduce_sum`), microseconds a weight: what reading
  them takes; `read_gb_s` its rate (2 bytes a weight in bfloat16, 4 in float32), and
  `one_row_over_read` a one-row product's time over it.
- `call_us`: a session call of a graph of one small op, on the session's inter-op threads (as TF
  Serving runs a request: the caller hands the graph to them and waits) and on the caller's own
  thread (`inter_op_parallelism_threads=-1`); `handoffs_us` the difference.

One process; the jobs in alternating order round after round, medians. TensorFlow's oneDNN setting
is the environment's, or where it sets none TensorFlow's default for the CPU, as in TF Serving:
this script imports TensorFlow before keras_bert, which then leaves it.
"""

import json

import numpy as np
import tensorflow as tf
from absl import app, flags

from benchmarks import checked_column_parts, onednn_enabled, positive_integers, time_calls
from benchmarks.ceiling import MODELS

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "minilm", sorted(MODELS), "Widths: BERT-base's (hidden 768, "
                  "feed-forward 3072) or all-MiniLM-L6-v2's (384, 1536); 12 heads both.")
flags.DEFINE_integer("column_parts", 2, "Parts each block's products are split in, as an export "
                     "computes them (exports/export.py --column_parts; 2 for a served MiniLM on "
                     "2 cores).")
flags.DEFINE_list("rows", ["1", "13", "25"], "Rows (a sentence's tokens) of each product timed; "
                  "the serving bench's single SST-2 dev sentences average 24.5 of MiniLM's.")
flags.DEFINE_integer("weights", 24, "Weights of each shape a job runs in turn; enough that they "
                     "outgrow the CPU's caches.", lower_bound=1)
flags.DEFINE_enum("precision", "float32", ["float32", "bfloat16"], "The products' inputs and "
                  "weights: float32 (a float32 export) or bfloat16 (a bfloat16 export's stored "
                  "weights).")
flags.DEFINE_integer("rounds", 9, "Rounds; each times every job.", lower_bound=1)
flags.DEFINE_integer("steps", 3, "Session calls a product or read job is timed over, a round.",
                     lower_bound=1)
flags.DEFINE_integer("calls", 200, "Session calls a call job is timed over, a round.",
                     lower_bound=1)


def product_shapes(config, parts, dtype):
    """{name: (inputs, outputs)} of the products one column part of a served block computes in
    `dtype`: attention's output and the feed-forward's down product take a share of their rows
    in float32 and of their columns in bfloat16 (`column_parts.splits_rows`)."""
    from keras_bert.column_parts import splits_rows

    hidden, inner = config.hidden_size, config.intermediate_size
    shares = {"query_key_value": (hidden, 3 * hidden), "attention_output": (hidden, hidden),
              "up": (hidden, inner), "down": (inner, hidden)}  # fmt: skip
    shapes = {}
    for name, (inputs, outputs) in shares.items():
        if name in ("attention_output", "down") and splits_rows(dtype.name):
            inputs //= parts
        else:
            outputs //= parts
        shapes[f"{name} {inputs}x{outputs}"] = (inputs, outputs)
    return shapes


def weight_jobs(shapes, rows, count, rng, dtype):
    """{job: callable} running, in a session of their own with one thread an op and one op at a
    time, `count` products of each shape on each of `rows` rows ("product shape rows"), and
    `count` bare sums over the same weights ("read shape"), all in `dtype`."""
    graph, fetches, feeds = tf.Graph(), {}, {}
    numbers = dtype.as_numpy_dtype
    with graph.as_default():
        for name, (inputs, outputs) in shapes.items():
            weights = [tf.Variable((rng.standard_normal((inputs, outputs)) / np.sqrt(inputs))
                                   .astype(numbers)) for _ in range(count)]  # fmt: skip
            biases = [tf.Variable((rng.standard_normal(outputs) * 0.02).astype(numbers))
                      for _ in range(count)]  # fmt: skip
            fetches[f"read {name}"] = tf.add_n([tf.reduce_sum(w.read_value()) for w in weights])
            for n in rows:
                x = tf.compat.v1.placeholder(dtype, (None, inputs))
                feeds[f"product {name} {n}"] = (x, rng.standard_normal((n, inputs)).astype(
                    numbers))  # fmt: skip
                # With its bias, as an export computes it: Grappler fuses the two into one op.
                fetches[f"product {name} {n}"] = tf.add_n(
                    [tf.nn.bias_add(tf.matmul(x, w.read_value()), b.read_value())[0, 0]
                     for w, b in zip(weights, biases)])  # fmt: skip
        initialize = tf.compat.v1.global_variables_initializer()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                      inter_op_parallelism_threads=1)  # fmt: skip
    session = tf.compat.v1.Session(graph=graph, config=config)
    session.run(initialize)
    jobs = {}
    for job, fetch in fetches.items():
        if job in feeds:
            placeholder, value = feeds[job]
            run = session.make_callable(fetch, [placeholder])
            jobs[job] = lambda run=run, value=value: run(value)
        else:
            jobs[job] = session.make_callable(fetch)
    return jobs


def call_jobs():
    """{job: callable} of one session call of a graph of one small op: on the session's inter-op
    threads, as TF Serving runs a request, and on the caller's own thread."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (None,))
        y = x[:4]
    value = np.ones(8, np.float32)
    jobs = {}
    for job, inter_op in (("inter_op_threads", 0), ("caller_thread", -1)):
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                          inter_op_parallelism_threads=inter_op)  # fmt: skip
        run = tf.compat.v1.Session(graph=graph, config=config).make_callable(y, [x])
        jobs[job] = lambda run=run: run(value)
    return jobs


def main(argv):
    del argv
    from keras_bert import BertConfig

    config = BertConfig(**MODELS[FLAGS.model])
    checked_column_parts(config)
    rows = positive_integers("rows", "give positive whole numbers")
    dtype = tf.as_dtype(FLAGS.precision)
    shapes = product_shapes(config, FLAGS.column_parts, dtype)
    jobs = weight_jobs(shapes, rows, FLAGS.weights, np.random.default_rng(0), dtype)
    calls = call_jobs()
    seconds = time_calls({**{job: (run, FLAGS.steps) for job, run in jobs.items()},
                          **{job: (run, FLAGS.calls) for job, run in calls.items()}},
                         FLAGS.rounds)  # fmt: skip
    per_weight = 1e6 / FLAGS.weights  # each product or read job's call runs every weight once
    product_us = {name: {str(n): round(seconds[f"product {name} {n}"] * per_weight, 1)
                         for n in rows} for name in shapes}  # fmt: skip
    read_us = {name: round(seconds[f"read {name}"] * per_weight, 1) for name in shapes}
    call_us = {job: round(seconds[job] * 1e6, 1) for job in calls}
    report = {
        "model": FLAGS.model, "column_parts": FLAGS.column_parts, "weights": FLAGS.weights,
        "precision": FLAGS.precision, "rounds": FLAGS.rounds, "onednn": onednn_enabled(),
        "product_us": product_us, "read_us": read_us,
        "read_gb_s": {name: round(dtype.size * i * o / (read_us[name] * 1e3), 1)
                      for name, (i, o) in shapes.items()},
        "one_row_over_read": ({name: round(product_us[name]["1"] / read_us[name], 2)
                               for name in shapes} if 1 in rows else None),
        "call_us": call_us,
        "handoffs_us": round(call_us["inter_op_threads"] - call_us["caller_thread"], 1),
    }  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
