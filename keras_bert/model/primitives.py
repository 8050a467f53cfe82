"""The small pieces BERT's layers are made of, each a faster form of Keras's own on CPUs with the
same weights and numbers: the exact GELU (with its own training form), dropout, LayerNorm.

Mixed precision: LayerNorm computes in float32 (`layer_norm` gives it a float32 dtype policy)
and the training GELU in float32 whatever its input's dtype (`training_gelu`).
"""

import math

import keras
import tensorflow as tf
from keras import ops

from keras_bert.model.config import LAYER_NORM_EPSILON

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@_SERIALIZABLE
def exact_gelu(x):
    """x * Phi(x), with the normal distribution's exact CDF (Keras's gelu defaults to the tanh
    approximation), written with erf as Google's BERT writes it: x * (erf(x / sqrt 2) + 1) / 2.

    Keras's exact form, TensorFlow's tf.nn.gelu, is 0.5 * x * erfc(-x / sqrt 2). Where oneDNN
    runs, Grappler fuses either form into the dense product before it, as the same kernel with
    the same numbers. Where it does not (TensorFlow's default on a CPU with AVX2 alone, so TF
    Serving's), the GELU runs as its own ops, and TensorFlow's Erf kernel is vectorised where
    its Erfc is not. Both forms are within two float32 roundings of max(|x|, 1) of the float64
    GELU (tests/test_primitives.py).
    """
    x = ops.convert_to_tensor(x)
    return x * ((ops.erf(x * (1 / math.sqrt(2))) + 1.0) * 0.5)


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

    In inference `exact_gelu` runs instead, which oneDNN fuses into the dense product (in
    float32 on its sums); training keeps the product's output for the gradient, so that fusion
    cannot fire. Against Keras's GELU differentiated by TensorFlow: values and gradients in
    float32 instead of rounded to bfloat16 after each of about ten element-wise ops, and no
    bfloat16 Erfc (its time and error: docs/performance.md).
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
    """A Dense layer with the exact GELU: `exact_gelu` in inference (oneDNN fuses it into the
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
    by 65536 / (65536 - round(rate * 65536)): half the work of TensorFlow's random generator,
    which dominates dropout. Other backends, and a noise_shape, take Keras's own path.
    """

    def call(self, inputs, training=False):
        if (not training or self.rate == 0 or self.noise_shape is not None
                or keras.backend.backend() != "tensorflow"):  # fmt: skip
            return super().call(inputs, training=training)
        scale = tf.constant(_DROPOUT_LEVELS / (_DROPOUT_LEVELS - self._dropped), inputs.dtype)
        return tf.where(self.keep_mask(inputs), inputs * scale, tf.zeros((), inputs.dtype))

    @property
    def _dropped(self):
        """Of the 65,536 values 16 random bits take, how many drop a position."""
        return round(self.rate * _DROPOUT_LEVELS)

    def keep_mask(self, inputs):
        """bool, `inputs`' shape: the positions this call keeps, a fresh draw from the layer's
        seed generator (its state advances once a call)."""
        # The int32 seed Keras's TensorFlow backend makes of the generator's int64 state.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform(((size + 1) // 2,), seed, minval=None, maxval=None,
                                           dtype=tf.uint32)  # fmt: skip
        bits = tf.reshape(tf.bitcast(bits, tf.uint16), (-1,))[:size]
        return tf.reshape(bits >= self._dropped, tf.shape(inputs))


def initializer(stddev):
    return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(name):
    return BertLayerNorm(epsilon=LAYER_NORM_EPSILON, dtype="float32", name=name)


@_SERIALIZABLE
class BertLayerNorm(keras.layers.LayerNormalization):
    """Keras's LayerNormalization over the last axis (the same weights and numbers), computed
    as TensorFlow's FusedBatchNormV3 over the rows (one channel a row), which oneDNN fuses with
    the scale and shift into a single LayerNorm op; Keras's own form is ten element-wise ops
    and reductions. (BatchNorm's Python wrapper raises epsilon to 1.001e-5; the op itself takes
    BERT's 1e-12.) Other axes, and `rms_scaling`, are Keras's own. Computes in float32 and
    returns the compute dtype."""

    def call(self, inputs, training=None):
        if self.axis not in ([-1], [len(inputs.shape) - 1]) or self.rms_scaling:
            return super().call(inputs)
        x = tf.cast(inputs, "float32")
        rows = tf.reshape(x, (-1, x.shape[-1]))
        normalized = self._fused(rows, tf.convert_to_tensor(self.gamma),
                                 tf.convert_to_tensor(self.beta))  # fmt: skip
        return ops.cast(tf.reshape(normalized, tf.shape(x)), self.compute_dtype)

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
