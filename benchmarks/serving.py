"""Serving throughput of an exported classifier on SST-2 dev sentences, printed as JSON.

    python -m tasks.quickstart            # makes exported/sst-2/<version>
    python -m benchmarks.serving [--export exported/sst-2/1]

Loads the SavedModel the way TF Serving does (TensorFlow and tensorflow-text only) and calls its
`serving_default` signature with raw strings, labels out, at batch 1 and batch 32, alternating
rounds; reports sentences/s and the median latency of one call.
"""

import glob
import json
import os
import statistics
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("export", None, "SavedModel version folder. Default: the newest under "
                    "exported/sst-2.")  # fmt: skip
flags.DEFINE_integer("rounds", 5, "Alternating rounds.")
flags.DEFINE_integer("sentences", 256, "Sentences sent per batch size per round.")

DEV = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", "dev.tsv")


def main(argv):
    del argv
    path = FLAGS.export or max(glob.glob("exported/sst-2/[0-9]*"), key=lambda p: int(p.split("/")[-1]),
                               default=None)  # fmt: skip
    if not path:
        raise app.UsageError("no export found: run python -m tasks.quickstart or pass --export")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    with open(DEV, encoding="utf-8") as f:
        sentences = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    sentences = (sentences * (FLAGS.sentences // len(sentences) + 1))[: FLAGS.sentences]
    calls = {size: [tf.constant(sentences[i : i + size]) for i in range(0, len(sentences), size)]
             for size in (1, 32)}  # fmt: skip
    for batches in calls.values():  # warm up
        serve(sentence=batches[0])["label"].numpy()
    seconds = {size: [] for size in calls}
    latency = {size: [] for size in calls}
    for r in range(FLAGS.rounds):
        for size in calls if r % 2 == 0 else list(calls)[::-1]:
            start = time.perf_counter()
            for batch in calls[size]:
                call_start = time.perf_counter()
                serve(sentence=batch)["label"].numpy()
                latency[size].append(time.perf_counter() - call_start)
            seconds[size].append(time.perf_counter() - start)
    report = {"export": path, "rounds": FLAGS.rounds, "sentences_per_round": len(sentences),
              "results": {f"batch_{size}": {
                  "sentences_per_s": len(sentences) / statistics.median(seconds[size]),
                  "median_latency_ms": 1000 * statistics.median(latency[size])}
                  for size in calls}}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
