"""Training a run: the strategy, the resumable fit with its callbacks, and a fine-tuning
run's files. The fine-tuning driver (tasks/driver.py) and tasks.pretrain call it; the flags it
reads are tasks/common.py's.

A run's output_dir holds:
  backup/        training state; a killed run restarts from it (backups.RunBackup)
  logs/          TensorBoard: train/ from Keras (every --log_every_steps), speed/ (steps/s,
                 examples/s, tokens/s), dev/ with the task's metrics
  metrics.json   the task's dev metrics after each epoch (pre-training: history.json, the
                 training metrics of each loop)
  model.keras    the fine-tuned task model: vocabulary, labels and settings inside (for export)
  predictions    task-specific files
Every file is written under a temporary name and renamed, so none is ever half-written.
"""

import json
import os

import keras
import tensorflow as tf
from absl import app, flags, logging

import tasks
from keras_bert.serving.servable import PRECISIONS
from keras_bert.text import textfiles
from keras_bert.training import distribute
from tasks import backups, common, progress, runs  # noqa: F401  (common defines the flags read here)

FLAGS = flags.FLAGS


def create_strategy():
    """The strategy and mixed-precision policy the flags ask for."""
    strategy = distribute.create_strategy(FLAGS.strategy, FLAGS.num_cpu_devices, FLAGS.tpu)
    if FLAGS.mixed_precision == "auto":  # resolved before the run records its settings
        fast, why = distribute.bfloat16_is_fast(strategy)
        FLAGS.mixed_precision = "bfloat16" if fast else "none"
        logging.info("--mixed_precision=auto: %s, as %s", FLAGS.mixed_precision, why)
    precision = "float32" if FLAGS.mixed_precision == "none" else FLAGS.mixed_precision
    keras.config.set_dtype_policy(PRECISIONS[precision])
    keras.utils.set_random_seed(FLAGS.seed)
    logging.info("strategy %s with %d replicas, dtype policy %s", FLAGS.strategy,
                 strategy.num_replicas_in_sync, keras.config.dtype_policy().name)  # fmt: skip
    return strategy


def is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)  # fmt: skip


class DevMetrics(keras.callbacks.Callback):
    """After each epoch: predict the dev sets, compute the task's metrics, log them to
    TensorBoard (logs/dev) and to metrics.json."""

    def __init__(self, dev_sets, metric_fn, output_dir, write):
        super().__init__()
        self.dev_sets = dev_sets  # {name: (dataset, labels)}
        self.metric_fn = metric_fn
        self.path = os.path.join(output_dir, "metrics.json")
        self.write = write
        runs.record(os.path.join(output_dir, "logs"))
        self.writer = tf.summary.create_file_writer(os.path.join(output_dir, "logs", "dev"))
        self.latest = {}

    def evaluate(self):
        results = {}
        for name, (dataset, labels) in self.dev_sets.items():
            logits = self.model.predict(dataset, verbose=0)
            results[name] = self.metric_fn(logits, labels)
        return results

    def on_epoch_end(self, epoch, logs=None):
        results = self.latest = self.evaluate()
        logging.info("epoch %d dev metrics: %s", epoch + 1, results)
        if not self.write:
            return
        history = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                history = [h for h in json.load(f) if h["epoch"] < epoch + 1]
        history.append({"epoch": epoch + 1, **results})
        runs.write_json(self.path, history)
        with self.writer.as_default(step=epoch + 1):
            for name, metrics in results.items():
                for key, value in metrics.items():
                    tf.summary.scalar(f"{name}/{key}", value)


