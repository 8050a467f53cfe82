"""What a training run says while it trains: what it is doing before the first step, then loss,
examples/s and tokens/s every few steps, in the log and in TensorBoard.

On a terminal, Keras's progress bar runs as well and the speed is logged once per epoch; when the
output goes to a file or a pipe (a job, CI, `| tee`), the bar is replaced by these lines, which a
file shows as they come (a bar that rewrites one line stays silent there for minutes).
"""

import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging


def on_a_terminal():
    return sys.stdout.isatty()


def step_sizes(model, dataset, batches=16):
    """(examples, real tokens) per training step: the means over the first `batches` batches of
    `dataset` (raw data) after the model's preprocessing. Tokens are non-padding positions; a
    multiple-choice example counts the tokens of all its choices, a SQuAD question those of all
    its windows."""
    examples, tokens, seen = 0, 0, 0
    for element in model.make_dataset(dataset.take(batches)):
        x = element[0] if isinstance(element, tuple) else element
        mask = x.get("input_mask", x.get("padding_mask")) if isinstance(x, dict) else None
        if mask is None:
            return None
        examples += int(tf.shape(mask)[0])
        tokens += int(tf.reduce_sum(tf.cast(mask, tf.int64)))
        seen += 1
    return (examples / seen, tokens / seen) if seen else None


class TrainingLog(keras.callbacks.Callback):
    """Logs what training does: the slow first step (tracing and compiling the training graph),
    then every `every` steps the loss, examples/s and tokens/s over those steps (with
    `periodic`; otherwise once per epoch), and writes the speeds to TensorBoard (`log_dir`).
    `step` is the number of steps done before the next `fit` call (a resumed run's included)."""

    def __init__(self, sizes, every, total_steps, periodic, log_dir=None):
        super().__init__()
        self.examples, self.tokens = sizes or (None, None)
        self.every, self.total_steps, self.periodic = max(1, every), total_steps, periodic
        self.writer = tf.summary.create_file_writer(log_dir) if log_dir else None
        self.step, self.mark = 0, None

    def on_train_begin(self, logs=None):
        if self.mark is None:
            logging.info("building the training step (the first step traces and compiles it)")
        self.begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        now = time.perf_counter()
        if self.mark is None:  # the first step of the run
            logging.info("first step done in %.1f s; training", now - self.begin)
            self.mark = self.epoch_mark = (now, self.step)
            return
        if self.step % self.every == 0:
            speed = self._speed(self.mark, now)
            self.mark = (now, self.step)
            self._write(speed)
            if self.periodic:
                loss = (logs or {}).get("loss")
                logging.info("step %d/%d: loss %s, %s", self.step, self.total_steps,
                             "?" if loss is None else f"{float(loss):.4f}",
                             _describe(speed))  # fmt: skip

    def on_epoch_end(self, epoch, logs=None):
        if self.mark is None:
            return
        now = time.perf_counter()
        if not self.periodic:
            logging.info("epoch %d: %s", epoch + 1, _describe(self._speed(self.epoch_mark, now)))
        self.epoch_mark = (now, self.step)

    def _speed(self, mark, now):
        seconds, steps = now - mark[0], self.step - mark[1]
        speed = {"steps/s": steps / seconds if seconds > 0 else float("nan")}
        if self.examples is not None:
            speed["examples/s"] = speed["steps/s"] * self.examples
            speed["tokens/s"] = speed["steps/s"] * self.tokens
        return speed

    def _write(self, speed):
        if self.writer is None:
            return
        with self.writer.as_default(step=self.step):
            for name, value in speed.items():
                if np.isfinite(value):
                    tf.summary.scalar(name.replace("/", "_per_"), value)
        self.writer.flush()


def _describe(speed):
    parts = [f"{speed['steps/s']:.2f} steps/s"]
    if "examples/s" in speed:
        parts += [f"{speed['examples/s']:,.1f} examples/s", f"{speed['tokens/s']:,.0f} tokens/s"]
    return ", ".join(parts)


def speed_log_dir(output_dir):
    return os.path.join(output_dir, "logs", "speed")
