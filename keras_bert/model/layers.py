"""The layers of a BERT encoder: embeddings, transformer block, pooler (self-attention is
keras_bert/model/attention.py, the GELU, dropout and LayerNorm they use keras_bert/model/primitives.py).

The blocks compute on the real tokens alone, packed into (tokens, hidden) (keras_bert/model/packing.py);
only attention spreads them back to (batch, seq) for its batched products.

Mixed precision: the embedding sum and every LayerNorm run in float32 (their layers carry a
float32 dtype policy), attention scores are cast to float32 before the softmax, and the
training GELU computes in float32 (`primitives.training_gelu`). The residual stream between
blocks is therefore float32; the dense layers cast their inputs to the compute dtype (bfloat16
or float16) themselves.
"""

import functools

import keras
import tensorflow as tf
from keras import ops

from keras_bert.model import column_parts
from keras_bert.model.attention import BertSelfAttention
from keras_bert.model.primitives import BertDropout, GeluDense, activation, initializer, layer_norm

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@_SERIALIZABLE
class BertEmbeddings(keras.layers.Layer):
    """Token + position + segment embeddings, then LayerNorm and dropout.

    Call with `input_word_ids` and `input_type_ids`, int32 of shape (batch, seq) with
    seq <= max_position_embeddings. Returns float32 (batch, seq, hidden_size).
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings,
        type_vocab_size,
        dropout_rate,
        initializer_range,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range

        self.word_embeddings = keras.layers.Embedding(
            vocab_size,
            hidden_size,
            embeddings_initializer=initializer(initializer_range),
            dtype="float32",
            name="word_embeddings",
        )
        self.token_type_embeddings = keras.layers.Embedding(
            type_vocab_size,
            hidden_size,
            embeddings_initializer=initializer(initializer_range),
            dtype="float32",
            name="token_type_embeddings",
        )
        self.layer_norm = layer_norm("layer_norm")
        self.dropout = BertDropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape=None):
        self.word_embeddings.build()
        self.token_type_embeddings.build()
        self.position_embeddings = self.add_weight(
            shape=(self.max_position_embeddings, self.hidden_size),
            initializer=initializer(self.initializer_range),
            dtype="float32",
            name="position_embeddings",
        )
        self.layer_norm.build((None, None, self.hidden_size))

    def call(self, input_word_ids, input_type_ids, training=None):
        seq_length = ops.shape(input_word_ids)[1]
        if isinstance(seq_length, int) and seq_length > self.max_position_embeddings:
            # Else TensorFlow's "Incompatible shapes: [1,40,8] vs. [1,16,8]" in the add below.
            raise ValueError(f"the inputs have {seq_length} positions, more than this encoder's "
                             f"max_position_embeddings={self.max_position_embeddings}: pack "
                             "them to at most that many (BertPacker's sequence_length)")  # fmt: skip
        x = self.word_embeddings(input_word_ids)  # (batch, seq, hidden)
        x = x + self.token_type_embeddings(input_type_ids)
        x = x + self.position_embeddings[None, :seq_length, :]
        return self.dropout(self.layer_norm(x), training=training)

    def compute_output_shape(self, input_word_ids_shape, input_type_ids_shape):
        return (*input_word_ids_shape, self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }


@_SERIALIZABLE
class BertTransformerBlock(keras.layers.Layer):
    """Post-LN transformer block: LN(x + attention(x)), then LN(x + feed_forward(x)).

    Call with `tokens`, float32 (tokens, hidden_size), the real tokens packed, and `layout`,
    the `packing.TokenLayout` of their batch. Returns float32 (tokens, hidden_size); with
    `first_only=True`, float32 (batch, hidden_size): each sequence's first token alone, the
    same numbers at a fraction of the cost (attention still reads all tokens, but only the
    first token's query, residual, LayerNorms and feed-forward are computed). A classifier's
    last block needs no more.
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        intermediate_size,
        hidden_act,
        hidden_dropout_prob,
        attention_probs_dropout_prob,
        initializer_range,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # The residual stream stays float32: Keras would cast a mixed-precision block's input
        # to bfloat16, rounding the skip connections; the sublayers cast what they compute on.
        self._convert_input_args = False
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range

        self.attention = BertSelfAttention(
            hidden_size,
            num_attention_heads,
            attention_probs_dropout_prob,
            initializer_range,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention_dropout = BertDropout(
            hidden_dropout_prob, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.attention_layer_norm = layer_norm("attention_layer_norm")
        # The exact GELU has its own training form (GeluDense); other activations are Keras's.
        if hidden_act == "gelu":
            intermediate_dense = GeluDense
        else:
            intermediate_dense = functools.partial(keras.layers.Dense,
                                                   activation=activation(hidden_act))  # fmt: skip
        self.intermediate = intermediate_dense(
            intermediate_size,
            kernel_initializer=initializer(initializer_range),
            dtype=self.dtype_policy,
            name="intermediate",
        )
        self.output_dense = keras.layers.Dense(
            hidden_size,
            kernel_initializer=initializer(initializer_range),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dropout = BertDropout(
            hidden_dropout_prob, dtype=self.dtype_policy, name="output_dropout"
        )
        self.output_layer_norm = layer_norm("output_layer_norm")

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.attention_layer_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_size))
        self.output_layer_norm.build(input_shape)

    def call(self, tokens, layout, training=None, first_only=False):
        # Rank 2, so that oneDNN fuses each product with its bias and the intermediate one
        # with its GELU too.
        attended = self.attention(tokens, layout, training=training, first_only=first_only)
        attended = self.attention_dropout(attended, training=training)
        if first_only:
            tokens = tf.gather(tokens, layout["first"])
        tokens = self.attention_layer_norm(tokens + ops.cast(attended, tokens.dtype))
        parts = column_parts.of_layer(self, training)
        if parts is None:
            fed = self.output_dense(self.intermediate(tokens))
        else:
            fed = parts.join("output_dense", [part(tokens) for part in parts["intermediate"]])
        fed = self.output_dropout(fed, training=training)
        return self.output_layer_norm(tokens + ops.cast(fed, tokens.dtype))

    def split_columns(self, count, first_only=False):
        """Serving: attention in `count` groups of heads (BertSelfAttention.split_columns), and
        the feed-forward's first product in `count` column blocks, each followed by its own
        rows of the second (in float32; in 16 bits, column blocks of the second too), on
        frozen copies of the weights (ColumnParts): the parts run side by side on TensorFlow's
        inter-op threads and join once a sublayer. The same numbers up to the rounding of
        that join's sum; refused in training; 1 undoes it. `first_only`: split for calls with
        first_only=True (the attention's queries in a product of their own)."""
        attention_parts = self.attention._split(count, first_only)  # all checked before any is kept
        parts = None if count == 1 else column_parts.ColumnParts(
            count, intermediate=self.intermediate, output_dense=self.output_dense,
            rows=["output_dense"])  # fmt: skip
        self.attention._column_parts = attention_parts
        self._column_parts = parts

    def compute_output_shape(self, tokens_shape, layout_shape):
        return tokens_shape

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "initializer_range": self.initializer_range,
        }


@_SERIALIZABLE
class BertPooler(keras.layers.Layer):
    """tanh(dense(sequence_output[:, 0])): (batch, seq, hidden) -> (batch, hidden). Also takes
    the first tokens alone, (batch, hidden)."""

    def __init__(self, hidden_size, initializer_range, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            hidden_size,
            activation="tanh",
            kernel_initializer=initializer(initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )

    def build(self, input_shape):
        self.dense.build((input_shape[0], input_shape[-1]))

    def call(self, sequence_output):
        if len(sequence_output.shape) == 3:
            sequence_output = sequence_output[:, 0, :]
        return self.dense(sequence_output)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
        }
