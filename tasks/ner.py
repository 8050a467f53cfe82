"""Fine-tunes BERT for named entities on CoNLL-2003 and scores entities as the CoNLL script does.

    python -m tasks.ner --train_file=conll2003/train.txt --dev_file=conll2003/valid.txt \\
        --output_dir=runs/ner

Reads CoNLL files: one word per line with its tag in the last column (any number of columns, the
same on every line), blank lines between sentences, -DOCSTART- lines between documents. Tags
may be IOB1 (CoNLL-2003's original files) or IOB2; both are read as IOB2 (an I-X that starts an
entity becomes B-X). The tag set is the training file's. Each word's tag is learnt and predicted
on its first word piece; words past --max_seq_length get O (with --max_windows, past that many
windows). With --documents, a -DOCSTART- document is one text. Scores are entity-level, by
sentence: an entity counts only with its exact span and type; precision, recall and F1 overall
and per type.

Writes metrics.json, TensorBoard logs, and for the dev file (--do_eval) and the test file
(--do_predict) `dev_predictions.txt` and `test_predictions.txt` in the CoNLL evaluation script's
input format (word, gold tag, predicted tag), with their scores in the log. With --nodo_train,
predicts with the finished run in --output_dir.
"""

import collections
import functools
import os

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert import BertTokenClassifier
from keras_bert.text import textfiles
from tasks import common, driver, run_main, runs, trainer

FLAGS = flags.FLAGS
# allow_override: tasks.swag and tasks.squad use the same names (tests import them together).
flags.DEFINE_string("train_file", None, "CoNLL file to train on (word ... tag per line).",
                    allow_override=True)
flags.DEFINE_string("dev_file", None, "CoNLL file to score after each epoch (with --do_eval).",
                    allow_override=True)
flags.DEFINE_string("test_file", None, "CoNLL file to predict (and score) with --do_predict.",
                    allow_override=True)
flags.DEFINE_bool("documents", False, "Read each -DOCSTART- document as one text (its sentences "
                  "joined), so that every word is tagged in its document's context; with "
                  "--max_windows to read documents longer than --max_seq_length. Scores and "
                  "prediction files are by sentence either way.")
common.define_window_flags("each word tagged from the window where it has the most context")
UNUSED_FLAGS = {"bucket_by_length": None}  # sentences are batched in a shuffled order
common.adopt_flags(__name__, UNUSED_FLAGS)


def read_conll(path):
    """Returns a Split: texts `sentence` (words joined by spaces) and `document` (each
    sentence's document number, counted at -DOCSTART- lines), labels the IOB2 tags of each
    sentence's words (a list of lists of str), ids "<line of the first word>"."""
    text = textfiles.read_text(path, "CoNLL file")
    sentences, tags, ids, documents = [], [], [], []
    words, word_tags, columns, first_line = [], [], None, None

    def end_sentence():
        if words:
            sentences.append(" ".join(words))
            tags.append(to_iob2(word_tags))
            ids.append(str(first_line))
            documents.append(document)
        words.clear()
        word_tags.clear()

    document = 0
    for number, line in enumerate(text.split("\n"), start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            end_sentence()
            if fields and documents and documents[-1] == document:  # after its sentences
                document += 1
            continue
        if len(fields) < 2:
            raise ValueError(f"{path}:{number}: 1 column; a CoNLL line is a word, optional "
                             "columns (part of speech, chunk) and its tag, space-separated")
        columns = columns or len(fields)
        if len(fields) != columns:
            raise ValueError(f"{path}:{number}: {len(fields)} columns where the file's "
                             f"first word line has {columns} (need word ... tag)")  # fmt: skip
        tag = fields[-1]
        if tag != "O" and (tag[:2] not in ("B-", "I-") or len(tag) < 3):
            raise ValueError(f"{path}:{number}: tag {tag!r} is neither IOB1 nor IOB2 "
                             "(O, B-<type> or I-<type>)")  # fmt: skip
        first_line = first_line if words else number
        words.append(fields[0])
        word_tags.append(tag)
    end_sentence()
    if not sentences:
        raise ValueError(f"{path} has no sentences")
    return common.Split({"sentence": sentences, "document": documents}, tags, ids)


def as_documents(split):
    """`split`'s sentences joined into their documents, one text each (tags joined too)."""
    texts, tags, ids = [], [], []
    for i, (sentence, sentence_tags) in enumerate(zip(split.texts["sentence"], split.labels)):
        if i == 0 or split.texts["document"][i] != split.texts["document"][i - 1]:
            texts.append([])
            tags.append([])
            ids.append(split.ids[i])
        texts[-1].append(sentence)
        tags[-1] += sentence_tags
    return common.Split({"sentence": [" ".join(t) for t in texts]}, tags, ids)


def by_sentence(split, document_tags):
    """Tags predicted for `split`'s documents (as_documents), cut back into its sentences."""
    lengths = [len(sentence.split(" ")) for sentence in split.texts["sentence"]]
    flat = [tag for tags in document_tags for tag in tags]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return [flat[start:start + n] for start, n in zip(starts, lengths)]


def to_iob2(tags):
    """IOB1 -> IOB2: an I-X that starts an entity (after O or another type) becomes B-X."""
    result = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-") and (i == 0 or tags[i - 1][2:] != tag[2:]
                                     or tags[i - 1] == "O"):  # fmt: skip
            tag = "B-" + tag[2:]
        result.append(tag)
    return result


