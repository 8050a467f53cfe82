"""Fine-tunes BERT on a GLUE task and reports the task's official metrics.

    python -m tasks.glue --task_name=MRPC --data_dir=path/to/glue/MRPC --output_dir=runs/mrpc

Reads the standard GLUE folder layout (train.tsv, dev.tsv, test.tsv; MNLI's dev_matched.tsv and
friends) or, with --tfds, the `glue/<task>` datasets of tensorflow-datasets prepared locally.
With --do_predict, writes the test predictions in the GLUE submission format (<TASK>.tsv with
`index` and `prediction`; for MNLI also the AX diagnostic set, from --diagnostic_file).
With --max_windows, texts longer than --max_seq_length are read whole, in windows.
"""

import csv
import dataclasses
import functools
import io
import math
import os
import sys

import numpy as np
from absl import app, flags, logging

from keras_bert import BertClassifier
from keras_bert.text import textfiles
from tasks import common, driver, glue_metrics, run_main, runs, trainer

FLAGS = flags.FLAGS
flags.DEFINE_string("task_name", "SST-2", "GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, "
                    "QNLI, RTE or WNLI (case-insensitive).")
flags.DEFINE_string("data_dir", None, "Folder with the task's train.tsv, dev.tsv and test.tsv.")
flags.DEFINE_bool("tfds", False, "Read glue/<task> from tensorflow-datasets instead of TSVs.")
flags.DEFINE_string("tfds_data_dir", None, "tensorflow-datasets data_dir (prepared locally).")
flags.DEFINE_string("diagnostic_file", None, "AX diagnostic.tsv, predicted with an MNLI model.")
common.define_window_flags("each scored, a text's logits the mean of its windows' (of a pair, "
                            "the second text is windowed; the first is in every window)")
flags.adopt_module_key_flags(common)


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    text_columns: tuple  # header names of the text columns
    label_column: str | None
    labels: tuple | None  # None: regression
    metrics: tuple  # names of the official metrics
    tfds_name: str
    tfds_texts: tuple
    dev_files: tuple = (("dev", "dev.tsv"),)
    test_files: tuple = (("", "test.tsv"),)
    headerless_columns: tuple | None = None  # column names of header-less train/dev files

    @property
    def submission_names(self):
        return [self.name + suffix for suffix, _ in self.test_files]


_PAIR = ("sentence1", "sentence2")
TASKS = {
    task.name.lower(): task
    for task in [
        Task("CoLA", ("sentence",), "label", ("0", "1"), ("mcc",), "cola", ("sentence",),
             headerless_columns=("source", "label", "original_label", "sentence")),
        Task("SST-2", ("sentence",), "label", ("0", "1"), ("accuracy",), "sst2", ("sentence",)),
        Task("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("accuracy", "f1"),
             "mrpc", _PAIR),
        Task("STS-B", _PAIR, "score", None, ("pearson", "spearman"), "stsb", _PAIR),
        Task("QQP", ("question1", "question2"), "is_duplicate", ("0", "1"), ("accuracy", "f1"),
             "qqp", ("question1", "question2")),
        Task("MNLI", _PAIR, "gold_label", ("contradiction", "entailment", "neutral"),
             ("accuracy",), "mnli", ("premise", "hypothesis"),
             dev_files=(("dev_matched", "dev_matched.tsv"), ("dev_mismatched", "dev_mismatched.tsv")),
             test_files=(("-m", "test_matched.tsv"), ("-mm", "test_mismatched.tsv"))),
        Task("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"),
             ("accuracy",), "qnli", ("question", "sentence")),
        Task("RTE", _PAIR, "label", ("entailment", "not_entailment"), ("accuracy",), "rte", _PAIR),
        Task("WNLI", _PAIR, "label", ("0", "1"), ("accuracy",), "wnli", _PAIR),
    ]
}  # fmt: skip


def get_task(name):
    task = TASKS.get(name.lower())
    if task is None:
        raise app.UsageError(f"unknown GLUE task {name!r}; use one of "
                             f"{', '.join(t.name for t in TASKS.values())}")  # fmt: skip
    return task


def read_tsv(path, task, labelled):
    """Reads a GLUE TSV into a Split, checking every row; errors name the file and line."""
    text = textfiles.read_text(path, f"{task.name} TSV file")
    csv.field_size_limit(sys.maxsize)
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE))
    if task.headerless_columns and labelled:
        header, first_line = list(task.headerless_columns), 1
    else:
        header, rows, first_line = rows[0] if rows else [], rows[1:], 2
    wanted = list(task.text_columns) + ([task.label_column] if labelled else [])
    missing = [name for name in wanted if name not in header]
    if missing:
        raise ValueError(f"{path}:{first_line - 1}: no column(s) {', '.join(missing)} in the "
                         f"header {header}; is this the {task.name} file?")  # fmt: skip
    index = {name: header.index(name) for name in wanted}
    id_column = next((header.index(n) for n in ("index", "id") if n in header), None)
    texts, labels, ids = {name: [] for name in task.text_columns}, [], []
    empty_sides = EmptySides(task, path)
    for line, row in enumerate(rows, start=first_line):
        if len(row) != len(header):
            raise ValueError(f"{path}:{line}: expected {len(header)} tab-separated columns, "
                             f"found {len(row)}")  # fmt: skip
        empty_sides.check([row[index[name]] for name in task.text_columns], f"{path}:{line}")
        for name in task.text_columns:
            texts[name].append(row[index[name]])
        ids.append(row[id_column] if id_column is not None else str(line - first_line))
        if labelled:
            labels.append(parse_label(row[index[task.label_column]], task, f"{path}:{line}"))
    if not ids:
        raise ValueError(f"{path} has no examples")
    empty_sides.report()
    label_dtype = "float32" if task.labels is None else "int32"
    return common.Split(texts, np.array(labels, label_dtype) if labelled else None, ids)


