"""Pre-training speed, printed as JSON: data creation and training steps.

    python -m benchmarks.pretraining [--text ../shared/data/pretrain_text/gutenberg_nltk]

1. Instances per second of tasks.create_pretraining_data's instance building over the same
   tokenized text with --num_workers=1 and with 2 processes, alternating rounds.
2. Pre-training steps/s and real tokens/s of a BERT-base-sized pretrainer (masked positions
   gathered before the vocabulary projection) at batch 8, sequence 128, in float32 and
   mixed_bfloat16, alternating rounds; `--model=small`: the tests' small pretrainer instead.
   `--against_keras`: each also with Keras's SparseCategoricalCrossentropy and
   SparseCategoricalAccuracy as its masked-LM loss and accuracy, in place of keras_bert's
   (keras_bert/training/losses.py, keras_bert/training/metrics.py), and the ratio.
"""

import glob
import multiprocessing
import os
import statistics
import time

import keras
import numpy as np
from absl import app, flags

import benchmarks
import keras_bert  # noqa: F401  (selects the TensorFlow backend)
from benchmarks import time_alternating
from keras_bert import BertConfig, BertEncoder, BertPretrainer
from keras_bert.text.tokenizer import BertTokenizer
from keras_bert.training import pretraining
from tasks import create_pretraining_data, default_checkpoint, pretraining_text

FLAGS = flags.FLAGS
flags.DEFINE_string("text", os.path.join("tests", "data", "pretrain"), "Folder of .txt files.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_integer("train_steps", 3, "Training steps timed per precision per round.")
flags.DEFINE_enum("model", "base", ["base", "small"], "The pretrainer trained: BERT-base at batch "
                  "8, sequence 128, 20 predictions a sequence; or the tests' small model (hidden "
                  "64, 2 layers, a vocabulary of 30,522) at batch 32, sequence 64, 10 predictions "
                  "a sequence, as tests/test_pretrain_task.py trains it.")  # fmt: skip
flags.DEFINE_bool("against_keras", False, "Also train with Keras's SparseCategoricalCrossentropy "
                  "and SparseCategoricalAccuracy as the masked-LM loss and accuracy, keras_bert's "
                  "own (keras_bert/training/losses.py, metrics.py) replaced, and report the ratio of their "
                  "steps/s.")  # fmt: skip
flags.DEFINE_bool("creation", True, "Time instance creation (needs --text).")

# (config, batch size, sequence length, predictions a sequence) of each --model.
SMALL = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=128, max_position_embeddings=64)  # fmt: skip
SHAPES = {"base": (BertConfig(), 8, 128, 20), "small": (SMALL, 32, 64, 10)}


def creation(documents, special, workers):
    settings = {"seed": 1, "instance": {"max_seq_length": 128, "short_seq_prob": 0.1,
                                        "masked_lm_prob": 0.15, "max_predictions": 20,
                                        "whole_word": False}}  # fmt: skip
    work = [(documents, special, dupe, settings) for dupe in range(4)]
    start = time.perf_counter()
    if workers == 1:
        count = sum(len(create_pretraining_data._build(w)) for w in work)
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            count = sum(len(r) for r in pool.imap(create_pretraining_data._build, work))
    return count / (time.perf_counter() - start)


def training_step(precision, forms):
    keras.config.set_dtype_policy(precision)
    config, batch, length, predictions = SHAPES[FLAGS.model]
    model = BertPretrainer(BertEncoder(**config.to_dict()))
    if forms == "keras":
        loss = {**model.default_loss(),
                "masked_lm": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
        accuracy = {name: [keras.metrics.SparseCategoricalAccuracy("accuracy")]
                    for name in ("masked_lm", "next_sentence")}  # fmt: skip
        model.compile(keras.optimizers.AdamW(1e-5), loss=loss, weighted_metrics=accuracy)
    else:  # the model's own
        model.compile(keras.optimizers.AdamW(1e-5))
    rng = np.random.default_rng(0)
    x = {"input_word_ids": rng.integers(1000, 30000, (batch, length)).astype("int32"),
         "input_mask": np.ones((batch, length), "int32"),
         "input_type_ids": np.zeros((batch, length), "int32"),
         "masked_lm_positions": np.sort(rng.choice(length, (batch, predictions)),
                                        axis=1).astype("int32")}  # fmt: skip
    y = {"masked_lm": rng.integers(1000, 30000, (batch, predictions)).astype("int32"),
         "next_sentence": rng.integers(0, 2, batch).astype("int32")}  # fmt: skip
    model.train_on_batch(x, y)
    keras.config.set_dtype_policy("float32")
    return lambda: model.train_on_batch(x, y)


def main(argv):
    del argv
    report = {}
    if FLAGS.creation:
        report.update(creation_report())
    forms = ("keras_bert", "keras") if FLAGS.against_keras else ("keras_bert",)
    steps = {(p, form): training_step(p, form)
             for p in ("float32", "mixed_bfloat16") for form in forms}  # fmt: skip
    rounds = time_alternating({job: lambda step=step: [step() for _ in range(FLAGS.train_steps)]
                               for job, step in steps.items()}, FLAGS.rounds)  # fmt: skip
    seconds = {job: statistics.median(r) / FLAGS.train_steps for job, r in rounds.items()}
    _, batch, length, _ = SHAPES[FLAGS.model]
    name = {"base": "bert_base", "small": "small_model"}[FLAGS.model]
    timed = report[f"{name}_pretraining_batch{batch}_seq{length}"] = {}
    for precision in ("float32", "mixed_bfloat16"):
        timed[precision] = {form: {"steps_per_s": 1 / s, "tokens_per_s": batch * length / s}
                            for form in forms for s in [seconds[precision, form]]}  # fmt: skip
        if FLAGS.against_keras:
            timed[precision]["speedup_over_keras"] = (
                seconds[precision, "keras"] / seconds[precision, "keras_bert"])  # fmt: skip
    benchmarks.print_report(report)


def creation_report():
    tokenizer = BertTokenizer(os.path.join(default_checkpoint(), "vocab.txt"))
    documents = []
    for path in sorted(glob.glob(os.path.join(FLAGS.text, "*.txt"))):
        text = pretraining_text.read_documents(path, "text", "utf-8", "replace")
        documents.extend(pretraining_text.tokenize_documents(text, tokenizer))
    special = pretraining.special_ids(tokenizer)
    rates = {1: [], 2: []}
    for r in range(FLAGS.rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            rates[workers].append(creation(documents, special, workers))
    return {
        "documents": len(documents),
        "creation_instances_per_s": {f"{w}_process": statistics.median(v) for w, v in rates.items()},
        "creation_speedup_2_over_1": statistics.median(rates[2]) / statistics.median(rates[1]),
    }  # fmt: skip


if __name__ == "__main__":
    flags.adopt_module_key_flags(benchmarks)  # --help lists --results
    app.run(main)
