"""Serving throughput of an exported model, strings in and answers out, printed as JSON.

    python -m tasks.quickstart                          # makes exported/sst-2/<version>
    python -m benchmarks.serving [--export exported/sst-2/1]
    python -m benchmarks.serving --task=squad --export=exported/squad/1
    python -m benchmarks.serving --task=ner --export=exported/ner/1

Loads the SavedModel the way TF Serving does (TensorFlow and tensorflow-text only) and calls its
`serving_default` signature with raw strings at batch 1 and batch 32, alternating rounds;
reports examples/s (sentences, or question + passage pairs) and the median latency of one call.
Inputs: SST-2 dev sentences, the SQuAD dev slice in tests/data (questions with their passages),
the CoNLL-2003 dev slice in tests/data (sentences).
"""

import json
import os
import statistics
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)
from absl import app, flags

import benchmarks
from benchmarks import newest_export

FLAGS = flags.FLAGS
flags.DEFINE_enum("task", "sst-2", ["sst-2", "squad", "ner"], "What the export does.")
flags.DEFINE_string("export", None, "SavedModel version folder. Default: the newest under "
                    "exported/<task>.")  # fmt: skip
flags.DEFINE_integer("rounds", 5, "Alternating rounds.")
flags.DEFINE_integer("examples", 256, "Examples sent per batch size per round.")

ROOT = os.path.join(os.path.dirname(__file__), "..")


def examples(task):
    """{input name: list of str} of the task's benchmark inputs."""
    if task == "sst-2":
        with open(os.path.join(ROOT, "tasks", "data", "SST-2", "dev.tsv"), encoding="utf-8") as f:
            return {"sentence": [line.split("\t")[0] for line in f.read().splitlines()[1:]]}
    if task == "squad":
        with open(os.path.join(ROOT, "tests", "data", "squad", "dev-v1.1.json"),
                  encoding="utf-8") as f:  # fmt: skip
            pairs = [(q["question"], p["context"]) for a in json.load(f)["data"]
                     for p in a["paragraphs"] for q in p["qas"]]  # fmt: skip
        return {"question": [q for q, _ in pairs], "context": [c for _, c in pairs]}
    with open(os.path.join(ROOT, "tests", "data", "conll", "valid.txt"), encoding="utf-8") as f:
        blocks = f.read().split("\n\n")
    sentences = [" ".join(line.split()[0] for line in b.splitlines()) for b in blocks
                 if b.strip() and not b.startswith("-DOCSTART-")]  # fmt: skip
    return {"sentence": sentences}


def main(argv):
    del argv
    path = FLAGS.export or newest_export(FLAGS.task)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    inputs = examples(FLAGS.task)
    count = FLAGS.examples
    inputs = {k: (v * (count // len(v) + 1))[:count] for k, v in inputs.items()}
    calls = {size: [{k: tf.constant(v[i : i + size]) for k, v in inputs.items()}
                    for i in range(0, count, size)] for size in (1, 32)}  # fmt: skip
    for batches in calls.values():  # warm up
        tf.nest.map_structure(lambda t: t.numpy(), serve(**batches[0]))
    seconds = {size: [] for size in calls}
    latency = {size: [] for size in calls}
    for r in range(FLAGS.rounds):
        for size in calls if r % 2 == 0 else list(calls)[::-1]:
            start = time.perf_counter()
            for batch in calls[size]:
                call_start = time.perf_counter()
                tf.nest.map_structure(lambda t: t.numpy(), serve(**batch))
                latency[size].append(time.perf_counter() - call_start)
            seconds[size].append(time.perf_counter() - start)
    report = {"export": path, "task": FLAGS.task, "rounds": FLAGS.rounds,
              "examples_per_round": count,
              "results": {f"batch_{size}": {
                  "examples_per_s": count / statistics.median(seconds[size]),
                  "median_latency_ms": 1000 * statistics.median(latency[size])}
                  for size in calls}}  # fmt: skip
    benchmarks.print_report(report)


if __name__ == "__main__":
    flags.adopt_module_key_flags(benchmarks)  # --help lists --results
    app.run(main)
