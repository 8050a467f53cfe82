"""What a run writes while it trains: its backup (weights, optimizer state and the state of
its random draws, written whole at every save) and the stop on a diverged run."""

import glob
import math
import os
import time

import h5py
import keras
import numpy as np
import tensorflow as tf
from absl import app, logging

from keras_bert.text import textfiles
from keras_bert.training import optimization
from tasks.runs import record

DIVERGED = ("training diverged; lower --learning_rate or check the training data, and start "
            "the run again with --overwrite_output_dir")


def check_finite_weights(model):
    """Refuses (ValueError, one line) a model with a weight that holds nan or inf: what a run
    that diverged holds, which is neither backed up nor saved as if it were trained."""
    for weight in model.weights:
        floating = tf.as_dtype(weight.dtype).is_floating
        if floating and not bool(tf.reduce_all(tf.math.is_finite(weight))):
            raise ValueError(f"{weight.path} holds nan or inf: {DIVERGED}")


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops training (ValueError, one line) at the first step whose loss is nan or inf: the
    weights are not numbers from there on, and a run left to go on exited 0 with a model that
    predicts one class (--learning_rate=1e30 on SST-2: dev accuracy 0.5)."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            step = int(self.model.optimizer.iterations)
            raise ValueError(f"the training loss is {float(loss)} at step {step}: {DIVERGED}")


# Where a backup keeps the state of the model's random draws, beside Keras's weights.
RANDOM_STATE = "keras_bert_random_state"


def seed_generators(model):
    """Every keras.random.SeedGenerator of the model's layers (dropout's, say), in the order of
    its layers: the state of the random draws that training makes, which Keras's weights do
    not hold."""
    return [generator for layer in model._flatten_layers()
            for generator in layer._seed_generators]  # fmt: skip


def save_random_state(model, path):
    """Adds the seed generators' states, int64 (generators, 2), to the weights file `path`."""
    states = np.array([generator.state.numpy() for generator in seed_generators(model)],
                      "int64").reshape(-1, 2)  # (0, 2): no dropout, say
    with h5py.File(path, "a") as f:
        f.create_dataset(RANDOM_STATE, data=states)


def restore_random_state(model, path):
    """Sets the seed generators' states from the weights file `path`, so that a resumed run
    draws the dropout masks the uninterrupted run would have drawn. A backup without them
    (written before they were kept) leaves the states as they are."""
    with h5py.File(path, "r") as f:
        if RANDOM_STATE not in f:
            return
        states = f[RANDOM_STATE][()]
    generators = seed_generators(model)
    if states.shape != (len(generators), 2):
        raise ValueError(f"it holds {len(states)} random states, the model has "
                         f"{len(generators)} seed generators")  # fmt: skip
    for generator, state in zip(generators, states):
        generator.state.assign(state)


class RunBackup(keras.callbacks.Callback):
    """Backs up the model's weights, optimizer state and the state of its random draws every
    `save_freq` batches and at the end of each epoch, under a temporary name that is then
    renamed: a kill at any instant leaves the previous complete backup. (Keras's
    BackupAndRestore rewrites its file in place; a kill while it wrote left a run that could
    never start again.) The optimizer's step counter, restored with it, says where the run
    stopped, to the batch; the random state, that the rest of the run draws what it would have
    drawn uninterrupted."""

    def __init__(self, backup_dir, save_freq="epoch"):
        super().__init__()
        self.backup_dir = backup_dir
        self.path = os.path.join(backup_dir, "latest.weights.h5")
        self.save_freq = save_freq
        self._batches = 0  # since the last backup
        self._in_epoch = 0  # batches of this epoch so far

    def restore(self, model):
        """Loads the backup into a compiled model; returns the batches it had trained on (0
        without one; under gradient accumulation, more than its optimizer's updates)."""
        for stale in glob.glob(os.path.join(self.backup_dir, "*.tmp-*")):
            os.remove(stale)  # a kill while a backup was written left it
        if not os.path.exists(self.path):
            return 0
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        try:
            model.load_weights(self.path)
            restore_random_state(model, self.path)
        except (OSError, ValueError) as e:
            raise app.UsageError(f"{self.path} does not fit this run ({e}); pass "
                                 "--overwrite_output_dir to start it again") from None  # fmt: skip
        return optimization.batches_done(model.optimizer)

    def on_epoch_begin(self, epoch, logs=None):
        self._in_epoch = 0

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the epoch's last batch done: with --steps_per_execution, Keras calls this
        # once for each execution of several batches.
        self._batches += batch + 1 - self._in_epoch
        self._in_epoch = batch + 1
        # The epoch's last batch is backed up at the epoch's end, after the callbacks that
        # write its metrics: a backup that holds the epoch comes after them.
        last = self._in_epoch == (self.params or {}).get("steps")
        if self.save_freq != "epoch" and self._batches >= self.save_freq and not last:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        if self._batches:  # each epoch ends backed up
            self.save()

    def save(self):
        check_finite_weights(self.model)  # a backup that went on from nan would be worthless
        start = time.perf_counter()
        record(self.backup_dir)
        os.makedirs(self.backup_dir, exist_ok=True)
        tmp = os.path.join(self.backup_dir, f"latest.tmp-{os.getpid()}.weights.h5")
        try:
            self.model.save_weights(tmp, overwrite=True)
            save_random_state(self.model, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())  # on disk before it replaces the previous backup
            os.replace(tmp, self.path)
        except (OSError, RuntimeError) as e:  # h5py reports a failed write as either
            raise OSError(f"could not write the backup {self.path} ({textfiles.write_failure(e)}); "
                          "make room, then run the same command again: it goes on from the "
                          "previous backup") from None  # fmt: skip
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)  # a partial backup is worth nothing, and may be large
        self._batches = 0
        seconds = time.perf_counter() - start
        if seconds > 2:  # a large model's optimizer state on a slow disk: say what the wait was
            logging.info("backed up the training state to %s in %.1f s", self.path, seconds)
