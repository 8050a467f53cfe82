"""BERT's multi-head self-attention on the real tokens alone, packed into (tokens, hidden)
(keras_bert/model/packing.py): only the batched products spread them back to (batch, seq).

Mixed precision: the scores are cast to float32 before the softmax.
"""

import functools
import math

import keras
import tensorflow as tf
from keras import ops

from keras_bert.model import column_parts
from keras_bert.model.packing import pack, spread_for_attention
from keras_bert.model.primitives import BertDropout, initializer

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def swap_heads_and_positions(x):
    """(batch, seq, heads, size) <-> (batch, heads, seq, size): attention's transposes."""
    return tf.transpose(x, (0, 2, 1, 3))


def attention_bias(input_mask, dtype):
    """(batch, seq) 0/1 mask -> (batch, 1, 1, seq) bias in `dtype`: 0 where attended, a large
    negative number not (-1e9; -1e4 in float16, whose range ends at 65,504)."""
    mask = ops.cast(input_mask, dtype)[:, None, None, :]
    return (1.0 - mask) * (-1e4 if dtype == "float16" else -1e9)


def _projected_parts(parts, tokens, first):
    """Each column part's query, key and value projections of `tokens` (ColumnParts of
    BertSelfAttention._split), as BertSelfAttention._attend takes them: side by side as one
    product computed them (query, key and value; or with `first`, the queries of the rows
    `first` alone, then key and value)."""
    if "query_key_value" in parts:  # the parts' one product each
        for part in parts["query_key_value"]:
            projected = part(tokens, split=False)
            if first is None:
                yield (projected,)
            else:
                query, key_value = tf.split(projected, [-1, 2 * projected.shape[-1] // 3], -1)
                yield tf.gather(query, first), key_value
        return
    queries = tokens if first is None else tf.gather(tokens, first)
    for query_part, key_value_part in zip(parts["query"], parts["key_value"]):
        yield query_part(queries), key_value_part(tokens, split=False)


@_SERIALIZABLE
class BertSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention with its output projection.

    Call with `tokens`, the real tokens packed as (tokens, hidden_size), and `layout`, the
    `packing.TokenLayout` of their batch (its input_mask says which keys may be attended to).
    Returns (tokens, hidden_size) in the compute dtype; with `first_only=True`, (batch,
    hidden_size): only each sequence's first token queries (all tokens are still keys).
    With `static_shapes` (a static layout, BertEncoder.static_shapes), `tokens` holds every
    position of the batch, (batch * seq, hidden_size).
    """

    static_shapes = False

    def __init__(self, hidden_size, num_attention_heads, dropout_rate, initializer_range, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.head_size = hidden_size // num_attention_heads

        def dense(name):
            return keras.layers.Dense(
                hidden_size,
                kernel_initializer=initializer(initializer_range),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output_dense")
        self.dropout = BertDropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build(input_shape)

    def _split_heads(self, x, batch, length, heads):
        """(batch * length, count * heads * head_size) -> `count` tensors (batch, heads, length,
        head_size): x holds `count` of the query, key and value side by side, each split in
        one reshape and one transpose for all (a served sentence's attention is many small
        ops, and each costs about as much as its work)."""
        count = x.shape[-1] // (heads * self.head_size)
        x = ops.reshape(x, (batch, length, count * heads, self.head_size))
        x = swap_heads_and_positions(x)
        return tf.split(x, count, axis=1) if count > 1 else [x]

    def call(self, tokens, layout, training=None, first_only=False):
        # The projections see rank 2 (tokens, hidden): oneDNN fuses a rank-2 product with its
        # bias (a rank-3 Dense is a Tensordot whose reshape keeps the two apart). The cast is
        # done once here, rather than in each of the three projections.
        tokens = ops.cast(tokens, self.compute_dtype)
        first = layout["first"] if first_only else None
        parts = column_parts.of_layer(self, training)
        if parts is None:
            queries = tokens if first is None else tf.gather(tokens, first)
            projected = (self.query(queries), self.key(tokens), self.value(tokens))
            context = self._context(projected, layout, self.num_attention_heads, training,
                                    first_only)  # fmt: skip
            return self.output_dense(context)
        heads = self.num_attention_heads // parts.count
        contexts = [self._context(projected, layout, heads, training, first_only)
                    for projected in _projected_parts(parts, tokens, first)]  # fmt: skip
        return parts.join("output_dense", contexts)

    def _context(self, projected, layout, heads, training, first_only):
        """`heads` heads' attention, from their query, key and value projections (`projected`,
        as _attend takes them): (rows, heads * head_size), the rows of the keys and values the
        tokens (packed), those of the queries too, or with `first_only` one a sequence."""
        static = self.static_shapes
        spread = functools.partial(spread_for_attention, layout=layout, static=static)
        if first_only:
            return self._attend(projected, spread, layout["input_mask"], heads, training,
                                first_only=True)  # fmt: skip
        context = self._attend(projected, spread, layout["input_mask"], heads, training)
        return pack(context, layout, static)

    def _attend(self, projected, spread, input_mask, heads, training, first_only=False):
        """Attention over the sequences that `spread` lays the packed rows out in, (rows, width)
        -> (batch * seq, width), with `input_mask` (batch, seq): (batch * seq, heads *
        head_size), each position's context (padded ones' to be dropped). `projected`: the
        query, key and value projections, (rows, heads * head_size) each, in that order, as a
        tuple of tensors that each hold one or more of them side by side (a column part's one
        product), spread and split into heads together. With `first_only`, the query is a
        tensor of its own holding one row a sequence, and so does the result."""
        batch, seq = ops.shape(input_mask)[0], ops.shape(input_mask)[1]
        queries = 1 if first_only else seq
        split = []  # each (batch, heads, length, size)
        for i, x in enumerate(projected):
            if first_only and i == 0:  # the queries, one a sequence, not spread
                split += self._split_heads(x, batch, queries, heads)
            else:
                split += self._split_heads(spread(x), batch, seq, heads)
        query, key, value = split
        scores = tf.linalg.matmul(query, key, adjoint_b=True)  # (batch, heads, queries, seq)
        # Scaled and masked in the product's dtype. Adding 0 keeps a real key's score exact;
        # -1e9 drowns a padded one in bfloat16 as in float32.
        scale = tf.constant(1.0 / math.sqrt(self.head_size), self.compute_dtype)
        scores = scores * scale + attention_bias(input_mask, self.compute_dtype)
        # Softmax in float32: bfloat16 scores would lose the small differences between keys.
        probs = tf.nn.softmax(ops.cast(scores, "float32"))  # (batch, heads, queries, seq)
        probs = self.dropout(ops.cast(probs, self.compute_dtype), training=training)
        context = tf.linalg.matmul(probs, value)  # (batch, heads, queries, size)
        context = swap_heads_and_positions(context)  # (batch, queries, heads, head_size)
        return ops.reshape(context, (-1, heads * self.head_size))  # (batch * queries, ...)

    def split_columns(self, count, first_only=False):
        """Serving: computes its heads in `count` groups, each from its own columns of the
        query, key and value weights, in one product a group, and (in float32) its output
        product as the sum of each group's product with its own rows of the weights; all on
        frozen copies of the weights (ColumnParts). The groups share no work until they are
        summed, so TensorFlow's inter-op threads run them side by side: a sentence's products
        are too small for oneDNN to split over two threads at a gain. The same numbers up to
        the rounding of that sum; 1 undoes it. Refused in training. `first_only`: for a layer
        called with first_only=True, the query's columns kept in a product of their own, so
        that it computes the first tokens' queries alone (key and value in one product)."""
        self._column_parts = self._split(count, first_only)

    def _split(self, count, first_only=False):
        count = column_parts.check_shares(count, [("attention heads", self.num_attention_heads)])
        if count == 1:
            return None
        if first_only:
            projections = {"query": self.query, "key_value": (self.key, self.value)}
        else:
            projections = {"query_key_value": (self.query, self.key, self.value)}
        return column_parts.ColumnParts(count, **projections, output_dense=self.output_dense,
                                        rows=["output_dense"])  # fmt: skip

    def compute_output_shape(self, tokens_shape, layout_shape):
        return tokens_shape

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }
