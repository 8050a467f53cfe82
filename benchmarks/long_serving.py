"""Latency and memory of exports that read long texts in windows, printed as JSON.

    python -m benchmarks.long_serving [--checkpoint=DIR --tokens=2000 --max_windows=32]

Exports the classifier and the token classifier (--models) of MiniLM (or --checkpoint) with
--max_windows windows of --sequence_length tokens (their heads untrained: the time does not
depend on the weights), then serves each from a process of its own that loads it as TF Serving
does (TensorFlow and tensorflow-text only) and calls its `serving_default` with: a text of one
window ("one_window"), one text of about --tokens word pieces ("long_1"), and a batch of 32 such
texts ("long_32"). Reports each request's median latency over --rounds alternating rounds, and
the serving process's peak resident memory after the warm-up calls of each request, made
smallest first (so each peak holds the ones before it).
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

import benchmarks

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "The checkpoint to export. Default: MiniLM.")
flags.DEFINE_integer("tokens", 2000, "Word pieces of a long text, about.")
flags.DEFINE_integer("max_windows", 32, "Windows the exports read a text in at most.")
flags.DEFINE_integer("sequence_length", 128, "Tokens of a window.")
flags.DEFINE_integer("rounds", 5, "Alternating rounds; each times every request once.")
flags.DEFINE_multi_enum("models", ["classifier", "token_classifier"],
                        ["classifier", "token_classifier"], "The task models to export.")
flags.DEFINE_string("worker", None, "Internal: serve this export, reading the requests from "
                    "stdin, and print its timings.")  # fmt: skip

SENTENCE = "The film opens in Paris, where Anna Weber meets an old friend from Berlin."
REQUESTS = ("one_window", "long_1", "long_32")


def texts(tokenizer):
    """{request: list of texts}, and the word pieces of a long text."""
    words, long_text = SENTENCE.split(), []
    while int(tokenizer([" ".join(long_text)]).row_lengths()[0]) < FLAGS.tokens:
        long_text += words * 10
    long_text = " ".join(long_text)
    pieces = int(tokenizer([long_text]).row_lengths()[0])
    return {"one_window": [SENTENCE], "long_1": [long_text], "long_32": [long_text] * 32}, pieces


def serve(path):
    """The worker: times `path`'s serving_default on the requests given on stdin."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    requests = json.loads(sys.stdin.read())
    served = tf.saved_model.load(path).signatures["serving_default"]
    peak_mb = {}
    for name in REQUESTS:  # warm-up, smallest first; the peak memory after each
        served(sentence=tf.constant(requests[name]))
        peak_mb[name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    seconds = benchmarks.time_alternating(
        {n: lambda n=n: served(sentence=tf.constant(requests[n])) for n in REQUESTS},
        FLAGS.rounds)  # fmt: skip
    print(json.dumps({name: {"median_ms": round(1000 * statistics.median(seconds[name]), 1),
                             "peak_rss_mb": round(peak_mb[name])} for name in REQUESTS}))  # fmt: skip


def main(argv):
    del argv
    if FLAGS.worker:
        return serve(FLAGS.worker)
    import keras_bert
    from tasks.cli import default_checkpoint

    checkpoint = FLAGS.checkpoint or default_checkpoint("--checkpoint")
    windows = {"sequence_length": FLAGS.sequence_length, "max_windows": FLAGS.max_windows}
    build = {
        "classifier": lambda: keras_bert.BertClassifier.from_checkpoint(checkpoint, 2, **windows),
        "token_classifier": lambda: keras_bert.BertTokenClassifier.from_checkpoint(
            checkpoint, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], **windows),
    }  # fmt: skip
    models = {name: build[name]() for name in dict.fromkeys(FLAGS.models)}
    requests, pieces = texts(next(iter(models.values())).preprocessor.tokenizer)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, model in models.items():
            path = model.export(os.path.join(folder, name), allow_untrained_head=True)
            worker = subprocess.run(
                [sys.executable, "-m", "benchmarks.long_serving", f"--worker={path}",
                 f"--rounds={FLAGS.rounds}"], input=json.dumps(requests), text=True,
                capture_output=True, cwd=os.path.dirname(os.path.dirname(__file__)),
                timeout=3600)  # fmt: skip
            if worker.returncode:
                raise RuntimeError(f"the {name} worker failed:\n{worker.stderr[-3000:]}")
            results[name] = json.loads(worker.stdout.strip().splitlines()[-1])
    benchmarks.print_report({"bench": "long_serving", "long_text_pieces": pieces,
                             "settings": windows, "results": results})  # fmt: skip


if __name__ == "__main__":
    app.run(main)
