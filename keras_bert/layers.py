"""The layers of a BERT encoder: embeddings, self-attention, transformer block, pooler.

The blocks compute on the real tokens alone, packed into (tokens, hidden) (keras_bert/packing.py);
only attention spreads them back to (batch, seq) for its batched products.

Mixed precision: the embedding sum and every LayerNorm run in float32 (their layers carry a
float32 dtype policy), attention scores are cast to float32 before the softmax, and the
training GELU computes in float32 (`training_gelu`). The residual stream between blocks is
therefore float32; the dense layers cast their inputs to the compute dtype (bfloat16 or
float16) themselves.
"""

import functools
import math

import keras
import tensorflow as tf
from keras import ops

from keras_bert import column_parts
from keras_bert.config import LAYER_NORM_EPSILON
from keras_bert.packing import pack, spread_for_attention

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@_SERIALIZABLE
def exact_gelu(x):
    """x * Phi(x), with the normal distribution's exact CDF (Keras's gelu defaults to the tanh
    approximation)."""
    return keras.activations.gelu(x, approximate=False)


def activation(name):
    """The activation function for a `BertConfig.hidden_act` name."""
    if name == "gelu":
        return exact_gelu
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda x: keras.activations.gelu(x, approximate=True)
    return keras.activations.get(name)


@tf.custom_gradient
def training_gelu(x):
    """The exact GELU, x * Phi(x), as BertTransformerBlock trains it: in float32 whatever x's
    dtype, with its derivative written out, Phi(x) + x * phi(x).

    In inference Keras's GELU runs instead, which oneDNN fuses into the dense product (in
    float32 on its sums); training keeps the product's output for the gradient, so that fusion
    cannot fire. Against Keras's GELU differentiated by TensorFlow, on bfloat16 (1024, 3072):
    forward and backward 12.8 -> 9.2 ms, values and gradients in float32 instead of rounded to
    bfloat16 after each of about ten element-wise ops (largest gradient error against float64
    0.030 -> 0.016), and bfloat16's Erfc (three times float32's) avoided.
    """
    x32 = tf.cast(x, "float32")
    cdf = 0.5 * tf.math.erfc(x32 * -(1 / math.sqrt(2)))  # Phi(x)

    def gradient(upstream):
        # Cast again rather than keep the float32 copy for the backward pass: x itself is kept.
        x32 = tf.cast(x, "float32")
        pdf = tf.exp(tf.square(x32) * -0.5) * (1 / math.sqrt(2 * math.pi))  # phi(x)
        return tf.cast(tf.cast(upstream, "float32") * (cdf + x32 * pdf), upstream.dtype)

    return tf.cast(x32 * cdf, x.dtype), gradient


@_SERIALIZABLE
class GeluDense(keras.layers.Dense):
    """A Dense layer with the exact GELU: Keras's in inference (oneDNN fuses it into the
    product), `training_gelu` in training. Call with `training` as any Keras layer."""

    def __init__(self, units, **kwargs):
        kwargs["activation"] = exact_gelu
        super().__init__(units, **kwargs)

    def call(self, inputs, training=None):
        if not training or self.quantization_mode or self.lora_enabled:
            return super().call(inputs)
        x = ops.matmul(inputs, self.kernel)
        return training_gelu(x if self.bias is None else ops.add(x, self.bias))

    def get_config(self):
        config = super().get_config()
        del config["activation"]
        return config


# Dropout's random numbers are 16 bits each: the keep probability is a multiple of 1/65536.
_DROPOUT_LEVELS = 65536


