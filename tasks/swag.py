"""Fine-tunes BERT on SWAG: four-way multiple choice, scored by accuracy.

    python -m tasks.swag --train_file=train.csv --dev_file=val.csv --output_dir=runs/swag

Reads the SWAG CSV files (columns sent1, sent2, ending0..ending3, label; the original release's
other columns are ignored) or JSON lines with the same keys. Each choice is packed as
`[CLS] sent1 [SEP] sent2 ending [SEP]`, encoded on its own, scored, and the four scores are
soft-maxed against each other.
"""

import csv
import json
import os

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert.encoder import INPUT_NAMES
from keras_bert.heads import FoldChoices, MultipleChoiceHead
from keras_bert.tokenizer import BertPacker
from tasks import common

FLAGS = flags.FLAGS
flags.DEFINE_string("train_file", None, "SWAG training file (.csv or .jsonl).")
flags.DEFINE_string("dev_file", None, "SWAG dev file, labelled (.csv or .jsonl).")
flags.DEFINE_string("test_file", None, "SWAG test file; labels not needed (.csv or .jsonl).")
flags.adopt_module_key_flags(common)

NUM_CHOICES = 4
COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")


def read_swag(path, labelled=True):
    """Returns a Split with texts `context` (n,) and `endings` (n, 4), labels (n,) or None."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"SWAG file not found: {path}")
    with open(path, encoding="utf-8", newline="") as f:
        if path.endswith((".jsonl", ".json")):
            rows = []
            for line, text in enumerate(f, start=1):
                if text.strip():
                    try:
                        rows.append((line, json.loads(text)))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{line}: not valid JSON: {e}") from None
        else:
            rows = list(enumerate(csv.DictReader(f), start=2))
    contexts, endings, labels, ids = [], [], [], []
    for line, row in rows:
        missing = [c for c in COLUMNS + (("label",) if labelled else ()) if row.get(c) is None]
        if missing:
            raise ValueError(f"{path}:{line}: missing {', '.join(missing)}")
        contexts.append(row["sent1"])
        endings.append([f"{row['sent2']} {row[f'ending{i}']}" for i in range(NUM_CHOICES)])
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


def choice_preprocessor(tokenizer, sequence_length):
    """{context: (batch,), endings: (batch, 4)} -> encoder inputs of shape (batch, 4, seq)."""
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=sequence_length)

    def preprocess(texts):
        contexts = tf.repeat(texts["context"], NUM_CHOICES)  # (batch * 4,)
        endings = tf.reshape(texts["endings"], [-1])
        packed = packer(tokenizer(contexts), tokenizer(endings))
        return {k: tf.reshape(v, [-1, NUM_CHOICES, tf.shape(v)[-1]]) for k, v in packed.items()}

    return preprocess


def multiple_choice_model(encoder):
    inputs = {n: keras.Input((NUM_CHOICES, None), dtype="int32", name=n) for n in INPUT_NAMES}
    folded = {n: FoldChoices(name=f"fold_{n}")(x) for n, x in inputs.items()}
    head = MultipleChoiceHead(NUM_CHOICES, encoder.config.hidden_dropout_prob, name="choices")
    return keras.Model(inputs, head(encoder(folded)["pooled_output"]), name="swag")


def accuracy(logits, labels):
    return {"accuracy": float(np.mean(np.argmax(logits, axis=-1) == labels))}


def run():
    output_dir = FLAGS.output_dir or os.path.join("runs", "swag")
    strategy = common.create_strategy()
    with strategy.scope():
        encoder, tokenizer = common.load_pretrained()
        model = multiple_choice_model(encoder)
    preprocess = choice_preprocessor(tokenizer, FLAGS.max_seq_length)
    dev_sets = {}
    if FLAGS.do_eval and FLAGS.dev_file:
        dev = read_swag(FLAGS.dev_file).head(FLAGS.max_eval_examples)
        dev_sets["dev"] = (common.make_dataset(dev, preprocess, FLAGS.eval_batch_size,
                                               with_labels=False), dev.labels)  # fmt: skip
    chief = common.is_chief(strategy)
    evaluator = common.DevMetrics(dev_sets, accuracy, output_dir, write=chief)
    if FLAGS.do_train:
        if not FLAGS.train_file:
            raise app.UsageError("pass --train_file, or --nodo_train")
        train = read_swag(FLAGS.train_file).head(FLAGS.max_train_examples)
        common.fit(model, strategy,
                   common.make_dataset(train, preprocess, FLAGS.train_batch_size, training=True),
                   steps_per_epoch=int(np.ceil(len(train) / FLAGS.train_batch_size)),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   metrics=[keras.metrics.SparseCategoricalAccuracy("accuracy")],
                   callbacks=[evaluator] if dev_sets else [], output_dir=output_dir)  # fmt: skip
        common.save_run(common.run_dir_of(strategy, output_dir), model, tokenizer, {
                "task": "SWAG", "text_columns": ["context", "endings"],
                "labels": [str(i) for i in range(NUM_CHOICES)]})  # fmt: skip
    if FLAGS.do_predict and FLAGS.test_file:
        test = read_swag(FLAGS.test_file, labelled=False)
        logits = model.predict(common.make_dataset(test, preprocess, FLAGS.eval_batch_size,
                                                   with_labels=False), verbose=0)  # fmt: skip
        if chief:
            rows = [f"{i}\t{p}" for i, p in zip(test.ids, np.argmax(logits, axis=-1))]
            common.write_atomically(os.path.join(output_dir, "swag_predictions.tsv"),
                                    "index\tprediction\n" + "\n".join(rows) + "\n")  # fmt: skip
    # A run restored past its last epoch trains no more: evaluate what it restored.
    return evaluator.latest or (evaluator.evaluate() if dev_sets else {})


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.info("dev metrics: %s", run())


if __name__ == "__main__":
    app.run(main)
