"""Padding costs nothing: the encoder's blocks compute on the real tokens alone.

`TokenLayout` finds the real tokens of a batch in its `input_mask`; `pack` gathers them into
(tokens, hidden), where every dense product, LayerNorm and dropout of a block runs; attention
alone spreads them back to (batch, seq) for its batched products (`spread_for_attention`);
`unpack` puts the encoder's outputs back in place, zeros at the padded positions. On batches
padded to their longest member (half the positions of SST-2 dev batches of 32 are padding) the
dense products, which are most of the work, shrink accordingly; real positions' numbers do not
change.

The packed count of tokens is known only as the graph runs, which XLA cannot compile (it draws
dropout's random numbers, and lays out every buffer, for shapes it knows when it compiles). So
the layout has a second form, `static`: every position of the batch counts as a row, packing
and spreading are reshapes, and padded positions are computed and masked (attention hides
them as keys; `unpack` zeroes them). The encoder runs static wherever its step is compiled
with XLA (`BertEncoder.static_shapes`); real positions get the same numbers either way.
"""


import keras
import tensorflow as tf
from keras import ops

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@_SERIALIZABLE
class TokenLayout(keras.layers.Layer):
    """Where the real tokens of a batch sit, so that the blocks compute on them alone.

    Call with `input_mask`, int32 (batch, seq). Returns a dict of int32 tensors:
      input_mask: the mask itself (attention hides the padded keys with it);
      tokens: (tokens,), the flat (batch * seq) position of each real token, in order;
      slots: (batch * seq,), each position's row among the packed tokens; 0 for padding: any
        row does, since padded keys get no attention and padded queries are dropped;
      first: (batch,), the packed row of each sequence's first token ([CLS]);
      lengths: (batch,), each sequence's count of real tokens.
    Position 0 of every row counts as real even under a 0 mask (the pooler reads it, and a
    batch of all-padding rows then still has a token to gather from).

    With `static_shapes` set (BertEncoder.static_shapes, for XLA), every position is a row:
    tokens and slots are 0 to batch * seq - 1, first is each sequence's position 0, and the
    rows have the shapes of the batch, known when XLA compiles. Only then does the layer tell
    Keras that it supports `jit_compile`: a model of your own around a packed encoder compiles
    without XLA (with Keras's warning), where XLA would fail on the packed shapes.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.static_shapes = False

    @property
    def static_shapes(self):
        return self._static_shapes

    @static_shapes.setter
    def static_shapes(self, static):
        self._static_shapes = static
        self.supports_jit = static

    def call(self, input_mask):
        real = real_positions(input_mask)
        if self.static_shapes:
            batch, seq = ops.shape(input_mask)[0], ops.shape(input_mask)[1]
            every = tf.range(batch * seq)
            return {"input_mask": input_mask, "tokens": every, "slots": every,
                    "first": tf.range(batch) * seq,
                    "lengths": tf.reduce_sum(tf.cast(real, tf.int32), axis=1)}  # fmt: skip
        flat = ops.reshape(real, (-1,))
        tokens = tf.cast(tf.where(flat)[:, 0], tf.int32)
        slots = tf.where(flat, tf.cumsum(tf.cast(flat, tf.int32)) - 1, 0)
        first = tf.reshape(slots, tf.shape(input_mask))[:, 0]
        return {"input_mask": input_mask, "tokens": tokens, "slots": slots, "first": first,
                "lengths": tf.reduce_sum(tf.cast(real, tf.int32), axis=1)}

    def compute_output_spec(self, input_mask):
        # New tensors each (the functional graph tells tensors apart by identity).
        return {"input_mask": keras.KerasTensor(input_mask.shape, dtype="int32"),
                "tokens": keras.KerasTensor((None,), dtype="int32"),
                "slots": keras.KerasTensor((None,), dtype="int32"),
                "first": keras.KerasTensor((input_mask.shape[0],), dtype="int32"),
                "lengths": keras.KerasTensor((input_mask.shape[0],), dtype="int32")}  # fmt: skip


def real_positions(input_mask):
    """input_mask > 0 with position 0 always real: bool (batch, seq)."""
    always = ops.ones_like(input_mask[:, :1])
    return ops.concatenate([always, input_mask[:, 1:]], axis=1) > 0


# Packing is a gather_nd and unpacking a scatter_nd: each is the other's gradient, where a
# gather's gradient would sum its rows into a dense tensor (UnsortedSegmentSum, measured slower).
def pack(x, layout, static=False):
    """(batch, seq, hidden) -> (tokens, hidden): the real positions' vectors, in order; with
    `static` (a static layout), every position's."""
    if static:
        return tf.reshape(x, (-1, x.shape[-1]))
    return tf.gather_nd(tf.reshape(x, (-1, x.shape[-1])), layout["tokens"][:, None])


def unpack(tokens, layout, static=False):
    """(tokens, hidden) -> (batch, seq, hidden), zeros at the padded positions."""
    batch, seq = ops.shape(layout["input_mask"])
    hidden = tokens.shape[-1]
    if static:
        real = tf.cast(real_positions(layout["input_mask"]), tokens.dtype)
        return tf.reshape(tokens, (batch, seq, hidden)) * real[:, :, None]
    spread = tf.scatter_nd(layout["tokens"][:, None], tokens, (batch * seq, hidden))
    return tf.reshape(spread, (batch, seq, hidden))


def spread_for_attention(tokens, layout, static=False):
    """(tokens, hidden) -> (batch * seq, hidden) for attention's batched products: a gather,
    padded positions holding a copy of row 0 (they get no attention, and their queries' results
    are dropped). That makes their gradient exactly 0, so the gradient of the spread is the real
    positions' rows, gathered back; the gather's own gradient would sum rows into a dense
    tensor instead. With `static` (a static layout), the rows are already laid out so."""
    if static:
        return tokens

    @tf.custom_gradient
    def spread(tokens):
        def gradient(upstream):
            return tf.gather_nd(upstream, layout["tokens"][:, None])

        return tf.gather(tokens, layout["slots"]), gradient

    return spread(tokens)


@_SERIALIZABLE
class PackTokens(keras.layers.Layer):
    """`pack` as a layer of the encoder's functional graph."""

    static_shapes = False

    def call(self, x, layout):
        return pack(x, layout, self.static_shapes)

    def compute_output_shape(self, x_shape, layout_shape):
        return (None, x_shape[-1])


@_SERIALIZABLE
class UnpackTokens(keras.layers.Layer):
    """`unpack` as a layer of the encoder's functional graph."""

    static_shapes = False

    def call(self, tokens, layout):
        return unpack(tokens, layout, self.static_shapes)

    def compute_output_shape(self, tokens_shape, layout_shape):
        return (layout_shape["input_mask"][0], layout_shape["input_mask"][1], tokens_shape[-1])