@_SERIALIZABLE
class BertDropout(keras.layers.Dropout):
    """keras.layers.Dropout drawing half the random bits: each position compares 16 random bits
    with round(rate * 65536), where Keras's path draws a random float from one 32-bit output of
    the generator per position.

    The rate is rounded to a multiple of 1/65536 (0.1 -> 0.1000061) and kept values are scaled
    by 65536 / (65536 - round(rate * 65536)). On attention's (8, 12, 128, 128) bfloat16
    probabilities the call takes 2.1 ms instead of 4.4 (TensorFlow's Philox generator
    dominates: StatelessRandomUniformV2 was 7% of a BERT-base bfloat16 training step).
    Other backends, and a noise_shape, take Keras's own path.
    """

    def call(self, inputs, training=False):
        if (not training or self.rate == 0 or self.noise_shape is not None
                or keras.backend.backend() != "tensorflow"):  # fmt: skip
            return super().call(inputs, training=training)
        # The int32 seed Keras's TensorFlow backend makes of the generator's int64 state.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        dropped = round(self.rate * _DROPOUT_LEVELS)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform(((size + 1) // 2,), seed, minval=None, maxval=None,
                                           dtype=tf.uint32)  # fmt: skip
        bits = tf.reshape(tf.bitcast(bits, tf.uint16), (-1,))[:size]
        keep = tf.reshape(bits >= dropped, tf.shape(inputs))
        scale = tf.constant(_DROPOUT_LEVELS / (_DROPOUT_LEVELS - dropped), inputs.dtype)
        return tf.where(keep, inputs * scale, tf.zeros((), inputs.dtype))


def initializer(stddev):
    return keras.initializers.TruncatedNormal(stddev=stddev)


def _cond(pred, true_fn, false_fn):
    """tf.cond, or the one branch when pred is known while tracing (static shapes)."""
    if isinstance(pred, bool):
        return true_fn() if pred else false_fn()
    return tf.cond(pred, true_fn, false_fn)


def layer_norm(name):
    return BertLayerNorm(epsilon=LAYER_NORM_EPSILON, dtype="float32", name=name)


# A LayerNorm over more than this many values runs as one fused op; up to it, as a few plain ones.
FUSED_LAYER_NORM = 65536


@_SERIALIZABLE
class BertLayerNorm(keras.layers.LayerNormalization):
    """Keras's LayerNormalization over the last axis (the same weights and numbers), faster.

    Large inputs: the normalisation is TensorFlow's FusedBatchNormV3 over the rows (one channel
    per row), which oneDNN fuses with the scale and shift into a single LayerNorm op; Keras's
    own form runs as ten element-wise ops and reductions. (BatchNorm's Python wrapper raises
    epsilon to 1.001e-5; the op itself takes BERT's 1e-12.) Small inputs: oneDNN's op costs
    about 100 microseconds a call however few the rows, so in inference they run as plain ops.
    Measured on (rows, 384), float32: 12 rows 15 us plain (Keras 18), fused 128; 1,000 rows
    fused 190 us, Keras 470. Training always takes the fused op: the size is known only when
    the graph runs, so the choice is a cond, and a training step would trace both forms and
    both their gradients for batches that are large anyway.
    """

    def call(self, inputs, training=None):
        if self.axis not in ([-1], [len(inputs.shape) - 1]) or self.rms_scaling:
            return super().call(inputs)
        x = tf.cast(inputs, "float32")
        shape = tf.shape(x)
        rows = tf.reshape(x, (-1, x.shape[-1]))
        size = tf.size(rows) if rows.shape.num_elements() is None else rows.shape.num_elements()
        # The weights are read outside the cond: a branch that reads a variable makes the cond
        # a stateful op, which a tf.function always runs, with all it depends on, even when
        # nothing reads its result (encoder.py's pooled_output_only relies on the pruning).
        gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        fused = True if training else size > FUSED_LAYER_NORM  # see the class docstring
        normalized = _cond(fused, lambda: self._fused(rows, gamma, beta),
                           lambda: self._plain(rows, gamma, beta))  # fmt: skip
        return ops.cast(tf.reshape(normalized, shape), self.compute_dtype)

    def _plain(self, rows, gamma, beta):
        centered = rows - tf.reduce_mean(rows, axis=-1, keepdims=True)
        variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
        return centered * (tf.math.rsqrt(variance + self.epsilon) * gamma) + beta

    def _fused(self, rows, gamma, beta):
        # The exact pattern oneDNN's graph rewrite looks for: Reshape, FusedBatchNormV3 with
        # unit scale and zero offset (Fill), Reshape, Mul by gamma, Add beta.
        count = tf.shape(rows)[:1]
        empty = tf.zeros((0,), "float32")
        normalized = tf.raw_ops.FusedBatchNormV3(
            x=tf.reshape(rows, (1, -1, rows.shape[-1], 1)), scale=tf.ones(count),
            offset=tf.zeros(count), mean=empty, variance=empty, epsilon=self.epsilon,
            data_format="NCHW", is_training=True)[0]  # fmt: skip
        return tf.reshape(normalized, tf.shape(rows)) * gamma + beta


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