class EmptySides:
    """Checks a file's rows for empty texts (nothing but whitespace). A row with no text at all
    is refused: there is nothing to classify. An empty side of a pair is kept, as the original
    BERT code keeps it (the official QQP train.tsv has two empty question2), and counted in one
    warning with the first place, so that it is never silent."""

    def __init__(self, task, source):
        self.task, self.source, self.count, self.first = task, source, 0, None

    def check(self, row_texts, where):
        empty = [name for name, text in zip(self.task.text_columns, row_texts) if not text.strip()]
        if len(empty) == len(row_texts):
            raise ValueError(f"{where}: empty text ({', '.join(empty)}); fix or remove the row")
        if empty:
            self.count += 1
            self.first = self.first or f"{where} ({empty[0]})"

    def report(self):
        if self.count:
            logging.warning("%s: %d examples with one side of the pair empty, kept as they are "
                            "(the first: %s)", self.source, self.count, self.first)  # fmt: skip


def parse_label(value, task, where):
    if task.labels is None:
        try:
            score = float(value)
        except ValueError:
            raise ValueError(f"{where}: label {value!r} is not a number") from None
        if not math.isfinite(score):
            raise ValueError(f"{where}: label {value!r} is not a finite number; fix or remove "
                             "the row")  # fmt: skip
        if not 0 <= score <= 5:  # STS-B, the one regression task, scores similarity 0 to 5
            raise ValueError(f"{where}: score {value!r} is outside {task.name}'s 0 to 5 scale; "
                             "fix or remove the row")  # fmt: skip
        return score
    if value not in task.labels:
        raise ValueError(f"{where}: label {value!r} is not one of {task.name}'s labels "
                         f"{list(task.labels)}")  # fmt: skip
    return task.labels.index(value)


