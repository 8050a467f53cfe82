"""How long do the task models take to build their graphs? Printed as JSON.

    python -m benchmarks.tracing [--checkpoint DIR --rounds 5] [--first_calls]

Tracing is paid before the first batch of every `fit`, `evaluate` and `predict` call that builds
a new graph, at every export, and in every process a binary starts; on a small model it is most
of a short run. For three MiniLM task models (a pair classifier, a question answerer, a token
classifier) this times, in one process, alternating, medians of `--rounds`:
  dataset:  `model.make_dataset(x, y)`, the tf.data pipeline `fit` trains on (tf.data traces
            the preprocessing with its training targets);
  predict:  a fresh tf.function of what `predict` runs traced for a batch of strings: the
            packed inputs for the classifier, the in-graph decoding (`answer`, `tag`) for the
            others. `ops` is that graph's op count.

With --first_calls it times instead, for a fresh MiniLM classifier each round (built untimed):
  first_fit:      its first `fit` call, 2 batches of 8 sentences: building the loss and
                  metric state, tracing and compiling the training step, then the two steps;
  first_predict:  then its first `predict` call, 10 sentences in batches of 4, 4 and 2;
  export:         its float32 export (`model.export`), the checks of serving.save_checked
                  included.
To compare two versions, run it in each checkout, alternating processes.
"""

import json
import statistics
import tempfile
import time

import tensorflow as tf
from absl import app, flags

import keras_bert
from benchmarks import time_alternating
from tasks import default_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder. Default: MiniLM.")
flags.DEFINE_integer("rounds", 5, "Alternating rounds.")
flags.DEFINE_boolean("first_calls", False, "Time a fresh classifier's first fit call and its "
                     "export instead of the graphs (see the module's docstring).")

PASSAGE = "The cat sat on the mat near the river, and the dog slept in the old house by the hill."
STRINGS = tf.TensorSpec([None], tf.string)


def cases(path):
    """{model name: (model, training x, training y, predict function, its input specs)}."""
    pair = keras_bert.BertClassifier.from_checkpoint(path, num_classes=2, num_segments=2,
                                                     sequence_length=128)  # fmt: skip
    answerer = keras_bert.BertQuestionAnswerer.from_checkpoint(path, sequence_length=128)
    tagger = keras_bert.BertTokenClassifier.from_checkpoint(path, ["O", "B-PER", "I-PER"],
                                                            sequence_length=128)  # fmt: skip
    firsts, seconds = ["a cat sat", "the dog slept"] * 4, ["on the mat", "by the hill"] * 4
    return {
        "pair_classifier": (pair, (firsts, seconds), [0, 1] * 4,
                            lambda a, b: pair.preprocessor([a, b]), (STRINGS, STRINGS)),
        "question_answerer": (answerer, (["where did the cat sit?"] * 8, [PASSAGE] * 8),
                              ([20] * 8, [27] * 8), answerer.answer, (STRINGS, STRINGS)),
        "token_classifier": (tagger, ["John sat on the mat"] * 8,
                             [["B-PER", "O", "O", "O", "O"]] * 8, tagger.tag, (STRINGS,)),
    }  # fmt: skip


def first_calls(path, rounds):
    """{"first_fit": [seconds], "first_predict": [seconds], "export": [seconds]}, one fresh
    classifier a round."""
    sentences, labels = ["a gripping , moving film", "dull and far too long"] * 8, [1, 0] * 8
    seconds = {"first_fit": [], "first_predict": [], "export": []}
    for _ in range(rounds):
        model = keras_bert.BertClassifier.from_checkpoint(path, num_classes=2, sequence_length=64)
        model.compile()
        start = time.perf_counter()
        model.fit(sentences, labels, batch_size=8, verbose=0)
        seconds["first_fit"].append(time.perf_counter() - start)
        start = time.perf_counter()
        model.predict(sentences[:10], batch_size=4, verbose=0)  # batches of 4, 4 and 2
        seconds["first_predict"].append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            model.export(folder, precision="float32")
            seconds["export"].append(time.perf_counter() - start)
    return seconds


def main(argv):
    del argv
    path = FLAGS.checkpoint or default_checkpoint()
    if FLAGS.first_calls:
        seconds = first_calls(path, FLAGS.rounds)
        print(json.dumps({
            "checkpoint": path, "rounds": FLAGS.rounds,
            "median_seconds": {name: round(statistics.median(t), 2) for name, t in seconds.items()},
            "seconds": {name: [round(v, 2) for v in t] for name, t in seconds.items()},
        }, indent=2))  # fmt: skip
        return
    models = cases(path)
    jobs = {}
    for name, (model, x, y, function, specs) in models.items():
        jobs[f"{name}/dataset"] = lambda model=model, x=x, y=y: model.make_dataset(x, y)
        jobs[f"{name}/predict"] = (
            lambda function=function, specs=specs:
            tf.function(function).get_concrete_function(*specs))  # fmt: skip
    # (also a first, untimed round of the predict graphs)
    ops = {name: len(job().graph.get_operations()) for name, job in jobs.items()
           if name.endswith("/predict")}  # fmt: skip
    seconds = time_alternating(jobs, FLAGS.rounds)
    print(json.dumps({
        "checkpoint": path, "rounds": FLAGS.rounds,
        "trace_seconds": {name: round(statistics.median(t), 3) for name, t in seconds.items()},
        "ops": ops,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    app.run(main)
