"""Fine-tunes BERT on SWAG: four-way multiple choice, scored by accuracy.

    python -m tasks.swag --train_file=train.csv --dev_file=val.csv --output_dir=runs/swag

Reads the SWAG CSV files (columns sent1, sent2, ending0..ending3, label; the original release's
other columns are ignored) or JSON lines with the same keys. Each choice is packed as
`[CLS] sent1 [SEP] sent2 ending [SEP]`, encoded on its own, scored, and the four scores are
soft-maxed against each other.
"""

import csv
import functools
import io
import json
import os

import numpy as np
from absl import app, flags, logging

from keras_bert import BertMultipleChoice
from keras_bert.text import textfiles
from tasks import common, driver, run_main, runs, trainer

FLAGS = flags.FLAGS
flags.DEFINE_string("train_file", None, "SWAG training file (.csv or .jsonl).")
flags.DEFINE_string("dev_file", None, "SWAG dev file, labelled (.csv or .jsonl).")
flags.DEFINE_string("test_file", None, "SWAG test file; labels not needed (.csv or .jsonl).")
flags.adopt_module_key_flags(common)

NUM_CHOICES = 4
TEXTS = ("context", "endings")
COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")


def csv_rows(text):
    """[(line, row)] of a CSV file with a header: each row (a dict) with the line it starts on,
    which a quoted line break in an earlier row puts past its row number."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows, read = [], None
    for row in reader:
        rows.append(((read or 1) + 1, row))  # the line after the previous row's (the header's)
        read = reader.line_num
    return rows


def read_swag(path, labelled=True):
    """Returns a Split with texts `context` (n,) and `endings` (n, 4), labels (n,) or None."""
    text = textfiles.read_text(path, "SWAG file")
    if path.endswith((".jsonl", ".json")):
        rows = []
        for line, row in enumerate(text.split("\n"), start=1):
            if row.strip():
                try:
                    rows.append((line, json.loads(row)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line}: not valid JSON ({e.msg})") from None
                if not isinstance(rows[-1][1], dict):
                    raise ValueError(f"{path}:{line}: not a JSON object (one example per line, "
                                     f"with {', '.join(COLUMNS)} and label)")  # fmt: skip
    else:
        rows = csv_rows(text)
    contexts, endings, labels, ids = [], [], [], []
    for line, row in rows:
        missing = [c for c in COLUMNS + (("label",) if labelled else ()) if row.get(c) is None]
        if missing:
            raise ValueError(f"{path}:{line}: missing {', '.join(missing)}")
        for column in COLUMNS:
            if not isinstance(row[column], str):
                kind = "a number" if isinstance(row[column], (int, float)) else "not a string"
                raise ValueError(f"{path}:{line}: {column} is {kind}, not text")
        if not row["sent1"].strip():
            raise ValueError(f"{path}:{line}: sent1, the context, is empty; fix or remove the row")
        choices = [f"{row['sent2']} {row[f'ending{i}']}".strip() for i in range(NUM_CHOICES)]
        if not all(choices):
            raise ValueError(f"{path}:{line}: sent2 and ending{choices.index('')} are empty, a "
                             "choice with no text; fix or remove the row")  # fmt: skip
        contexts.append(row["sent1"])
        endings.append(choices)
        ids.append(str(row.get("fold-ind", line)))
        if labelled:
            label = str(row["label"])
            if label not in ("0", "1", "2", "3"):
                raise ValueError(f"{path}:{line}: label {label!r} is not 0, 1, 2 or 3")
            labels.append(int(label))
    if not ids:
        raise ValueError(f"{path} has no examples")
    return common.Split({"context": contexts, "endings": endings},
                        np.array(labels, "int32") if labelled else None, ids)  # fmt: skip


def accuracy(logits, labels):
    return {"accuracy": float(np.mean(np.argmax(logits, axis=-1) == labels))}


class SwagBinary(driver.TaskBinary):
    """SWAG: a multiple-choice model, scored by accuracy."""

    name = "swag"

    def check_flags(self):
        common.check_split_files({"dev_file": ["do_eval"], "test_file": ["do_predict"]})
        super().check_flags()

    def prepare(self):
        self.dev_splits = {}
        if FLAGS.do_eval and FLAGS.dev_file:
            self.dev_splits["dev"] = read_swag(FLAGS.dev_file).head(FLAGS.max_eval_examples)
        self.dev_sets = {name: (batches(split), split.labels)
                         for name, split in self.dev_splits.items()}  # fmt: skip

    def read_training(self):
        if not FLAGS.train_file:
            raise app.UsageError("pass --train_file, or --nodo_train")
        return read_swag(FLAGS.train_file).head(FLAGS.max_train_examples)

    def build_model(self, training):
        return BertMultipleChoice.from_checkpoint(
            common.checkpoint_path(), NUM_CHOICES, sequence_length=FLAGS.max_seq_length,
            do_lower_case=FLAGS.do_lower_case, name=self.name)  # fmt: skip

    def training_dataset(self, model, training):
        common.log_truncated(model.preprocessor, [("train", training), *self.dev_splits.items()],
                             TEXTS)  # fmt: skip
        return (functools.partial(common.make_dataset, training, TEXTS, FLAGS.train_batch_size,
                                  training=True),
                int(np.ceil(len(training) / FLAGS.train_batch_size)))  # fmt: skip

    def dev_callback(self, output_dir, write):
        return trainer.DevMetrics(self.dev_sets, accuracy, output_dir, write) if self.dev_sets else None

    def finish(self, model, output_dir, write):
        if FLAGS.do_predict and FLAGS.test_file:
            test = read_swag(FLAGS.test_file, labelled=False)
            logits = model.predict(batches(test), verbose=0)
            if write:
                rows = [f"{i}\t{p}" for i, p in zip(test.ids, np.argmax(logits, axis=-1))]
                runs.write_atomically(os.path.join(output_dir, "swag_predictions.tsv"),
                                        "index\tprediction\n" + "\n".join(rows) + "\n")  # fmt: skip
        return {name: accuracy(model.predict(dataset, verbose=0), labels)
                for name, (dataset, labels) in self.dev_sets.items()}  # fmt: skip


def batches(split):
    return common.make_dataset(split, TEXTS, FLAGS.eval_batch_size, with_labels=False)


def run():
    """Fine-tunes (with --do_train); evaluates and predicts with the saved run."""
    return SwagBinary().run()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.info("dev metrics: %s", run())


if __name__ == "__main__":
    run_main(main)
