"""What each of the serving graph's special paths gains, printed as JSON.

    python -m benchmarks.tricks [--checkpoint DIR --rounds 3 --examples 256]

Exports the MiniLM classifier (float32, the default export) once as it is and once with each
special path turned off, loads every export as TF Serving does, and serves SST-2 dev sentences
at batch 1 and batch 32, all exports in alternating rounds in one process. Reports each
export's examples/s and its ratio to the default export's (> 1: the default is faster, so the
path pays). The paths:
  column_parts: export(column_parts=1), each block's products as one, not split;
  attention_buckets: export(attention_buckets=False), a large batch's attention over the whole
    batch, not in buckets of similar lengths;
  plain_layer_norms: LayerNorms as the fused op in inference too;
  small_attention: attention on oneDNN's kernels whatever the size (attention.SMALL_ATTENTION);
  bitcast_transpose: attention's transposes as tf.transpose of the floats.
"""

import json
import os
import statistics
import tempfile
import time
from unittest import mock

import tensorflow as tf
from absl import app, flags

import keras_bert
from keras_bert import attention
from keras_bert.encoder import BertEncoder
from tasks import default_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder. Default: MiniLM.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_integer("examples", 256, "Sentences sent per batch size per round.")
flags.DEFINE_integer("threads", 0, "Threads each op computes with (1: TF Serving's setting in "
                     "the README's serving goal; 0: TensorFlow's default).")

DEV = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", "dev.tsv")


def _plain_transpose(x):
    return tf.transpose(x, (0, 2, 1, 3))


VARIANTS = {
    "default": ({}, []),
    "no_column_parts": ({"column_parts": 1}, []),
    "no_attention_buckets": ({"attention_buckets": False}, []),
    "no_plain_layer_norms": ({}, [mock.patch.object(BertEncoder, "plain_layer_norms",
                                                    lambda self: None)]),
    "no_small_attention": ({}, [mock.patch.object(attention, "SMALL_ATTENTION", -1)]),
    "no_bitcast_transpose": ({}, [mock.patch.object(attention, "swap_heads_and_positions",
                                                    _plain_transpose)]),
}  # fmt: skip


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
    for name, (options, patches) in VARIANTS.items():
        for patch in patches:
            patch.start()
        try:
            path = model.export(os.path.join(folder, name), allow_untrained_head=True, **options)
        finally:
            for patch in patches:
                patch.stop()
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
    print(json.dumps({"rounds": FLAGS.rounds, "examples": FLAGS.examples,
                      "threads": FLAGS.threads, "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    app.run(main)