def entities(tags):
    """The set of (first word, last word, type) entities in IOB2 tags, read as the CoNLL
    script reads chunks (an I-X after O or another type starts one too)."""
    found, start = set(), None
    for i, tag in enumerate(list(tags) + ["O"]):
        starts = tag != "O" and (tag[0] == "B" or start is None or tags[i - 1][2:] != tag[2:])
        if start is not None and (tag == "O" or starts):
            found.add((start, i - 1, tags[start][2:]))
            start = None
        if starts:
            start = i
    return found


def conll_scores(gold, predicted):
    """Entity-level precision, recall and F1 (percent), overall and per type."""
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> [correct, predicted, gold]
    for gold_tags, predicted_tags in zip(gold, predicted):
        gold_set, predicted_set = entities(gold_tags), entities(predicted_tags)
        for entity_set, slot in ((gold_set & predicted_set, 0), (predicted_set, 1),
                                 (gold_set, 2)):  # fmt: skip
            for entity in entity_set:
                counts[entity[2]][slot] += 1
                counts[None][slot] += 1

    def prf(correct, predicted_count, gold_count):
        precision = 100.0 * correct / predicted_count if predicted_count else 0.0
        recall = 100.0 * correct / gold_count if gold_count else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    result = prf(*counts.pop(None, [0, 0, 0]))
    for kind in sorted(counts):
        result.update({f"{kind}_{k}": v for k, v in prf(*counts[kind]).items()})
    return result


def train_dataset(split, model, batch_size):
    """The endless stream of shuffled batches of raw sentences with their word tag ids
    (common.training_passes)."""
    labels = model.tag_ids(split.labels)
    return common.training_passes((tf.constant(split.texts["sentence"]), labels),
                                  lambda dataset: dataset.batch(
                                      batch_size, drop_remainder=common.on_tpu()))  # fmt: skip


def predict_tags(model, split):
    """The predicted IOB2 tags of every sentence's words, through the in-graph tagger (with
    --documents, tagged a document at a time)."""
    texts = as_documents(split) if FLAGS.documents else split
    tags = model.predict(texts.texts["sentence"], batch_size=FLAGS.eval_batch_size,
                         verbose=1)["word_tags"]  # fmt: skip
    return by_sentence(split, tags) if FLAGS.documents else tags


class NerMetrics(trainer.DevMetrics):
    """Entity-level scores of each labelled split after each epoch."""

    def __init__(self, splits, output_dir, write):
        super().__init__({}, None, output_dir, write)
        self.splits = splits

    def evaluate(self):
        return {name: conll_scores(split.labels, predict_tags(self.model, split))
                for name, split in self.splits.items()}  # fmt: skip