class HistoryFile(keras.callbacks.Callback):
    """After each epoch (a pre-training loop), its training metrics added to the JSON file
    `path` ({metric: [value of each epoch]}). A resumed run goes on from the epochs its backup
    holds, so the file holds every epoch of the run, not only those this process trained."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        runs.record(path)

    def on_epoch_end(self, epoch, logs=None):
        history = self.read()
        for name, value in (logs or {}).items():
            history[name] = [*history.get(name, [])[:epoch], float(value)]
        runs.write_json(self.path, history)

    def read(self):
        if not os.path.exists(self.path):
            return {}
        with open(self.path, encoding="utf-8") as f:
            return json.load(f)


def jit_compile(strategy):
    """--jit_compile, or its default for the strategy's devices: XLA on TPUs, and on one GPU
    (Keras compiles the step of all a MirroredStrategy's replicas as one XLA computation, which
    XLA cannot place over several devices)."""
    tpu, replicas = distribute.is_tpu(strategy), strategy.num_replicas_in_sync
    if FLAGS.jit_compile is not None:
        if tpu and not FLAGS.jit_compile:
            raise app.UsageError("--nojit_compile: a TPU runs XLA-compiled steps only; leave "
                                 "the flag out")  # fmt: skip
        if FLAGS.jit_compile and not tpu and replicas > 1:
            raise app.UsageError(f"--jit_compile with --strategy={FLAGS.strategy} over "
                                 f"{replicas} replicas: XLA cannot place one step over several "
                                 "devices; leave the flag out, or train on one device")  # fmt: skip
        return FLAGS.jit_compile
    return tpu or (replicas == 1 and bool(tf.config.list_logical_devices("GPU")))


def compile_options(strategy):
    """The keyword arguments of compile() that the flags set besides the recipe."""
    jit = jit_compile(strategy)
    logging.info("training steps %s, %d per execution",
                 "compiled with XLA, on static shapes" if jit else "packed, without XLA",
                 FLAGS.steps_per_execution)  # fmt: skip
    return {"jit_compile": jit, "steps_per_execution": FLAGS.steps_per_execution}


def fit(model, strategy, make_stream, steps_per_epoch, callbacks, output_dir):
    """Compiles with the library's recipe (AdamW, warmup + linear decay, clipping; the model's
    own loss and metrics) and fits on an endless stream of batches of raw strings
    (`make_stream()`; epochs of `steps_per_epoch` batches) for
    --num_train_epochs (the last epoch cut short when fractional), resuming from output_dir's
    backup."""
    replicas = strategy.num_replicas_in_sync
    if distribute.is_tpu(strategy) and FLAGS.train_batch_size % replicas:
        raise app.UsageError(f"--train_batch_size={FLAGS.train_batch_size} does not split evenly "
                             f"over the TPU's {replicas} cores: pass a multiple of {replicas}")
    total_steps = max(1, int(steps_per_epoch * FLAGS.num_train_epochs))
    with strategy.scope():
        model.compile(learning_rate=FLAGS.learning_rate, total_steps=total_steps,
                      warmup_proportion=FLAGS.warmup_proportion,
                      weight_decay=FLAGS.weight_decay, clipnorm=FLAGS.clip_norm,
                      layer_decay=FLAGS.layer_decay, **compile_options(strategy))  # fmt: skip
    return fit_resumably(model, strategy, make_stream,
                         min(steps_per_epoch, total_steps),
                         total_steps, callbacks, output_dir, FLAGS.save_checkpoints_steps)  # fmt: skip


def fit_resumably(model, strategy, make_stream, batches_per_epoch, total_batches, callbacks,
                  output_dir, save_every=None):  # fmt: skip
    """model.fit on an endless stream of batches (`make_stream()`) until `total_batches`, backed
    up every `save_every` batches and each epoch. A backup is restored first: its optimizer
    step says how many batches are done, and its random state what the model draws next, so
    the run goes on from that batch of the same (seeded) stream, in the same epoch, to the same
    end and the same weights as a run never stopped. Returns the merged history.

    Each fit call takes a stream made afresh and skips the batches done: a shuffle that
    reshuffles at each pass draws each pass's order from the dataset's own generator, which
    every iterator made on that dataset moves on, so a second call on the same dataset (a
    resumed run's calls: the rest of an epoch, then whole epochs) saw other orders than an
    uninterrupted run's one iterator."""
    backup = backups.RunBackup(os.path.join(run_dir_of(strategy, output_dir), "backup"),
                            save_every or "epoch")  # fmt: skip
    with strategy.scope():
        done = backup.restore(model)
    if done >= total_batches:
        logging.info("the backup has all %d steps: nothing left to train", total_batches)
        return {}
    if done:
        logging.info("resuming from the backup at step %d of %d", done, total_batches)
    runs.record(os.path.join(output_dir, "logs"))  # TensorBoard's, the speed log's, dev's
    callbacks = run_callbacks(strategy, output_dir, callbacks, backup)
    chief, terminal = is_chief(strategy), progress.on_a_terminal()
    if chief:
        log = progress.TrainingLog(progress.step_sizes(model, make_stream()), FLAGS.log_every_steps,
                                   total_batches, periodic=not terminal,
                                   log_dir=progress.speed_log_dir(output_dir))  # fmt: skip
        log.step = done
        callbacks = [log, *callbacks]
    try:
        return _fit_batches(model, make_stream, done, batches_per_epoch, total_batches, callbacks,
                            verbose=1 if chief and terminal else 0)  # fmt: skip
    except KeyboardInterrupt:
        every = "" if backup.save_freq == "epoch" else f"every {backup.save_freq} steps and "
        raise tasks.Interrupted(f"run the same command again to go on from the last backup in "
                                f"{backup.backup_dir} (written {every}at the end of each "
                                "epoch)") from None  # fmt: skip


def _fit_batches(model, make_stream, done, batches_per_epoch, total_batches, callbacks, verbose):
    """model.fit calls from batch `done` to `total_batches`; returns the merged history."""
    history = {}
    epoch = done // batches_per_epoch
    while done < total_batches:
        # One call for the rest of a resumed epoch, one for the whole epochs, one for a last
        # partial epoch: Keras runs a fixed number of batches per epoch within a call.
        end = min((epoch + 1) * batches_per_epoch, total_batches)
        whole = (total_batches - done) // batches_per_epoch if done % batches_per_epoch == 0 else 0
        epochs = max(whole, 1)
        steps = batches_per_epoch if whole else end - done
        logging.info("training steps %d to %d", done + 1, done + steps * epochs)
        result = model.fit(make_stream().skip(done), epochs=epoch + epochs, initial_epoch=epoch,
                           steps_per_epoch=steps, callbacks=callbacks, shuffle=False,
                           verbose=verbose)  # fmt: skip
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)
        done += steps * epochs
        epoch += epochs
    return history


