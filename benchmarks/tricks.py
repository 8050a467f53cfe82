"""What the serving graph's special paths gain, printed as JSON.

    python -m benchmarks.tricks [--checkpoint DIR --rounds 3 --examples 256]

Exports the MiniLM classifier (float32, the default export) once as it is and once with each
special path turned off, loads every export as TF Serving does, and serves SST-2 dev sentences
at batch 1 and batch 32, all exports in alternating rounds in one process. Reports each
export's examples/s and its ratio to the default export's (> 1: the default is faster, so the
path pays). The paths:
  column_parts: export(column_parts=1), each block's products as one, not split.
docs/performance.md lists the paths measured with it and dropped.
"""

import os
import statistics
import tempfile
import time

import tensorflow as tf
from absl import app, flags

import benchmarks
import keras_bert
from tasks import default_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder. Default: MiniLM.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_integer("examples", 256, "Sentences sent per batch size per round.")
flags.DEFINE_integer("threads", 0, "Threads each op computes with (1: TF Serving's setting in "
                     "the README's serving goal; 0: TensorFlow's default).")

DEV = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", "dev.tsv")


VARIANTS = {"default": {}, "no_column_parts": {"column_parts": 1}}  # export's arguments


def sentences():
    with open(DEV, encoding="utf-8") as f:
        texts = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    return (texts * (FLAGS.examples // len(texts) + 1))[: FLAGS.examples]


def main(argv):
    del argv
    if FLAGS.threads:  # before the first op starts TensorFlow's runtime
        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    model = keras_bert.BertClassifier.from_checkpoint(FLAGS.checkpoint or default_checkpoint())
    folder = tempfile.mkdtemp(prefix="tricks-")
    served = {}
    for name, options in VARIANTS.items():
        path = model.export(os.path.join(folder, name), allow_untrained_head=True, **options)
        served[name] = tf.saved_model.load(path).signatures["serving_default"]
    texts = sentences()
    calls = {size: [tf.constant(texts[i : i + size]) for i in range(0, len(texts), size)]
             for size in (1, 32)}  # fmt: skip
    for serve in served.values():  # warm up
        for batches in calls.values():
            serve(sentence=batches[0])["label_id"].numpy()
    seconds = {(name, size): [] for name in served for size in calls}
    for r in range(FLAGS.rounds):
        for name in served if r % 2 == 0 else list(served)[::-1]:
            for size, batches in calls.items():
                start = time.perf_counter()
                for batch in batches:
                    served[name](sentence=batch)["label_id"].numpy()
                seconds[name, size].append(time.perf_counter() - start)
    results = {}
    for name in served:
        results[name] = {}
        for size in calls:
            rate = len(texts) / statistics.median(seconds[name, size])
            default = len(texts) / statistics.median(seconds["default", size])
            results[name][f"batch_{size}"] = {"examples_per_s": rate,
                                              "default_over_this": default / rate}  # fmt: skip
    benchmarks.print_report({"rounds": FLAGS.rounds, "examples": FLAGS.examples,
                             "threads": FLAGS.threads, "results": results})  # fmt: skip


if __name__ == "__main__":
    flags.adopt_module_key_flags(benchmarks)  # --help lists --results
    app.run(main)
