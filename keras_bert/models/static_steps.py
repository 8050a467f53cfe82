"""Steps that Keras compiles with XLA: the encoder on static shapes, batches padded to them.

XLA compiles for shapes it knows when it compiles, so a task model's train, test and predict
steps that Keras compiles with XLA (`compile(jit_compile=True)`, Keras's "auto" on a GPU, any
TPUStrategy) run the encoder on static shapes (`BertEncoder.static_shapes`), and their batches
are padded in `tf.data` to one of STATIC_LENGTHS lengths, each compiled once. Other steps run
the encoder packed.
"""

import contextlib

import keras
import tensorflow as tf

from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.training import distribute

# Steps compiled with XLA take batches padded to one of this many lengths, sequence_length * k /
# STATIC_LENGTHS (k = 1 ... STATIC_LENGTHS; rounded up to a multiple of 8), each compiled once.
STATIC_LENGTHS = 4


def static_length(longest, sequence_length):
    """The length a batch whose longest sequence has `longest` positions (a scalar tensor) is
    padded to for XLA: the shortest of the STATIC_LENGTHS lengths that holds it."""
    step = -(-sequence_length // STATIC_LENGTHS // 8) * 8
    return tf.minimum(-(-longest // step) * step, sequence_length)


def pad_last_axis(t, length, value=0):
    """`t` padded with `value` at the end of its last axis to `length` positions."""
    extra = length - tf.shape(t)[-1]
    return tf.pad(t, [[0, 0]] * (t.shape.rank - 1) + [[0, extra]], constant_values=value)


@contextlib.contextmanager
def _after(data):
    """Every op of a step waits for its batch. Keras's per-output loss trackers count a batch
    with an op that reads no data; once inlined, the graph ran it even when the iterator of a
    dataset of unknown cardinality had run out, so each of those entries counted one batch too
    many (the question answerer's `start_logits_loss` read about half)."""
    # Variables a first trace creates (the optimizer's slots, the loss trackers) are lifted out
    # of the step: their initial values must not wait for its batch.
    with (tf.control_dependencies(tf.nest.flatten(data)[:1]),
          tf.variable_creator_scope(_created_without_dependencies)):  # fmt: skip
        yield


def _created_without_dependencies(next_creator, **kwargs):
    with tf.control_dependencies(None):
        return next_creator(**kwargs)


class StaticSteps:
    """What `BertTask` does around its train and test steps (each op waits for the batch), and
    for steps compiled with XLA. Subclasses whose targets have positions (tags, masked-LM
    positions) pad them in `pad_targets_for_xla`."""

    def compiles_with_xla(self):
        """Whether Keras compiles this model's steps with XLA: `jit_compile` (True, or "auto"
        resolved to it on a GPU), or a TPUStrategy (TPUs run compiled steps only)."""
        return bool(self.jit_compile) or distribute.is_tpu(self.distribute_strategy)

    @contextlib.contextmanager
    def _encoder_shapes_for_step(self):
        """While a step is traced: the encoder static where the step compiles with XLA."""
        before = self.encoder.static_shapes
        self.encoder.static_shapes = self.compiles_with_xla()
        try:
            yield
        finally:
            self.encoder.static_shapes = before

    def train_step(self, data):
        with self._encoder_shapes_for_step(), _after(data):
            return super().train_step(data)

    def test_step(self, data):
        with self._encoder_shapes_for_step(), _after(data):
            return super().test_step(data)

    def pad_for_xla(self, x, y, sample_weight):
        """A batch of encoder inputs (and targets) padded to the shapes an XLA step compiles
        for: the positions to `static_length`. Subclasses with targets by position pad them
        too (`pad_targets_for_xla`)."""
        sequence_length = getattr(self.preprocessor, "sequence_length", None)
        if sequence_length is None:  # token ids made elsewhere: as they come
            return x, y, sample_weight
        length = static_length(tf.shape(x["input_mask"])[-1], sequence_length)
        x = {**x, **{name: pad_last_axis(x[name], length) for name in INPUT_NAMES}}
        y, sample_weight = self.pad_targets_for_xla(y, sample_weight, length)
        return x, y, sample_weight

    def pad_targets_for_xla(self, y, sample_weight, length):
        """Targets and weights padded to `length` positions where they have positions."""
        return y, sample_weight

    def for_xla(self, dataset):
        """`dataset`'s batches of encoder inputs padded by `pad_for_xla` where this model's
        steps compile with XLA; as they are otherwise."""
        if not self.compiles_with_xla():
            return dataset

        def pad(*data):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(
                data[0] if len(data) == 1 else data)  # fmt: skip
            return keras.utils.pack_x_y_sample_weight(*self.pad_for_xla(x, y, sample_weight))

        return dataset.map(pad, num_parallel_calls=tf.data.AUTOTUNE)
