"""Fine-tunes BERT on SQuAD v1.1 or v2.0 and scores it with the official evaluation rules.

    python -m tasks.squad --train_file=train-v1.1.json --predict_file=dev-v1.1.json \\
        --output_dir=runs/squad

Flags keep the names of the original run_squad.py. With --do_eval (the default) or --do_predict,
writes predictions.json, nbest_predictions.json and, with --version_2_with_negative,
null_odds.json for --predict_file; when that file has gold answers, also its scores (after each
epoch with --do_eval: metrics.json, TensorBoard logs/dev). Windows, answer positions and the
n-best search are the in-graph ones of keras_bert/models/spans.py, shared with the export.

Bad input: a training answer whose answer_start does not point at its text is skipped with a
warning (the count is logged); training questions with an empty passage or an empty question
are skipped the same way; at prediction an empty passage gets the empty answer, and an empty
question is answered from its passage alone (counted in the log). With --nodo_train, predicts
with the finished run in --output_dir and the settings it was trained with. Questions longer
than --max_query_length tokens are cut (as the original does) and counted in the log.
"""

import functools
import math
import os

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert import BertQuestionAnswerer
from keras_bert.training.batching import without_autotuning
from tasks import (
    check_at_least_one,
    common,
    driver,
    run_main,
    runs,
    squad_data,
    squad_metrics,
    trainer,
)

FLAGS = flags.FLAGS
MAX_WINDOWS = 64  # windows of a passage, when --max_windows is not given
# allow_override: tasks.swag and tasks.ner use the same name (tests import them together).
flags.DEFINE_string("train_file", None, "SQuAD JSON for training (v1.1 or v2.0 format).",
                    allow_override=True)
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (and score when it has answers).")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a passage's windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept; longer questions are cut.")
flags.DEFINE_integer("n_best_size", 20, "Start and end candidates per window, and answers kept "
                     "in nbest_predictions.json.")  # fmt: skip
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")
common.define_max_windows("each --doc_stride tokens after the one before (a passage's end past "
                          "them is not read, and the prediction says so: passage_cut)",
                          str(MAX_WINDOWS))
flags.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD 2.0: predict no answer when the "
                   "[CLS] score minus the best span's score is above this.")  # fmt: skip
# Training batches are of windows, cut in the graph from shuffled batches of questions; grouping
# by length was never built for them.
UNUSED_FLAGS = {"bucket_by_length": None}
common.adopt_flags(__name__, UNUSED_FLAGS)


def pairs(split, training=False):
    """Batches of raw (question, passage) pairs in order; for training, the endless stream of
    shuffled batches (common.training_passes) with their answer spans."""
    x = (tf.constant(split.texts["question"]), tf.constant(split.texts["context"]))
    if not training:
        return without_autotuning(
            tf.data.Dataset.from_tensor_slices((x,)).batch(FLAGS.eval_batch_size))
    y = (split.labels[:, 0], split.labels[:, 1])
    return common.training_passes((x, y), lambda dataset: dataset.batch(256))


def count_windows(split, windows):
    batches = tf.data.Dataset.from_tensor_slices(split.texts).batch(256)
    return sum(int(tf.size(windows.windows(b["question"], b["context"])["example"]))
               for b in batches)  # fmt: skip


def predict(model, split):
    """Answers every question of a split. Returns (predictions, nbest, null_odds)."""
    result = model.predict(pairs(split), verbose=1)
    cut = int(np.sum(result["passage_cut"]))
    if cut:
        logging.warning("%d passages needed more than max_windows=%d windows; their ends were "
                        "not read", cut, model.preprocessor.max_windows)  # fmt: skip
    version_2 = model.threshold is not None
    predictions, nbest, null_odds = {}, {}, {}
    for j, qid in enumerate(split.ids):
        predictions[qid] = result["answer"][j]
        nbest[qid], null_odds[qid] = n_best_list(
            split.texts["context"][j], result["candidates"], j, version_2,
            model.preprocessor.n_best_size)
    return predictions, nbest, null_odds