# The same bits as an integer of the same width: see swap_heads_and_positions.
_SAME_WIDTH_INT = {"float32": tf.int32, "bfloat16": tf.int16, "float16": tf.int16}


@tf.custom_gradient
def swap_heads_and_positions(x):
    """(batch, seq, heads, size) <-> (batch, heads, seq, size): attention's transposes.

    The transpose runs on the integer view of x's bits. oneDNN replaces every floating-point
    Transpose with its own, which builds a reorder each call: 41 microseconds for a 10-token
    sentence's (1, 10, 12, 32), where TensorFlow's own kernel (which integers keep) takes 4; on
    BERT-base batches the two are as fast (measured with the change, commit a5629cd). Its own
    inverse, and so its own gradient.
    """

    def swap(t):
        integer = _SAME_WIDTH_INT[t.dtype.name]
        return tf.bitcast(tf.transpose(tf.bitcast(t, integer), (0, 2, 1, 3)), t.dtype)

    return swap(x), swap


# In inference, attention over at most this many (batch * seq * seq) scores per head runs on
# TensorFlow's own kernels, above it on oneDNN's. oneDNN's batched products and softmax cost 30
# to 60 microseconds a call however small the input: 125 per block for a 10-token sentence,
# against 9 for TensorFlow's. Its products win from about 2 x 40 x 40 (float32; bfloat16 from
# 1 x 64 x 64) and run BERT-base batches 2 to 4 times as fast. Training takes oneDNN's kernels
# outright, as BertLayerNorm takes its fused op: no cond to trace twice, with its gradients.
SMALL_ATTENTION = 1600


def small_batch_matmul(x, y, adjoint_b=False):
    """x @ y (or y transposed) on TensorFlow's own kernel: oneDNN replaces BatchMatMulV2 only."""
    return tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=x.dtype, adj_y=adjoint_b)


def small_softmax(scores):
    """The softmax over the last axis, as plain element-wise ops and reductions (oneDNN
    replaces the Softmax op)."""
    exp = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
    return exp / tf.reduce_sum(exp, axis=-1, keepdims=True)


def attention_bias(input_mask, dtype):
    """(batch, seq) 0/1 mask -> (batch, 1, 1, seq) bias in `dtype`: 0 where attended, a large
    negative number not (-1e9; -1e4 in float16, whose range ends at 65,504)."""
    mask = ops.cast(input_mask, dtype)[:, None, None, :]
    return (1.0 - mask) * (-1e4 if dtype == "float16" else -1e9)


def _projected_parts(parts, tokens, first):
    """Each column part's (query, key, value) projections of `tokens` (ColumnParts of
    BertSelfAttention._split): the queries of the rows `first` alone, where it is not None."""
    if "query_key_value" in parts:  # the parts' one product each
        for part in parts["query_key_value"]:
            query, key, value = part(tokens)
            yield (query if first is None else tf.gather(query, first)), key, value
        return
    queries = tokens if first is None else tf.gather(tokens, first)
    for query_part, key_value_part in zip(parts["query"], parts["key_value"]):
        yield (query_part(queries), *key_value_part(tokens))