def run_callbacks(strategy, output_dir, callbacks, backup):
    """The stop on a nan loss, TensorBoard (on the chief), the given callbacks, then the backup a
    killed run resumes from. The stop comes first, so that nothing after it sees a step that
    diverged; the backup comes last, so that an epoch's metrics are written before the state that
    skips that epoch; each worker keeps its own, so that they do not overwrite each other's."""
    if is_chief(strategy):
        board = keras.callbacks.TensorBoard(os.path.join(output_dir, "logs"),
                                            update_freq=FLAGS.log_every_steps)  # fmt: skip
        callbacks = [board, *callbacks]
    return [backups.StopOnNonFiniteLoss(), *callbacks, backup]


def run_dir_of(strategy, output_dir):
    """Where this worker saves the finished run: output_dir for the chief; other workers save
    their copy to output_dir/worker_<i> (multi-worker saving must happen on every worker)."""
    if is_chief(strategy):
        return output_dir
    return os.path.join(output_dir, f"worker_{strategy.cluster_resolver.task_id}")


def save_run(output_dir, model):
    """Saves the fine-tuned model: one self-describing file (vocabulary, labels or tags,
    sequence length and window settings inside), without optimizer state."""
    backups.check_finite_weights(model)  # the last step's update is seen by no loss
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "model.keras")
    runs.record(path)
    try:
        model.save(path)  # under a temporary name, renamed into place (ServableModel.save)
    except OSError as e:
        full = textfiles.out_of_space(e)
        if full is None:
            raise
        raise OSError(f"could not write {path} ({full}); make room, then run the same command "
                      "again: the training is backed up, and it saves the model without "
                      "training again") from None  # fmt: skip


def load_run(run_dir):
    """The model of a finished run (its model.keras)."""
    path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run_dir} is not a finished run: it has no model.keras")
    return keras.saving.load_model(path)