def n_best_list(context, candidates, row, version_2, n_best_size):
    """The n_best_size distinct answer texts of one question, best first, with probabilities
    (a softmax over the list, as the original); v2.0 adds the empty answer at [CLS]'s score.
    Returns (entries, null score minus the best span's score)."""
    entries, seen = [], set()
    for score, start, end in zip(candidates["scores"][row], candidates["char_starts"][row],
                                 candidates["char_ends"][row]):  # fmt: skip
        text = context[start:end]
        if start >= 0 and text not in seen and len(entries) < n_best_size:
            seen.add(text)
            entries.append({"text": text, "score": float(score), "start": int(start),
                            "end": int(end)})  # fmt: skip
    null_score = float(candidates["null_score"][row])
    best = entries[0]["score"] if entries else -np.inf
    if version_2 and "" not in seen:
        entries.append({"text": "", "score": null_score, "start": -1, "end": -1})
        entries.sort(key=lambda e: -e["score"])
    scores = np.array([e["score"] for e in entries])
    probabilities = np.exp(scores - scores.max()) if entries else scores
    for entry, p in zip(entries, probabilities / max(probabilities.sum(), 1e-30)):
        entry["probability"] = float(p)
    return entries, null_score - best


class SquadMetrics(trainer.DevMetrics):
    """The official scores of --predict_file after each epoch."""

    def __init__(self, split, data, output_dir, write):
        super().__init__({}, None, output_dir, write)
        self.split, self.data = split, data

    def evaluate(self):
        return {"dev": score(self.model, self.data, self.split, *predict(self.model, self.split))}


def score(model, data, split, predictions, nbest, null_odds):
    """The official scores of a split's predictions."""
    odds = null_odds if model.threshold is not None else None
    return squad_metrics.evaluate(subset(data, split.ids), predictions, odds,
                                  model.null_score_diff_threshold)  # fmt: skip


def write_predictions(output_dir, predictions, nbest, null_odds, version_2):
    runs.write_json(os.path.join(output_dir, "predictions.json"), predictions)
    runs.write_json(os.path.join(output_dir, "nbest_predictions.json"), nbest)
    if version_2:
        runs.write_json(os.path.join(output_dir, "null_odds.json"), null_odds)


