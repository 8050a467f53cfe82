"""Where a BERT forward pass spends its time, by op type and by part of a block, as JSON.

    python -m benchmarks.profile_encoder [--precision bfloat16 --batch_size 8 --seq_length 128]

Runs the TensorFlow profiler over a few forward passes of a random BERT-base encoder and sums
the time of every op the executor ran, per step: by op type (a `_MklNativeFusedMatMul` is a
product fused with its bias and activation; a lone `BiasAdd` or `Erfc` means a fusion did not
happen) and by the op's place in a block (layer numbers folded together).
"""

import collections
import json
import re
import tempfile

import tensorflow as tf
from absl import app, flags

import benchmarks
from benchmarks import define_forward_flags, random_encoder
from benchmarks.profiling import op_times
from keras_bert import BertClassifier

FLAGS = flags.FLAGS
define_forward_flags()
flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
flags.DEFINE_enum("step", "forward", ["forward", "train_step"], "forward: the encoder alone; "
                  "train_step: a classifier's training step (AdamW, the fine-tuning recipe).")
flags.DEFINE_integer("steps", 3, "Profiled steps (after 3 warm-up steps).")
flags.DEFINE_integer("top", 25, "Rows per table.")


def main(argv):
    del argv
    encoder, x = random_encoder()
    if FLAGS.step == "forward":
        forward = tf.function(lambda x: encoder(x, training=False)["sequence_output"])

        def step():
            forward(x).numpy()
    else:
        classifier = BertClassifier(encoder, preprocessor=None)  # token ids in
        classifier.compile(total_steps=10**6)
        y = tf.zeros((FLAGS.batch_size,), tf.int32)

        def step():
            classifier.train_on_batch(x, y)
    for _ in range(3):
        step()
    logdir = tempfile.mkdtemp(prefix="profile-")
    tf.profiler.experimental.start(logdir)
    for _ in range(FLAGS.steps):
        step()
    tf.profiler.experimental.stop()
    times = op_times(logdir, FLAGS.steps)
    by_type, by_place = collections.Counter(), collections.Counter()
    for (node, op), ms in times.items():
        by_type[op] += ms
        place = re.sub(r"^[a-z_]+encoder(_\d+)?/", "", re.sub(r"layer_\d+(_\d+)?", "layer_N", node))
        by_place[f"{place}:{op}"] += ms
    total = sum(by_type.values())
    report = {"precision": FLAGS.precision, "step": FLAGS.step, "batch_size": FLAGS.batch_size,
              "seq_length": FLAGS.seq_length, "op_ms_per_step": total,
              "by_op_type_ms": {k: round(v, 2) for k, v in by_type.most_common(FLAGS.top)},
              "by_place_ms": {k: round(v, 2) for k, v in by_place.most_common(FLAGS.top)}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
