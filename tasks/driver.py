"""The driver every fine-tuning binary runs: check the flags, read the data, build the task
model from the library, fit, save, then evaluate and predict with the saved run."""

import math
import os

from absl import app, flags, logging

from keras_bert import checkpoints
from keras_bert.models.pretrained import check_sequence_length
from tasks import check_at_least_one, common, runs, trainer

FLAGS = flags.FLAGS


class TaskBinary:
    """The outline every fine-tuning binary runs; a binary subclasses it with what is particular
    to its dataset format and metric.

    With --do_train: read the training data (before anything heavy loads), build the model from
    --init_checkpoint inside the strategy's scope, fit it with the library's recipe (backups,
    TensorBoard, the dev callback) and save the run. Then, always, load the saved run and
    evaluate / predict with it: never with an unsaved or untrained head, and with the settings
    the run recorded in its model.keras, whatever the flags say now.
    """

    name = None  # the model's name, and the default --output_dir: runs/<name>
    # Recorded flags that also locate the data a --nodo_train run evaluates on: they may differ
    # from the run's (the training data's content is recorded as its SHA-256).
    input_flags = ()

    def check_flags(self):
        """Refuses bad flag values before anything heavy loads; binaries add their own."""
        common.check_training_flags()
        check_at_least_one(["eval_batch_size", "max_train_examples", "max_eval_examples"])
        if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
            raise app.UsageError("nothing to do: --do_train, --do_eval and --do_predict are all "
                                 "false; pass one of them")  # fmt: skip
        if not 0 < FLAGS.num_train_epochs < math.inf:
            raise app.UsageError(f"--num_train_epochs must be a finite number above 0, got "
                                 f"{FLAGS.num_train_epochs}")  # fmt: skip
        if not 0 <= FLAGS.warmup_proportion <= 1:
            raise app.UsageError(f"--warmup_proportion must be between 0 and 1, got "
                                 f"{FLAGS.warmup_proportion}")  # fmt: skip
        if FLAGS.layer_decay is not None and not 0 < FLAGS.layer_decay <= 1:
            raise app.UsageError(f"--layer_decay must be in (0, 1], got {FLAGS.layer_decay}")
        if FLAGS.output_dir and os.path.isfile(FLAGS.output_dir):
            raise app.UsageError(f"--output_dir={FLAGS.output_dir} is a file, not a folder")
        if FLAGS.do_train:
            config = checkpoints.read_config(common.checkpoint_path())
            check_sequence_length(FLAGS.max_seq_length, config, "--max_seq_length")

    def prepare(self):
        """Reads the evaluation data. Called once the strategy exists: TensorFlow fixes its
        devices at its first tensor, after which no strategy can split or join them."""

    def training_files(self):
        """The files the training data is read from; the run records their content."""
        return [FLAGS.train_file] if "train_file" in FLAGS and FLAGS.train_file else []

    def read_training(self):
        """The training data; raise app.UsageError when there is none."""
        raise NotImplementedError

    def build_model(self, training):
        """A new task model on --init_checkpoint (called inside the strategy's scope)."""
        raise NotImplementedError

    def training_dataset(self, model, training):
        """(a function making the endless stream of batched raw strings and targets as a
        tf.data.Dataset, pass after pass, each shuffled by --seed and its number
        (common.training_passes); the steps of a pass)."""
        raise NotImplementedError

    def dev_callback(self, output_dir, write):
        """A callback scoring the dev data after each epoch, or None."""
        return None

    def finish(self, model, output_dir, write):
        """Evaluates and predicts with the finished run's model; returns the dev scores."""
        raise NotImplementedError

    def run(self):
        self.check_flags()
        output_dir = FLAGS.output_dir or os.path.join("runs", self.name)
        strategy = trainer.create_strategy()
        write, run_dir = trainer.is_chief(strategy), trainer.run_dir_of(strategy, output_dir)
        self.prepare()
        if FLAGS.do_train:
            settings = runs.settings_of(FLAGS, self.name)
            files = [path for path in self.training_files() if os.path.isfile(path)]
            if files:  # a missing file is reported by read_training
                settings["training_data_sha256"] = runs.data_digest(files)
            state = runs.claim(run_dir, settings, FLAGS.overwrite_output_dir)
            try:
                if state == "finished":
                    logging.info("%s holds this run, finished: evaluating it (pass "
                                 "--overwrite_output_dir to train it again)", run_dir)  # fmt: skip
                else:
                    self.train_and_save(strategy, output_dir, run_dir, write)
            finally:
                runs.release(run_dir)
        else:
            runs.refuse_changed_flags(run_dir, FLAGS, self.name, self.input_flags)
        logging.info("loading the saved run in %s to evaluate and predict with it", run_dir)
        return self.finish(trainer.load_run(run_dir), output_dir, write)

    def train_and_save(self, strategy, output_dir, run_dir, write):
        training = self.read_training()
        with strategy.scope():
            model = self.build_model(training)
        make_stream, steps_per_epoch = self.training_dataset(model, training)
        callback = self.dev_callback(output_dir, write)
        trainer.fit(model, strategy, make_stream, steps_per_epoch, [callback] if callback else [],
                   output_dir)  # fmt: skip
        logging.info("saving the fine-tuned model to %s", os.path.join(run_dir, "model.keras"))
        trainer.save_run(run_dir, model)