def write_predictions(path, split, predicted):
    lines = []
    for sentence, gold, tags in zip(split.texts["sentence"], split.labels, predicted):
        lines += [f"{w} {g} {p}" for w, g, p in zip(sentence.split(" "), gold, tags)] + [""]
    runs.write_atomically(path, "\n".join(lines) + "\n")


class NerBinary(driver.TaskBinary):
    """CoNLL-2003 NER: a token classifier, scored by entity-level precision, recall and F1."""

    name = "ner"

    def check_flags(self):
        common.refuse_unused_flags(UNUSED_FLAGS, "NER")
        common.check_split_files({"dev_file": ["do_eval"], "test_file": ["do_predict"]})
        common.check_window_flags()
        super().check_flags()

    def prepare(self):
        wanted = (("dev", FLAGS.dev_file if FLAGS.do_eval else None),
                  ("test", FLAGS.test_file if FLAGS.do_predict else None))  # fmt: skip
        self.splits = {name: read_conll(path).head(FLAGS.max_eval_examples)
                       for name, path in wanted if path}  # fmt: skip

    def read_training(self):
        if not FLAGS.train_file:
            raise app.UsageError("pass --train_file, or --nodo_train to predict with the "
                                 "finished run in --output_dir")  # fmt: skip
        training = read_conll(FLAGS.train_file).head(FLAGS.max_train_examples)
        training = as_documents(training) if FLAGS.documents else training
        if all(tag == "O" for sentence in training.labels for tag in sentence):
            within = (f" (its first --max_train_examples={FLAGS.max_train_examples} sentences)"
                      if FLAGS.max_train_examples else "")  # fmt: skip
            raise ValueError(f"--train_file={FLAGS.train_file}{within} tags every word O: with "
                             "no entity there is nothing to learn; pass a file with B- and I- "
                             "tags")  # fmt: skip
        return training

    def build_model(self, training):
        tags = ["O"] + sorted({t for sentence in training.labels for t in sentence} - {"O"})
        logging.info("%d training sentences, tags %s", len(training), tags)
        return BertTokenClassifier.from_checkpoint(
            common.checkpoint_path(), tags, sequence_length=FLAGS.max_seq_length,
            do_lower_case=FLAGS.do_lower_case, max_windows=FLAGS.max_windows or 1,
            stride=FLAGS.window_stride, name=self.name)  # fmt: skip

    def training_dataset(self, model, training):
        texts = [(n, as_documents(s) if FLAGS.documents else s) for n, s in self.splits.items()]
        for name, split in (("train", training), *texts):
            cut = int(np.sum(model.preprocessor.cut(tf.constant(split.texts["sentence"]))))
            if cut:
                logging.warning("%d %s texts have more word pieces than %d window(s) of "
                                "--max_seq_length=%d tokens hold; their words past them are "
                                "tagged O", cut, name, model.preprocessor.max_windows,
                                FLAGS.max_seq_length)  # fmt: skip
        return (functools.partial(train_dataset, training, model, FLAGS.train_batch_size),
                int(np.ceil(len(training) / FLAGS.train_batch_size)))  # fmt: skip

    def dev_callback(self, output_dir, write):
        dev = {k: v for k, v in self.splits.items() if k == "dev"}
        return NerMetrics(dev, output_dir, write=write) if dev else None

    def finish(self, model, output_dir, write):
        scores = {}
        for name, split in self.splits.items():
            predicted = predict_tags(model, split)
            scores[name] = conll_scores(split.labels, predicted)
            if write:
                write_predictions(os.path.join(output_dir, f"{name}_predictions.txt"), split,
                                  predicted)  # fmt: skip
        return scores


def run():
    """Fine-tunes (with --do_train); tags and scores the dev and test files with the saved run."""
    return NerBinary().run()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.info("entity scores: %s", run())


if __name__ == "__main__":
    run_main(main)