class SquadBinary(driver.TaskBinary):
    """SQuAD v1.1 / v2.0: a question answerer, scored by exact match and F1."""

    name = "squad"

    def check_flags(self):
        if FLAGS.max_windows is None:  # set, so that the run's settings record it
            FLAGS.max_windows = MAX_WINDOWS
        common.refuse_unused_flags(UNUSED_FLAGS, "SQuAD")
        common.check_split_files({"predict_file": ["do_eval", "do_predict"]})
        super().check_flags()
        check_at_least_one(["max_windows", "doc_stride", "n_best_size", "max_answer_length"])
        if not math.isfinite(FLAGS.null_score_diff_threshold):
            raise app.UsageError(f"--null_score_diff_threshold must be a finite number, got "
                                 f"{FLAGS.null_score_diff_threshold}")  # fmt: skip
        check_at_least_one(["max_query_length"])
        if FLAGS.max_query_length + 4 > FLAGS.max_seq_length:
            raise app.UsageError(f"--max_query_length={FLAGS.max_query_length} leaves no room "
                                 f"for the passage in --max_seq_length={FLAGS.max_seq_length}: "
                                 "it must be at most --max_seq_length - 4")  # fmt: skip
        room = FLAGS.max_seq_length - FLAGS.max_query_length - 3
        if FLAGS.doc_stride > room:
            raise app.UsageError(f"--doc_stride={FLAGS.doc_stride} is longer than a window's "
                                 f"passage part ({room} tokens: --max_seq_length - "
                                 "--max_query_length - 3), so windows would skip passage text: "
                                 f"pass at most {room}")  # fmt: skip

    def prepare(self):
        self.dev = self.dev_data = None
        if FLAGS.predict_file:
            self.dev_data = squad_data.read_squad(FLAGS.predict_file)
            self.dev = squad_data.questions_of(self.dev_data, FLAGS.predict_file).head(
                FLAGS.max_eval_examples)

    def read_training(self):
        if not FLAGS.train_file:
            raise app.UsageError("pass --train_file, or --nodo_train")
        data = squad_data.read_squad(FLAGS.train_file)
        split = squad_data.questions_of(data, FLAGS.train_file, training=True,
                                        version_2=FLAGS.version_2_with_negative)  # fmt: skip
        return split.head(FLAGS.max_train_examples)

    def build_model(self, training):
        return BertQuestionAnswerer.from_checkpoint(
            common.checkpoint_path(), sequence_length=FLAGS.max_seq_length,
            max_query_length=FLAGS.max_query_length, doc_stride=FLAGS.doc_stride,
            n_best_size=FLAGS.n_best_size, max_answer_length=FLAGS.max_answer_length,
            max_windows=FLAGS.max_windows, version_2_with_negative=FLAGS.version_2_with_negative,
            null_score_diff_threshold=FLAGS.null_score_diff_threshold,
            do_lower_case=FLAGS.do_lower_case, name=self.name)  # fmt: skip

    def training_dataset(self, model, training):
        log_long_questions(training, model.preprocessor, FLAGS.train_file)
        windows = count_windows(training, model.preprocessor)
        logging.info("%d training questions in %d windows", len(training), windows)
        return (functools.partial(pairs, training, training=True),
                int(np.ceil(windows / FLAGS.train_batch_size)))  # fmt: skip

    def dev_callback(self, output_dir, write):
        if self.dev and FLAGS.do_eval:
            return SquadMetrics(self.dev, self.dev_data, output_dir, write=write)
        return None

    def finish(self, model, output_dir, write):
        """Predicts --predict_file with the saved run, whose window and n-best settings are its
        own (recorded in model.keras), and scores it. The saved model, not the one in memory:
        their bfloat16 numbers can differ in the last bit, which flips near-tied answers."""
        if not self.dev or not (FLAGS.do_eval or FLAGS.do_predict):
            return {}
        log_long_questions(self.dev, model.preprocessor, FLAGS.predict_file)
        predictions, nbest, null_odds = predict(model, self.dev)
        if write:
            write_predictions(output_dir, predictions, nbest, null_odds,
                              model.version_2_with_negative)  # fmt: skip
        if not has_answers(self.dev_data):
            return {}
        return score(model, self.dev_data, self.dev, predictions, nbest, null_odds)


def run():
    """Fine-tunes (with --do_train); predicts and scores --predict_file with the saved run."""
    return SquadBinary().run()


def has_answers(data):
    return any(q.get("answers") or q.get("is_impossible") for a in data for p in a["paragraphs"]
               for q in p["qas"])  # fmt: skip


def subset(data, ids):
    """The articles of `data` with only the questions in `ids`."""
    ids = set(ids)
    return [{**a, "paragraphs": [{**p, "qas": [q for q in p["qas"] if q["id"] in ids]}
                                 for p in a["paragraphs"]]} for a in data]  # fmt: skip


def log_long_questions(split, windows, path):
    lengths = windows.tokenizer(tf.constant(split.texts["question"])).row_lengths().numpy()
    long = int(np.sum(lengths > windows.max_query_length))
    if long:
        logging.warning("%s: %d questions are longer than max_query_length=%d tokens and are "
                        "cut", path, long, windows.max_query_length)  # fmt: skip


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.info("scores: %s", run())


if __name__ == "__main__":
    FLAGS.set_default("max_seq_length", 384)
    run_main(main)
