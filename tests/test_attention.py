import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bert import attention, layers, packing

from conftest import on_tokens


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


def test_padded_positions_get_no_attention(attention_kernels):
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


def test_gradients_through_packed_tokens_are_those_of_each_sequence_alone(
    monkeypatch, attention_kernels
):
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


def test_attention_matches_a_plain_numpy_computation(attention_kernels):
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


def test_attention_buckets_group_sequences_of_similar_length():
    # Lengths 3, 1, 2, 2, 5 sort (stably) to sequences 1, 2, 3, 0, 4, cut 1, 1, 1, 2.
    buckets, unbucket = packing.attention_buckets(tf.constant([3, 1, 2, 2, 5]))
    assert [mask.numpy().tolist() for _, mask in buckets] == [
        [[1]], [[1, 1]], [[1, 1]], [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]]  # fmt: skip
    # Rows among the 13 packed tokens (sequence 0's are 0-2, 1's 3, 2's 4-5, ...); 0 for padding.
    assert [slots.numpy().tolist() for slots, _ in buckets] == [
        [3], [4, 5], [6, 7], [0, 1, 2, 0, 0, 8, 9, 10, 11, 12]]  # fmt: skip
    # Each token's row among the buckets' positions, laid end to end (1 + 2 + 2 + 10 rows).
    assert unbucket.numpy().tolist() == [5, 6, 7, 0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    # Fewer sequences than buckets: the empty ones hold no positions.
    buckets, unbucket = packing.attention_buckets(tf.constant([2]))
    assert [tuple(mask.shape) for _, mask in buckets] == [(0, 0)] * 3 + [(1, 2)]
    assert unbucket.numpy().tolist() == [0, 1]


def test_attention_in_buckets_computes_the_same_numbers(attention_kernels):
    layer = attention_layer()
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 11, size=packing.BUCKETED_ATTENTION_BATCH + 3)
    mask = (np.arange(10)[None] < lengths[:, None]).astype("int32")
    mask[3] = [1, 0, 1, 1, 0, 1, 0, 0, 1, 0]  # real positions need not come first
    x = rng.normal(size=(*mask.shape, 12)).astype("float32")
    with packing.in_buckets():  # as an export's encoder traces its large batches
        bucketed = on_tokens(layer, x, mask).numpy()
    np.testing.assert_allclose(bucketed, on_tokens(layer, x, mask).numpy(), atol=1e-6)
    np.testing.assert_array_equal(bucketed[mask == 0], 0.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_swapping_heads_and_positions_is_a_transpose_and_its_own_gradient(dtype):
    x = tf.cast(tf.random.normal((2, 5, 3, 4), seed=3), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = attention.swap_heads_and_positions(x)
        weights = tf.reshape(tf.range(120, dtype="float32"), (2, 3, 5, 4))
        loss = tf.reduce_sum(tf.cast(y, "float32") * weights)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), np.transpose(x.numpy(), (0, 2, 1, 3)))
    expected = np.transpose(np.arange(120, dtype="float32").reshape(2, 3, 5, 4), (0, 2, 1, 3))
    np.testing.assert_array_equal(tf.cast(tape.gradient(loss, x), "float32"), expected)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_both_attention_kernel_sets_compute_the_same(policy, monkeypatch):
    # (float16 always runs on oneDNN's kernels: TensorFlow's BatchMatMulV3 has none for it.)
    keras.config.set_dtype_policy(policy)
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    x = np.random.default_rng(4).normal(size=(3, 9, 12)).astype("float32")
    mask = (np.arange(9)[None] < np.array([[9], [4], [1]])).astype("int32")
    results = []
    for limit in (10**9, -1):
        monkeypatch.setattr(attention, "SMALL_ATTENTION", limit)
        with tf.GradientTape() as tape:
            y = on_tokens(block, x, mask)
            loss = tf.reduce_sum(y * y)
        results.append([y] + tape.gradient(loss, block.trainable_weights))
    atol = 1e-5 if policy == "float32" else 0.05  # half precision sums in another order
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, atol=atol * max(1, np.abs(theirs).max()))
