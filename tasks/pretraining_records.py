"""The records tasks.create_pretraining_data writes (the original's schema): their shards'
names and lock, and reading them as the pretrainer's batches (each record's features, their
shapes, and the model's inputs)."""

import fcntl
import glob
import os
import re

import tensorflow as tf
from absl import app, logging

FEATURES = {
    "input_ids": "input_word_ids",
    "input_mask": "input_mask",
    "segment_ids": "input_type_ids",
    "masked_lm_positions": "masked_lm_positions",
}


def to_model_inputs(batch):
    """A batch of schema features -> (inputs, labels, sample weights) for the pretrainer."""
    # Sequences are padded to max_seq_length; drop the columns no sequence of this batch uses.
    length = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=1))
    x = {ours: tf.cast(batch[theirs], tf.int32) for theirs, ours in FEATURES.items()}
    for name in ("input_word_ids", "input_mask", "input_type_ids"):
        x[name] = x[name][:, :length]
    y = {"masked_lm": tf.cast(batch["masked_lm_ids"], tf.int32),
         "next_sentence": tf.cast(batch["next_sentence_labels"][:, 0], tf.int32)}  # fmt: skip
    weights = {"masked_lm": batch["masked_lm_weights"],
               "next_sentence": tf.ones_like(batch["masked_lm_weights"][:, 0])}  # fmt: skip
    return x, y, weights


# What each record of tasks.create_pretraining_data holds: (its length, its type).
RECORD_FEATURES = {"input_ids": ("tokens", tf.int64), "input_mask": ("tokens", tf.int64),
                   "segment_ids": ("tokens", tf.int64),
                   "masked_lm_positions": ("predictions", tf.int64),
                   "masked_lm_ids": ("predictions", tf.int64),
                   "masked_lm_weights": ("predictions", tf.float32),
                   "next_sentence_labels": ("one", tf.int64)}  # fmt: skip


def record_dataset(files, seq_length, predictions):
    lengths = {"tokens": seq_length, "predictions": predictions, "one": 1}
    spec = {name: tf.io.FixedLenFeature([lengths[length]], dtype)
            for name, (length, dtype) in RECORD_FEATURES.items()}  # fmt: skip
    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return dataset.repeat().map(lambda record: tf.io.parse_single_example(record, spec))


# The shards tasks.create_pretraining_data writes: <prefix>-<index>-of-<count>.tfrecord, each
# first as <shard>.tmp-<process id> (UNFINISHED), renamed into place when whole.
SHARD = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.tfrecord$")
UNFINISHED = re.compile(r"^(.*-\d{5}-of-\d{5}\.tfrecord)\.tmp-(\d+)$")


def shard_path(prefix, index, count):
    return f"{prefix}-{index:05d}-of-{count:05d}.tfrecord"


def other_shards(prefix, count):
    """The shards beside `prefix` of another count than `count`: an earlier run's."""
    return sorted(path for path in glob.glob(glob.escape(prefix) + "-*-of-*.tfrecord")
                  if (m := SHARD.match(path)) and m.group(1) == prefix
                  and int(m.group(3)) != count)  # fmt: skip


def lock_prefix(prefix):
    """Locks the shards of `prefix` for this process, until it ends: flock on a hidden file
    beside them (`.<name>.lock`, which no glob of the shards matches). A second run into the
    same prefix is refused while one writes: each would replace shards of the other."""
    folder, name = os.path.split(os.path.abspath(prefix))
    lock = os.open(os.path.join(folder, f".{name}.lock"), os.O_CREAT | os.O_WRONLY, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise app.UsageError(f"--output_file={prefix}: another run is writing shards with "
                             "this prefix; wait for it to end, or pass another "
                             "prefix") from None  # fmt: skip
    _LOCKS.append(lock)


_LOCKS = []  # the file descriptors of the prefixes' locks, open until the process ends


def unfinished_shards(prefix):
    """The temporary files of shards of `prefix` that a killed run left half written: those
    whose writing process has ended."""
    stale = []
    for path in sorted(glob.glob(glob.escape(prefix) + "-*-of-*.tfrecord.tmp-*")):
        m = UNFINISHED.match(path)
        if m and SHARD.match(m.group(1)).group(1) == prefix and not _running(int(m.group(2))):
            stale.append(path)
    return stale


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def check_shard_sets(files):
    """Refuses `files` that hold a shard that was never finished (a killed run's temporary file,
    which a glob of the shards also matches) or shards of two runs with one prefix (of
    different counts), which pre-training would read as one data set; warns of a set read in
    part."""
    sets = {}
    for path in files:
        if m := UNFINISHED.match(path):
            raise ValueError(f"{path} is a shard that tasks.create_pretraining_data never "
                             f"finished (it was stopped while writing {m.group(1)}): remove it, "
                             "or run that command again, which removes it")  # fmt: skip
        m = SHARD.match(path)
        if m:
            sets.setdefault(m.group(1), {}).setdefault(int(m.group(3)), set()).add(int(m.group(2)))
    for prefix, counts in sorted(sets.items()):
        if len(counts) > 1:
            first, second = sorted(counts)[:2]
            raise ValueError(f"{shard_path(prefix, min(counts[first]), first)} and "
                             f"{shard_path(prefix, min(counts[second]), second)} are shards of two "
                             "runs of tasks.create_pretraining_data with one prefix: pass the "
                             "files of one run (remove the other's)")  # fmt: skip
        [(count, indices)] = counts.items()
        if len(indices) < count:
            logging.warning("reading %d of the %d shards of %s", len(indices), count, prefix)


def record_shape(files):
    """(sequence length, predictions) of the instances in record `files`, from each file's first
    record: a file that is not a TFRecord file, holds no instances, or was made with other
    settings than the first is refused before anything trains, as are shards of two runs
    (check_shard_sets)."""
    check_shard_sets(files)
    shapes = {}
    for path in files:
        try:
            first = next(iter(tf.data.TFRecordDataset(path)), None)
        except tf.errors.DataLossError:
            raise ValueError(f"{path} is not a TFRecord file; pass the files "
                             "tasks.create_pretraining_data writes") from None  # fmt: skip
        if first is None:
            raise ValueError(f"{path} holds no pre-training instances; make it again with "
                             "tasks.create_pretraining_data from more text")  # fmt: skip
        features = tf.train.Example.FromString(first.numpy()).features.feature
        missing = [name for name in RECORD_FEATURES if name not in features]
        if missing:
            raise ValueError(f"{path} holds records without {', '.join(missing)}: not "
                             "pre-training instances; pass the files tasks.create_pretraining_data "
                             "writes")  # fmt: skip
        shapes[path] = (len(features["input_ids"].int64_list.value),
                        len(features["masked_lm_ids"].int64_list.value))  # fmt: skip
    (first_path, shape), *rest = shapes.items()
    for path, other in rest:
        if other != shape:
            raise ValueError(f"{first_path} holds instances of {shape[0]} tokens and {shape[1]} "
                             f"predictions, {path} of {other[0]} and {other[1]}: pass the files "
                             "of one tasks.create_pretraining_data setting")  # fmt: skip
    return shape
