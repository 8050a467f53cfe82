import numpy as np
import tensorflow as tf
from conftest import on_tokens

from keras_bert.model import attention, layers, packing


def attention_layer(**kwargs):
    layer = attention.BertSelfAttention(12, 3, 0.0, 0.02, **kwargs)
    layer.build((None, 12))
    return layer


def test_token_layout_packs_real_tokens_and_unpacks_them_in_place():
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], "int32")
    layout = packing.TokenLayout()(mask)
    assert layout["tokens"].numpy().tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    # Each position's row among the packed tokens (padding: row 0, never read for a real one).
    assert layout["slots"].numpy().tolist() == [0, 1, 2, 0, 3, 0, 0, 0, 4, 5, 6, 7]
    x = np.arange(3 * 4 * 2, dtype="float32").reshape(3, 4, 2) + 1
    packed = packing.pack(tf.constant(x), layout)
    assert packed.shape == (8, 2)
    np.testing.assert_array_equal(packing.unpack(packed, layout), x * mask[..., None])
    # Position 0 is computed even in an all-padding row (the pooler reads it).
    assert packing.TokenLayout()(np.zeros((2, 3), "int32"))["tokens"].numpy().tolist() == [0, 3]


def test_padded_positions_get_no_attention():
    layer = attention_layer()
    x = np.random.default_rng(0).normal(size=(2, 7, 12)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1] * 7], "int32")
    changed = x.copy()
    changed[0, 4:] = 100.0  # whatever sits in the padding must not reach the real positions
    a = on_tokens(layer, x, mask).numpy()
    b = on_tokens(layer, changed, mask).numpy()
    np.testing.assert_array_equal(a[0, :4], b[0, :4])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0, 4:], 0.0)  # padded positions are not computed
    # The padded row computes what its four real tokens give alone, unpadded.
    alone = on_tokens(layer, x[:1, :4], np.ones((1, 4), "int32")).numpy()
    np.testing.assert_allclose(a[0, :4], alone[0], atol=1e-6)


def test_gradients_through_packed_tokens_are_those_of_each_sequence_alone(monkeypatch):
    # The spread for attention has a hand-written gradient (packing.spread_for_attention): the
    # weights' and the inputs' gradients must be TensorFlow's own gradient of a plain gather,
    # and what the unpadded sequences give one by one.
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    rng = np.random.default_rng(6)
    x = tf.constant(rng.normal(size=(2, 7, 12)).astype("float32"))
    weights = tf.constant(rng.normal(size=(2, 7, 12)).astype("float32"))
    lengths = [4, 7]
    mask = (np.arange(7)[None] < np.array(lengths)[:, None]).astype("int32")

    def gradients(pieces):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = sum(tf.reduce_sum(on_tokens(block, x[rows, :n], m) * weights[rows, :n])
                       for rows, n, m in pieces)  # fmt: skip
        return tape.gradient(loss, [x] + block.trainable_weights)

    together = gradients([(slice(0, 2), 7, mask)])
    alone = gradients([(slice(i, i + 1), n, np.ones((1, n), "int32"))
                       for i, n in enumerate(lengths)])  # fmt: skip
    monkeypatch.setattr(attention, "spread_for_attention",
                        lambda tokens, layout, static: tf.gather(tokens, layout["slots"]))  # fmt: skip
    autodiff = gradients([(slice(0, 2), 7, mask)])
    assert np.abs(together[0][0, 4:]).max() == 0.0  # the padded inputs do not matter
    assert np.abs(autodiff[0]).max() > 0.01 and np.abs(autodiff[1]).max() > 0.001  # x, query
    for ours, plain, each in zip(together, autodiff, alone):
        np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ours, each, atol=1e-5)


def test_attention_matches_a_plain_numpy_computation():
    layer = attention_layer()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "int32")
    q, k, v = (x @ d.kernel.numpy() + d.bias.numpy() for d in (layer.query, layer.key, layer.value))
    heads = lambda t: t.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3)  # (batch, heads, seq, 4)
    scores = (
        heads(q) @ heads(k).transpose(0, 1, 3, 2) / 2.0 + np.where(mask, 0, -1e9)[:, None, None]
    )
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ heads(v)).transpose(0, 2, 1, 3).reshape(2, 5, 12)
    expected = context @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy()
    expected = expected * mask[..., None]  # padded positions are not computed: 0
    np.testing.assert_allclose(on_tokens(layer, x, mask).numpy(), expected, atol=1e-5)