def read_tfds(task, split):
    """Reads glue/<task> from tensorflow-datasets (prepared beforehand; nothing is downloaded)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise app.UsageError("--tfds needs tensorflow-datasets: pip install -e '.[tfds]', or "
                             "pass --data_dir") from None  # fmt: skip

    name = f"glue/{task.tfds_name}"
    try:
        dataset, info = tfds.load(name, split=split, with_info=True, data_dir=FLAGS.tfds_data_dir,
                                  download=False)  # fmt: skip
    except AssertionError:  # how tensorflow-datasets says that the data was never prepared
        where = tfds.builder(name, data_dir=FLAGS.tfds_data_dir).data_dir
        raise app.UsageError(f"--tfds: {name} is not prepared in {where}; prepare it where the "
                             f"network allows (tfds build {name}) and pass its data_dir as "
                             "--tfds_data_dir, or pass --data_dir (the TSVs)") from None
    names = None if task.labels is None else info.features["label"].names
    texts, labels, ids = {name: [] for name in task.text_columns}, [], []
    empty_sides = EmptySides(task, f"glue/{task.tfds_name} {split}")
    for example in tfds.as_numpy(dataset):
        row_texts = [example[theirs].decode("utf-8") for theirs in task.tfds_texts]
        empty_sides.check(row_texts, f"glue/{task.tfds_name} {split} idx {example['idx']}")
        for ours, text in zip(task.text_columns, row_texts):
            texts[ours].append(text)
        ids.append(str(example["idx"]))
        label = example["label"]
        if task.labels is None:
            labels.append(float(label))
        elif label >= 0:  # test splits carry -1
            # NLI tasks share label names with the TSVs; the others are 0/1 in both, by index.
            by_name = set(names) == set(task.labels)
            labels.append(task.labels.index(names[label]) if by_name else int(label))
    empty_sides.report()
    dtype = "float32" if task.labels is None else "int32"
    return common.Split(texts, np.array(labels, dtype) if labels else None, ids)


def load_splits(task):
    """Returns train, {dev name: split} and {submission name: test split}."""
    if FLAGS.tfds:
        dev_names = [n.replace("dev", "validation") for n, _ in task.dev_files]
        test_names = [f.replace(".tsv", "") for _, f in task.test_files]
        return (read_tfds(task, "train"),
                {name: read_tfds(task, split) for (name, _), split in zip(task.dev_files, dev_names)},
                {sub: read_tfds(task, split) for sub, split in zip(task.submission_names, test_names)})  # fmt: skip
    if not FLAGS.data_dir:
        raise app.UsageError("pass --data_dir (a GLUE task folder) or --tfds")
    textfiles.check_folder(FLAGS.data_dir, "--data_dir")
    path = lambda name: os.path.join(FLAGS.data_dir, name)
    train = read_tsv(path("train.tsv"), task, True) if FLAGS.do_train else None
    dev = {n: read_tsv(path(f), task, True) for n, f in task.dev_files} if FLAGS.do_eval else {}
    test = {}
    if FLAGS.do_predict:
        test = {sub: read_tsv(path(f), task, False)
                for sub, (_, f) in zip(task.submission_names, task.test_files)}  # fmt: skip
        if task.name == "MNLI" and FLAGS.diagnostic_file:
            test["AX"] = read_tsv(FLAGS.diagnostic_file, task, False)
    return train, dev, test


def write_submission(path, task, ids, logits):
    if task.labels is None:
        rows = [f"{i}\t{score:.3f}" for i, score in zip(ids, logits[:, 0])]
    else:
        rows = [f"{i}\t{task.labels[p]}" for i, p in zip(ids, np.argmax(logits, axis=-1))]
    runs.write_atomically(path, "index\tprediction\n" + "\n".join(rows) + "\n")


class GlueBinary(driver.TaskBinary):
    """A GLUE task: a classifier (a regressor for STS-B) on single sentences or pairs."""

    def __init__(self, task):
        self.task, self.name = task, task.name.lower()

    input_flags = ("data_dir", "tfds", "tfds_data_dir")  # dev and test data come from there too

    def check_flags(self):
        FLAGS.task_name = self.task.name  # one spelling in the run's settings: sst-2 is SST-2
        if FLAGS.tfds and FLAGS.data_dir:
            raise app.UsageError("--tfds and --data_dir each name where the data is; pass one")
        if FLAGS.tfds_data_dir and not FLAGS.tfds:
            raise app.UsageError("--tfds_data_dir is read only with --tfds; pass that, or leave "
                                 "out --tfds_data_dir")  # fmt: skip
        if FLAGS.diagnostic_file and not (self.task.name == "MNLI" and FLAGS.do_predict):
            raise app.UsageError("--diagnostic_file (AX) is read only by an MNLI run with "
                                 "--do_predict")  # fmt: skip
        common.check_window_flags()
        super().check_flags()

    def prepare(self):
        self.train, dev, self.test = load_splits(self.task)
        self.dev_splits = {name: split.head(FLAGS.max_eval_examples) for name, split in dev.items()}
        self.dev_sets = {name: (self.batches(split), split.labels)
                         for name, split in self.dev_splits.items()}  # fmt: skip

    def batches(self, split):
        return common.make_dataset(split, self.task.text_columns, FLAGS.eval_batch_size,
                                   with_labels=False)  # fmt: skip

    def metrics(self, logits, labels):
        return glue_metrics.compute(self.task, logits, labels)

    def training_files(self):
        return [] if FLAGS.tfds else [os.path.join(FLAGS.data_dir, "train.tsv")]

    def read_training(self):
        return self.train.head(FLAGS.max_train_examples)

    def build_model(self, training):
        labels = self.task.labels
        return BertClassifier.from_checkpoint(
            common.checkpoint_path(), len(labels) if labels else 1,
            sequence_length=FLAGS.max_seq_length, num_segments=len(self.task.text_columns),
            do_lower_case=FLAGS.do_lower_case, labels=labels, max_windows=FLAGS.max_windows,
            stride=FLAGS.window_stride, name=self.name)  # fmt: skip

    def training_dataset(self, model, training):
        common.log_truncated(model.preprocessor, [("train", training), *self.dev_splits.items()],
                             self.task.text_columns)  # fmt: skip
        return (functools.partial(common.make_dataset, training, self.task.text_columns,
                                  FLAGS.train_batch_size, training=True),
                int(np.ceil(len(training) / FLAGS.train_batch_size)))  # fmt: skip

    def dev_callback(self, output_dir, write):
        if self.dev_sets:
            return trainer.DevMetrics(self.dev_sets, self.metrics, output_dir, write)
        return None

    def finish(self, model, output_dir, write):
        for name, split in self.test.items():
            logits = model.predict(self.batches(split), verbose=0)
            if write:
                write_submission(os.path.join(output_dir, f"{name}.tsv"), self.task, split.ids,
                                 logits)  # fmt: skip
        return {name: self.metrics(model.predict(dataset, verbose=0), labels)
                for name, (dataset, labels) in self.dev_sets.items()}  # fmt: skip


def run(task):
    """Fine-tunes (with --do_train) and evaluates; always evaluates and predicts with the saved
    run in --output_dir. Returns the dev metrics (empty without --do_eval)."""
    return GlueBinary(task).run()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    task = get_task(FLAGS.task_name)
    results = run(task)
    if results:
        logging.info("dev metrics: %s", results)


if __name__ == "__main__":
    run_main(main)