@_SERIALIZABLE
class BertSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention with its output projection.

    Call with `tokens`, the real tokens packed as (tokens, hidden_size), and `layout`, the
    `packing.TokenLayout` of their batch (its input_mask says which keys may be attended to).
    Returns (tokens, hidden_size) in the compute dtype; with `first_only=True`, (batch,
    hidden_size): only each sequence's first token queries (all tokens are still keys).
    """

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
        """(batch * length, heads * head_size) -> (batch, heads, length, head_size)."""
        x = ops.reshape(x, (batch, length, heads, self.head_size))
        return swap_heads_and_positions(x)

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
        """`heads` heads' attention, from their (query, key, value) projections: (rows, heads *
        head_size), the rows of the keys and values the tokens (packed), those of the queries
        too, or with `first_only` one a sequence."""
        query, key, value = projected
        input_mask = layout["input_mask"]
        batch, seq = ops.shape(input_mask)[0], ops.shape(input_mask)[1]
        queries = 1 if first_only else seq
        if not first_only:
            query = spread_for_attention(query, layout)  # (batch * seq, width)
        query = self._split_heads(query, batch, queries, heads)  # (batch, heads, queries, size)
        key = self._split_heads(spread_for_attention(key, layout), batch, seq, heads)
        value = self._split_heads(spread_for_attention(value, layout), batch, seq, heads)
        # Only where oneDNN would run them: not on GPUs, and not in float16 (TensorFlow's
        # BatchMatMulV3 has no float16 kernel on CPUs).
        small = (not training and self.compute_dtype != "float16"
                 and not tf.config.list_logical_devices("GPU")
                 and batch * queries * seq <= SMALL_ATTENTION)  # fmt: skip

        def attention_probs(matmul, softmax):
            scores = matmul(query, key, adjoint_b=True)  # (batch, heads, queries, seq)
            # Scaled and masked in the product's dtype, in this order and under this absolute
            # name: oneDNN's graph rewrite then fuses the product, the scalar Mul and the Add
            # into one kernel that applies them to its float32 sums (one pass over the scores
            # instead of three). Its pattern wants the product as the Mul's first input and the
            # Mul as the Add's, and Grappler sorts the inputs of both by name first; "zz_"
            # sorts after the model's own names. Adding 0 keeps a real key's score exact;
            # -1e9 drowns a padded one in bfloat16 as in float32.
            with tf.name_scope("zz_attention/"):
                scale = tf.constant(1.0 / math.sqrt(self.head_size), self.compute_dtype)
                bias = attention_bias(input_mask, self.compute_dtype)
            scores = scores * scale + bias
            # Softmax in float32: bfloat16 scores would lose the small differences between keys.
            return softmax(ops.cast(scores, "float32"))  # (batch, heads, queries, seq)

        probs = _cond(small, lambda: attention_probs(small_batch_matmul, small_softmax),
                      lambda: attention_probs(tf.linalg.matmul, tf.nn.softmax))  # fmt: skip
        probs = self.dropout(ops.cast(probs, self.compute_dtype), training=training)
        context = _cond(small, lambda: small_batch_matmul(probs, value),
                        lambda: tf.linalg.matmul(probs, value))  # (batch, heads, queries, size)
        context = swap_heads_and_positions(context)  # (batch, queries, heads, head_size)
        context = ops.reshape(context, (-1, heads * self.head_size))  # (batch * queries, ...)
        return context if first_only else pack(context, layout)  # (rows, heads * head_size)

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
        column_parts.check_shares(count, [("attention heads", self.num_attention_heads)])
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
        # with its GELU too (measured: benchmarks/profile_encoder.py).
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
        that join's sum; refused in training; 1 undoes it. Measured (benchmarks/RESULTS.md; 2
        cores, one thread per op, the bfloat16 export): a served sentence 1.25x as fast, a
        batch of 32 1.36x. `first_only`: split for calls with first_only=True (the attention's
        queries in a product of their own)."""
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
