"""Do the task models' raw-string `fit` / `predict` cost anything? Printed as JSON.

    python -m benchmarks.task_models [--checkpoint DIR --rounds 5 --examples 320]

One MiniLM classifier (mixed_bfloat16, batch 32) on the real SST-2 dev sentences bundled in
tasks/data, two ways in the same process, alternating rounds:
  strings:    `model.fit(sentences, labels)` / `model.predict(sentences)`: what a user and
              the binaries call now (the model's preprocessor mapped in tf.data for fit,
              run inside Keras' predict step for predict);
  token_ids:  a hand-made tf.data pipeline (tokenizer + packer) fed to plain `keras.Model.fit`
              / `predict`: what the binaries did before the task models.
Reports examples/s (medians) and the ratio strings / token_ids for each; and the latency of
`model.predict([sentence])`, one sentence a call (`--single_calls` calls a round), as a user
scoring texts one by one meets it: "predict_one/strings", milliseconds a call (medians).
"""

import json
import os
import statistics

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

import keras_bert
from benchmarks import time_alternating
from tasks import default_checkpoint, glue

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder. Default: MiniLM.")
flags.DEFINE_integer("rounds", 5, "Alternating rounds.")
flags.DEFINE_integer("examples", 320, "Examples per timed fit / predict pass.")
flags.DEFINE_integer("batch_size", 32, "Examples per batch.")
flags.DEFINE_integer("single_calls", 16, "predict([sentence]) calls a round, one sentence each.")

DEV = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", "dev.tsv")


def token_ids(model, sentences, labels=None):
    """The hand-made pipeline: batches of encoder inputs, padded to their longest sentence."""
    preprocessor = model.preprocessor
    data = (sentences,) if labels is None else (sentences, labels)
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(FLAGS.batch_size)
    pack = lambda s, *y: (preprocessor.packer(preprocessor.tokenizer(s)), *y)
    return dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def main(argv):
    del argv
    keras.config.set_dtype_policy("mixed_bfloat16")
    path = FLAGS.checkpoint or default_checkpoint()
    model = keras_bert.BertClassifier.from_checkpoint(path, num_classes=2)
    model.compile(keras.optimizers.AdamW(1e-5))  # one optimizer for both ways
    split = glue.read_tsv(DEV, glue.get_task("SST-2"), True)
    sentences = np.array(split.texts["sentence"][: FLAGS.examples], dtype=object)
    labels = split.labels[: FLAGS.examples]
    ways = {
        "fit/strings": lambda: model.fit(sentences, labels, batch_size=FLAGS.batch_size,
                                         shuffle=False, verbose=0),
        "fit/token_ids": lambda: keras.Model.fit(model, token_ids(model, sentences, labels),
                                                 shuffle=False, verbose=0),
        "predict/strings": lambda: model.predict(sentences, batch_size=FLAGS.batch_size,
                                                 verbose=0),
        "predict/token_ids": lambda: keras.Model.predict(model, token_ids(model, sentences),
                                                         verbose=0),
        "predict_one/strings": lambda: [model.predict(sentences[i : i + 1], verbose=0)
                                        for i in range(FLAGS.single_calls)],
    }  # fmt: skip
    for run in ways.values():  # warm up: trace the batch shapes of the pass
        run()
    timings = time_alternating(ways, FLAGS.rounds)
    single = timings.pop("predict_one/strings")
    results = {name: len(sentences) / statistics.median(t) for name, t in timings.items()}
    print(json.dumps({
        "checkpoint": path, "precision": "mixed_bfloat16", "examples": len(sentences),
        "batch_size": FLAGS.batch_size, "rounds": FLAGS.rounds,
        "examples_per_s": results,
        "seconds_per_round": {name: [round(x, 3) for x in t] for name, t in timings.items()},
        "fit_strings_over_token_ids": results["fit/strings"] / results["fit/token_ids"],
        "predict_strings_over_token_ids":
            results["predict/strings"] / results["predict/token_ids"],
        "predict_one/strings_ms": 1e3 * statistics.median(single) / FLAGS.single_calls,
        "predict_one/seconds_per_round": [round(x, 3) for x in single],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    app.run(main)
