"""What task models do with raw data before their graph runs: check it (one example per entry,
targets that are class ids, weights that are finite), batch it in tf.data without the autotuning
thread, and trace functions once for batches of every size."""

import collections.abc
import numbers

import keras
import numpy as np
import tensorflow as tf

from keras_bert.model.config import whole_number


def without_autotuning(dataset):
    """`dataset` without tf.data's autotuning thread. That thread sleeps between its
    optimizations for longer and longer periods, and destroying an iterator waits for the sleep
    to end, so a `fit` or `evaluate` can end long after its last step. Steps run as fast
    without it, AUTOTUNE parallelism and prefetch falling back to their defaults: the
    preprocessing is a small part of a training step.
    `batched` applies it to what it builds from lists, the task binaries to their datasets.
    Under a strategy, the datasets that feed each device do not inherit these options:
    `distribute.device_datasets_without_autotuning`."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _as_tensors(value, what):
    """Python lists / NumPy arrays (or tuples and dicts of them) -> what from_tensor_slices takes
    (a tuple stays a tuple: a pair of texts, or (starts, ends)); `what` names `value` in the
    error for one that is no tensor (a None among texts, texts mixed with numbers)."""
    if isinstance(value, dict):
        return {k: _as_tensors(v, what) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_as_tensors(v, what) for v in value)
    if tf.is_tensor(value):
        return value
    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} cannot be read as a tensor{_first_odd(value)}: give "
                         f"{'strings' if what == 'x' else 'numbers'} of one kind, one per "
                         "example") from None  # fmt: skip


def _first_odd(values):
    """' (item i is <value>)' for the first item of a list whose type differs from the first's,
    or for a None, or ' (item i has n entries, ...)' for a list of lists of different lengths
    (a multiple-choice example's endings): what made the list no tensor."""
    if not isinstance(values, list) or not values:
        return ""
    if isinstance(values[0], (list, tuple)):
        for i, value in enumerate(values):
            if isinstance(value, (list, tuple)) and len(value) != len(values[0]):
                return f" (item {i} has {len(value)} entries, item 0 {len(values[0])})"
    kind = str if isinstance(values[0], (str, bytes)) else type(values[0])
    for i, value in enumerate(values):
        if value is None or not isinstance(value, kind):
            return f" (item {i} is {value!r})"
    return ""


def _holds_one_value(value):
    """Whether value (or a part of a tuple or dict of them) is a single number or string."""
    parts = value.values() if isinstance(value, dict) else (
        value if isinstance(value, tuple) else [value])
    return any(isinstance(p, (numbers.Number, str, bytes, np.generic))
               or (tf.is_tensor(p) and p.shape.rank == 0)
               or (isinstance(p, np.ndarray) and p.ndim == 0) for p in parts)  # fmt: skip


def example_count(value):
    if isinstance(value, dict):
        value = next(iter(value.values()), ())
    if isinstance(value, tuple):
        value = value[0] if value else ()
    return int(value.shape[0]) if tf.is_tensor(value) else len(value)


def is_token_ids(x):
    """Whether a batch's x is encoder inputs already (preprocessed), not raw data."""
    return isinstance(x, dict) and "input_word_ids" in x


def holds_texts(x):
    """Whether x holds strings anywhere: Python's, or arrays or tensors of them."""
    for part in tf.nest.flatten(x):
        dtype = getattr(part, "dtype", None)
        if isinstance(part, (str, bytes)) or (isinstance(dtype, np.dtype) and dtype.kind in "USO"):
            return True
        if isinstance(dtype, tf.DType) and dtype == tf.string:
            return True
    return False


def is_prepared(dataset):
    """Whether a dataset's elements hold encoder inputs already, as `make_dataset` makes them
    (Keras's fit hands its validation data back to the model's own evaluate)."""
    spec = dataset.element_spec
    return is_token_ids(spec[0] if isinstance(spec, tuple) else spec)


def class_ids(y, count, what="label"):
    """Targets as int32 class ids, checked in the graph (a batch from a tf.data.Dataset):
    whole numbers from 0 to count - 1. A cast alone would make a label of 0.5 class 0."""
    y = tf.convert_to_tensor(y)
    # Rank 1 whatever rank the batch came in ((batch,), or a column (batch, 1)): the function a
    # model traces once for its life relaxes to unknown rank when one fit passes labels of
    # one rank and the next of another, and Keras's loss needs to know the rank.
    tf.debugging.assert_equal(tf.size(y), tf.shape(y)[0], message=f"give one {what} per example")
    y = tf.reshape(y, [-1])
    if y.dtype.is_floating:  # NaN is not equal to itself, so it fails too
        tf.debugging.assert_equal(y, tf.round(y), message=f"a {what} is not a whole number")
    y = tf.cast(y, tf.int32)
    tf.debugging.assert_less(y, count, message=f"a {what} is not below {count}")
    tf.debugging.assert_non_negative(y, message=f"a {what} is negative")
    return y


def ids_of_names(names, known, what):
    """tf.string names (any shape) -> int32 ids: each name's place in `known`; a name not among
    them is refused in the graph ("a tag is not one of the model's tags")."""
    match = tf.equal(tf.expand_dims(names, -1), tf.constant(known))  # (..., len(known))
    tf.debugging.assert_equal(tf.reduce_all(tf.reduce_any(match, axis=-1)), True,
                              message=f"a {what} is not one of the model's {what}s")  # fmt: skip
    return tf.argmax(tf.cast(match, tf.int32), axis=-1, output_type=tf.int32)


def check_class_ids(y, count, what="label"):
    """The same check on targets in memory, before any graph runs: one line naming the first
    target that is not a class id."""
    values = np.asarray(y)
    if values.dtype.kind not in "biuf":
        got = "strings" if values.dtype.kind in "USO" else f"{values.dtype} values"
        raise ValueError(f"y must be {what}s as numbers from 0 to {count - 1}, got {got}")
    if values.ndim > 1 and int(np.prod(values.shape[1:])) != 1:
        raise ValueError(f"y has shape {values.shape}: give one {what} per example, a number "
                         f"from 0 to {count - 1} (one-hot rows are not taken)")  # fmt: skip
    flat = values.reshape(-1).astype("float64")
    bad = ~np.isfinite(flat) | (flat != np.round(flat)) | (flat < 0) | (flat >= count)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(f"y[{index}] is {values.reshape(-1)[index].item()!r}: {what}s must be "
                         f"whole numbers from 0 to {count - 1}")


def check_sample_weights(sample_weight, name="sample_weight"):
    """One line for the first weight that is not a finite number of at least 0: a NaN weight
    makes the loss NaN, a negative one trains away from its target."""
    parts = sample_weight.values() if isinstance(sample_weight, dict) else [sample_weight]
    for part in parts:
        try:
            values = np.asarray(part, dtype="float64").reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be numbers, one per example") from None
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            index = int(np.argmax(bad))
            raise ValueError(f"{name}[{index}] is {values[index]}: weights must be finite "
                             "numbers of at least 0")  # fmt: skip


def check_kind(x):
    """Refuses, in one line, data of a kind task models do not take: a generator or other
    iterator, or a keras.utils.PyDataset (they read as no tensor, or failed deep in Keras)."""
    if isinstance(x, keras.utils.PyDataset) or isinstance(x, collections.abc.Iterator):
        raise ValueError(f"x is a {type(x).__name__}: task models take raw data in memory "
                         "(lists or arrays) or a batched tf.data.Dataset; wrap a generator in "
                         "tf.data.Dataset.from_generator")  # fmt: skip


def check_batched(dataset):
    """Refuses a tf.data.Dataset of single examples: every part of a batch has a batch
    dimension, so a part of rank 0 (a text, a label) means the dataset is not batched."""
    if any(spec.shape.rank == 0 for spec in tf.nest.flatten(dataset.element_spec)):
        raise ValueError("x is a tf.data.Dataset of single examples: batch it, "
                         "dataset.batch(32) say")  # fmt: skip


def check_dataset_texts(dataset, check_x):
    """`check_x` (a preprocessor's `texts`) on a Dataset's x, traced on its element spec: a
    mistake in how the elements hold their texts (a pair's texts as the element (first,
    second), which reads as (x, y)) is raised here as its one line, where from inside a traced
    step autograph would wrap it in a listing of frames. Tracing it costs milliseconds."""
    spec = dataset.element_spec
    tf.function(check_x, autograph=False).get_concrete_function(
        spec[0] if isinstance(spec, tuple) else spec)


def in_memory(x, y=None, sample_weight=None, check_x=None, check_targets=None):
    """Raw data given in memory (lists, arrays, tensors) as tensors, checked before any graph
    runs: x not empty, every part one entry per example, as many targets and weights; then
    `check_x(x)` (its texts) and `check_targets(x, y)` (a task model's)."""
    if x is None:
        raise ValueError("no data: pass x (raw strings)")
    check_kind(x)
    x = _as_tensors(x, "x")
    if any(t.shape.rank == 0 for t in tf.nest.flatten(x)):
        raise ValueError("x holds one text where a list of them belongs: pass a batch, "
                         "[text] for one example, ([first], [second]) for one pair")  # fmt: skip
    lengths = sorted({int(t.shape[0]) for t in tf.nest.flatten(x)})
    if len(lengths) > 1:
        raise ValueError(f"the parts of x differ in length ({', '.join(map(str, lengths))}"
                         "): give each part one entry per example")  # fmt: skip
    count = example_count(x)
    if count == 0:
        raise ValueError("x is empty: pass at least one example")
    for name, value in (("y", y), ("sample_weight", sample_weight)):
        if value is not None and _holds_one_value(value):  # len() raised a TypeError
            what = "target" if name == "y" else "weight"
            raise ValueError(f"{name} is one value where a list of them belongs: give one "
                             f"{what} per example, [{name}] for one example")  # fmt: skip
        if value is not None and example_count(value) != count:
            raise ValueError(f"len(x) is {count} but len({name}) is {example_count(value)}: "
                             "give one target per example")  # fmt: skip
    if check_x is not None and not is_token_ids(x):
        check_x(x)
    if y is not None and check_targets is not None:
        check_targets(x, y)
    if sample_weight is not None:
        check_sample_weights(sample_weight)
    y, sample_weight = [None if v is None else _as_tensors(v, name)
                        for v, name in ((y, "y"), (sample_weight, "sample_weight"))]  # fmt: skip
    return x, y, sample_weight


def split_off(fraction, x, y=None, sample_weight=None):
    """Keras's `validation_split` on what `in_memory` returns (tensors, checked): ((x, y,
    sample_weight) to train on, (x, y, sample_weight) to validate on), the validation part the
    last `fraction` of the examples, taken before any shuffling."""
    if isinstance(fraction, bool) or not (isinstance(fraction, (int, float, np.number))
                                          and 0 < fraction < 1):  # fmt: skip
        raise ValueError(f"validation_split must be a fraction between 0 and 1, got {fraction!r}")
    data = (x, y, sample_weight)
    count = example_count(x)
    at = int(np.floor(count * (1 - fraction)))
    if not 0 < at < count:
        raise ValueError(f"validation_split={fraction} of {count} examples leaves "
                         f"{'none to train on' if at == 0 else 'none to validate on'}")  # fmt: skip

    def part(rows):
        return tuple(None if v is None else tf.nest.map_structure(lambda t: t[rows], v)
                     for v in data)  # fmt: skip

    return part(slice(None, at)), part(slice(at, None))


def batched(x, y=None, sample_weight=None, batch_size=None, shuffle=False, seed=None,
            check_x=None, check_targets=None, drop_remainder=False):
    """Raw data as a batched tf.data.Dataset of raw strings (and targets), without tf.data's
    autotuning (`without_autotuning`); data in memory is checked first (`in_memory`). A Dataset
    is taken as it is, options included (batched, with elements x, (x, y) or
    (x, y, sample_weight)), once `check_x` passes its texts (`check_dataset_texts`).
    `drop_remainder`: whole batches only, for data in memory (a TPU's static shapes)."""
    if batch_size is not None:
        whole_number(batch_size, 1, "batch_size")
    if isinstance(x, tf.data.Dataset):
        if y is not None:
            raise ValueError("x is a tf.data.Dataset: put the targets in its elements, "
                             "(x, y), rather than passing y")  # fmt: skip
        check_batched(x)
        if check_x is not None and not is_prepared(x):
            check_dataset_texts(x, check_x)
        return x
    x, y, sample_weight = in_memory(x, y, sample_weight, check_x, check_targets)
    data = keras.utils.pack_x_y_sample_weight(x, *[v for v in (y, sample_weight) if v is not None])
    dataset = tf.data.Dataset.from_tensor_slices(data)
    if shuffle:
        dataset = dataset.shuffle(example_count(x), seed=seed, reshuffle_each_iteration=True)
    return without_autotuning(dataset.batch(batch_size or 32, drop_remainder=drop_remainder))


def count_steps(dataset):
    """Batches in one pass of `dataset`, counted when tf.data does not know them."""
    steps = int(dataset.cardinality())
    if steps == tf.data.INFINITE_CARDINALITY:
        raise ValueError("the dataset repeats forever: pass steps_per_epoch")
    if steps == tf.data.UNKNOWN_CARDINALITY:
        steps = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
    if steps == 0:
        raise ValueError("no training data: the dataset is empty")
    return steps


class AnyBatchSize:
    """A tf.function (`.function`), called so that it traces once for batches of every size.

    Called with tensors, a tf.function traces for their exact shapes, and with
    `reduce_retracing` again, with the shapes relaxed, at the first call whose shapes differ:
    the last, smaller batch of a `predict`. This traces it first with each tensor's batch axis
    (its first) unknown, and every call then runs that graph. Calls whose arguments are not
    all tensors (NumPy arrays, a distribution strategy's per-replica values) are left to
    tf.function as they are."""

    def __init__(self, function):
        self.function = function
        self._relaxed = False

    def __call__(self, *args):
        leaves = tf.nest.flatten(args)
        if not self._relaxed and leaves and all(isinstance(t, tf.Tensor) and t.shape.rank
                                                for t in leaves):  # fmt: skip
            self.function.get_concrete_function(*tf.nest.map_structure(_batch_relaxed, args))
            self._relaxed = True
        return self.function(*args)

    def trace(self, *specs):
        """Traces now for arguments of these specs (TensorSpecs where the call will have
        tensors), their batch axes relaxed as a call relaxes them; a later call on such
        tensors runs this graph."""
        self.function.get_concrete_function(*tf.nest.map_structure(_batch_relaxed, specs))


def _batch_relaxed(value):
    """The TensorSpec of a tensor or TensorSpec with its first (batch) axis unknown; anything
    else (a scalar's spec, a ragged one) as it is."""
    if isinstance(value, (tf.Tensor, tf.TensorSpec)) and value.shape.rank:
        return tf.TensorSpec([None, *value.shape[1:]], value.dtype)
    return value
