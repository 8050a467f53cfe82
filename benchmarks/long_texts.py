"""Long texts: a classifier that reads every window of a text against one that reads its first
sequence_length tokens, on texts whose deciding sentence sits past the first window, as JSON.

    python -m benchmarks.long_texts --glue_dir=DIR --squad_file=FILE [--train_texts=800
        --test_texts=400 --variants=truncate,mean,max,attention --max_windows=8 --epochs=2]

Each text is encyclopedic filler (sentences of SQuAD passages, which carry no sentiment; test texts take theirs
from other passages and other SST-2 sentences than training texts) with
one SST-2 sentence placed in it, and takes that sentence's label. Half the texts hold it within
their first 100 filler tokens ("early"), half after at least --late_tokens of filler ("late"),
past the first window. Every variant fine-tunes MiniLM (or --checkpoint) on the same texts in
the same order with `compile()`'s recipe and scores the test texts, early and late apart:
  truncate  BertClassifier cutting each text at --sequence_length tokens;
  mean, max BertClassifier(max_windows=...) combining its windows' logits by their mean / max;
  attention BertClassifier(max_windows=..., window_pooling="attention"): the head on a learned
            weighting of the windows' [CLS] vectors.
"""

import json
import os
import time

import numpy as np
from absl import app, flags

import benchmarks

FLAGS = flags.FLAGS
flags.DEFINE_string("glue_dir", None, "The GLUE folder, holding SST-2/train.tsv.")
flags.DEFINE_string("squad_file", None, "A SQuAD JSON file whose passages are the filler.")
flags.DEFINE_string("checkpoint", None, "The checkpoint to fine-tune. Default: MiniLM.")
flags.DEFINE_list("variants", ["truncate", "mean", "max", "attention"],
                  "Models: truncate, or windows pooled by mean, max or attention.")
flags.DEFINE_integer("train_texts", 800, "Training texts (half early, half late).")
flags.DEFINE_integer("test_texts", 400, "Test texts (half early, half late), from other SST-2 "
                     "sentences and other passages than the training texts'.")
flags.DEFINE_integer("late_tokens", 200, "Filler words at least before a late sentence.")
flags.DEFINE_integer("filler_words", 320, "Filler words a text has in all, about.")
flags.DEFINE_integer("sequence_length", 128, "Tokens a window (or the truncated text) holds.")
flags.DEFINE_integer("max_windows", 8, "Windows a text is read in at most.")
flags.DEFINE_integer("epochs", 2, "Passes over the training texts.")
flags.DEFINE_integer("batch_size", 16, "Texts a step.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate of compile()'s recipe.")
flags.DEFINE_integer("seed", 0, "Seed of the texts and of the training.")
flags.mark_flags_as_required(["glue_dir", "squad_file"])


def filler_sentences(squad_file):
    """Sentences of the file's passages, in two halves by passage (training, test)."""
    with open(squad_file, encoding="utf-8") as f:
        passages = [p["context"] for a in json.load(f)["data"] for p in a["paragraphs"]]
    if len(passages) < 2:
        raise app.UsageError(f"--squad_file={squad_file} has {len(passages)} passage(s): give "
                             "one of at least two, a half for training texts and a half for "
                             "test texts")  # fmt: skip
    halves = ([], [])
    for i, passage in enumerate(passages):
        halves[i % 2].extend(s.strip() + "." for s in passage.split(". ") if s.strip())
    return halves


def sst2_train(glue_dir):
    """SST-2's training sentences and labels (a tab-separated file with a header)."""
    with open(os.path.join(glue_dir, "SST-2", "train.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [r[0] for r in rows], np.array([int(r[1]) for r in rows])


def make_texts(sentences, labels, filler, count, rng):
    """`count` texts, half early, half late: (texts, labels, late)."""
    texts, targets, late = [], [], []
    for i in range(count):
        pick = rng.integers(len(sentences))
        words, parts = 0, []
        while words < FLAGS.filler_words:
            parts.append(filler[rng.integers(len(filler))])
            words += len(parts[-1].split())
        is_late = i % 2 == 1
        # Where the sentence goes: after the filler sentences that end within the first 100
        # words (early), or after at least late_tokens words of them (late).
        cumulative = np.cumsum([len(p.split()) for p in parts])
        at = int(np.searchsorted(cumulative, FLAGS.late_tokens) + 1) if is_late else int(
            rng.integers(0, max(1, np.searchsorted(cumulative, 100))))  # fmt: skip
        parts.insert(min(at, len(parts)), sentences[pick])
        texts.append(" ".join(parts))
        targets.append(labels[pick])
        late.append(is_late)
    return texts, np.array(targets), np.array(late)


def run_variant(variant, train, test, checkpoint):
    import keras

    import keras_bert

    keras.utils.set_random_seed(FLAGS.seed)
    windows = {} if variant == "truncate" else {
        "max_windows": FLAGS.max_windows, "window_pooling": variant}  # fmt: skip
    model = keras_bert.BertClassifier.from_checkpoint(
        checkpoint, num_classes=2, sequence_length=FLAGS.sequence_length, **windows)
    model.compile(learning_rate=FLAGS.learning_rate)
    start = time.perf_counter()
    model.fit(train[0], train[1], batch_size=FLAGS.batch_size, epochs=FLAGS.epochs,
              shuffle=False, verbose=0)  # fmt: skip
    seconds = time.perf_counter() - start
    right = model.predict(test[0], batch_size=32, verbose=0).argmax(-1) == test[1]
    late = test[2]
    return {"variant": variant, "accuracy": float(right.mean()),
            "early_accuracy": float(right[~late].mean()),
            "late_accuracy": float(right[late].mean()), "train_seconds": round(seconds, 1)}


def main(argv):
    del argv
    from tasks.cli import default_checkpoint

    unknown = sorted(set(FLAGS.variants) - {"truncate", "mean", "max", "attention"})
    if unknown:
        raise app.UsageError(f"--variants: {', '.join(unknown)} unknown; give truncate, mean, "
                             "max and/or attention")  # fmt: skip
    checkpoint = FLAGS.checkpoint or default_checkpoint("--checkpoint")
    rng = np.random.default_rng(FLAGS.seed)
    sentences, labels = sst2_train(FLAGS.glue_dir)
    order = rng.permutation(len(sentences))
    half = len(order) // 2
    filler = filler_sentences(FLAGS.squad_file)
    train = make_texts([sentences[i] for i in order[:half]], labels[order[:half]], filler[0],
                       FLAGS.train_texts, rng)  # fmt: skip
    test = make_texts([sentences[i] for i in order[half:]], labels[order[half:]], filler[1],
                      FLAGS.test_texts, rng)  # fmt: skip
    runs = [run_variant(v, train, test, checkpoint) for v in FLAGS.variants]
    benchmarks.print_report({"bench": "long_texts", "settings": {
        name: FLAGS[name].value for name in ("train_texts", "test_texts", "late_tokens",
                                             "filler_words", "sequence_length", "max_windows",
                                             "epochs", "batch_size", "learning_rate", "seed")},
        "runs": runs})  # fmt: skip


if __name__ == "__main__":
    app.run(main)
