import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bert.model import primitives


def test_layer_norm_matches_keras_in_values_and_gradients():
    # In a tf.function, where oneDNN's graph rewrite fuses it into one LayerNorm op.
    rng = np.random.default_rng(9)
    ours, keras_own = primitives.layer_norm("ours"), keras.layers.LayerNormalization(epsilon=1e-12)
    gamma_and_beta = [rng.normal(size=24).astype("float32") for _ in range(2)]
    for layer in (ours, keras_own):
        layer.build((None, 24))
        layer.set_weights(gamma_and_beta)
    x = tf.constant(rng.normal(size=(3, 5, 24)) * 1e-3, "float32")  # variance 1e-6
    weights = tf.constant(rng.normal(size=(3, 5, 24)), "float32")

    @tf.function
    def values_and_gradients(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * weights)
        return [y] + tape.gradient(loss, [x] + layer.trainable_weights)

    expected = values_and_gradients(keras_own)
    for got, want in zip(values_and_gradients(ours), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    inference = tf.function(lambda x: ours(x))(x)  # no gradient
    np.testing.assert_allclose(inference, expected[0], rtol=1e-5, atol=1e-5)


def test_gelu_forms_differ_and_match_their_formulas():
    x = np.linspace(-4, 4, 81).astype("float32")
    exact = primitives.activation("gelu")(x).numpy()
    tanh = primitives.activation("gelu_new")(x).numpy()
    from math import erf, erfc, pi, sqrt
    from math import tanh as th

    np.testing.assert_allclose(exact, [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=1e-6)
    # The erf form (exact_gelu) and TensorFlow's erfc form (tf.nn.gelu) are both within two
    # float32 roundings of max(|x|, 1) of the float64 GELU, out to where 1 + erf(x / sqrt 2)
    # has lost all its digits (below x = -5.5): measured 2.1e-7 and 1.2e-7.
    wide = np.linspace(-12, 12, 24001).astype("float32")
    want = np.array([v * 0.5 * erfc(-v / sqrt(2)) for v in wide.astype("float64")])
    for form in (primitives.exact_gelu(wide), tf.nn.gelu(wide, approximate=False)):
        error = np.abs(form.numpy().astype("float64") - want) / np.maximum(np.abs(wide), 1)
        assert error.max() < 2.5e-7, error.max()
    ref_tanh = [0.5 * v * (1 + th(sqrt(2 / pi) * (v + 0.044715 * v**3))) for v in x]
    np.testing.assert_allclose(tanh, ref_tanh, atol=1e-6)
    assert np.abs(exact - tanh).max() > 1e-4


@pytest.mark.parametrize("dtype,tolerance", [("float32", 1e-6), ("bfloat16", 2**-8)])
def test_training_gelu_is_the_exact_gelu_and_its_derivative(dtype, tolerance):
    from math import erf, exp, pi, sqrt

    x = tf.constant(np.linspace(-5, 5, 201), dtype)
    x64 = tf.cast(x, "float64").numpy()
    cdf = np.array([0.5 * (1 + erf(v / sqrt(2))) for v in x64])
    pdf = np.array([exp(-v * v / 2) / sqrt(2 * pi) for v in x64])
    upstream = tf.constant(np.linspace(-2, 3, 201), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = primitives.training_gelu(x)
    gradient = tape.gradient(y, x, upstream)
    assert y.dtype == gradient.dtype == dtype
    # Within one rounding of the result: computed in float32 whatever the dtype.
    want_y = x64 * cdf
    want_gradient = tf.cast(upstream, "float64").numpy() * (cdf + x64 * pdf)
    np.testing.assert_allclose(tf.cast(y, "float64"), want_y, rtol=tolerance, atol=1e-7)
    np.testing.assert_allclose(tf.cast(gradient, "float64"), want_gradient, rtol=tolerance,
                               atol=1e-7)  # fmt: skip


def test_gelu_dense_trains_with_training_gelu_and_infers_with_exact_gelu():
    rng = np.random.default_rng(4)
    ours, keras_own = primitives.GeluDense(16, name="ours"), keras.layers.Dense(
        16, activation=primitives.activation("gelu"))
    weights = [rng.normal(size=(8, 16)), rng.normal(size=16)]
    for layer in (ours, keras_own):
        layer.build((None, 8))
        layer.set_weights(weights)
    x = tf.constant(rng.normal(size=(5, 8)), "float32")
    np.testing.assert_array_equal(ours(x), keras_own(x))  # inference: the same ops
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        trained, reference = ours(x, training=True), keras_own(x, training=True)
    np.testing.assert_allclose(trained, reference, rtol=1e-6, atol=1e-6)
    for ours_gradient, keras_gradient in zip(
            tape.gradient(trained, [x, *ours.trainable_weights]),
            tape.gradient(reference, [x, *keras_own.trainable_weights])):  # fmt: skip
        np.testing.assert_allclose(ours_gradient, keras_gradient, rtol=1e-5, atol=1e-5)
    rebuilt = primitives.GeluDense.from_config(ours.get_config())
    assert rebuilt.units == 16 and rebuilt.activation is not None
    no_bias = primitives.GeluDense(16, use_bias=False)
    no_bias.build((None, 8))
    no_bias.set_weights(weights[:1])
    np.testing.assert_allclose(no_bias(x, training=True), no_bias(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_drops_its_rate_and_scales_what_it_keeps(dtype, rate):
    dropout = primitives.BertDropout(rate, seed=3, dtype=dtype)
    x = tf.ones((999, 1001), dtype)  # an odd number of values: 16-bit draws come in pairs
    with tf.GradientTape() as tape:
        tape.watch(x)
        dropped_out = dropout(x, training=True)
    assert dropped_out.dtype == dtype
    y = dropped_out.numpy().astype("float64")
    dropped = round(rate * 65536)
    scale = float(tf.cast(65536 / (65536 - dropped), dtype))
    # 999,999 draws: the dropped fraction's standard deviation is below 0.0005.
    assert abs((y == 0).mean() - dropped / 65536) < 0.0025
    np.testing.assert_array_equal(np.unique(y), [0.0, scale])
    gradient = tape.gradient(dropped_out, x).numpy().astype("float64")
    np.testing.assert_array_equal(gradient, y)  # mask times scale
    again = dropout(x, training=True).numpy()
    assert 0 < (again != y).mean() < 2 * rate  # a new mask every call
    same_seed = primitives.BertDropout(rate, seed=3, dtype=dtype)(x, training=True)
    same_seed = same_seed.numpy().astype("float64")
    np.testing.assert_array_equal(same_seed, y)
    assert dropout(x) is x and dropout(x, training=False) is x
