import collections
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bert import BertEncoder, layers, packing
from keras_bert.heads import (
    ClassifierHead,
    FoldChoices,
    MaskedLMHead,
    MultipleChoiceHead,
    NextSentenceHead,
    SpanLabelerHead,
    TokenClassifierHead,
)

from conftest import random_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(params=["tensorflow", "onednn"])
def attention_kernels(request, monkeypatch):
    """Runs a test on each of attention's kernel sets: TensorFlow's own (the small inputs of
    these tests get them) and oneDNN's (what larger batches get)."""
    monkeypatch.setattr(layers, "SMALL_ATTENTION", 10**9 if request.param == "tensorflow" else -1)
    return request.param


def attention_layer(**kwargs):
    layer = layers.BertSelfAttention(12, 3, 0.0, 0.02, **kwargs)
    layer.build((None, 12))
    return layer


def on_tokens(layer, x, mask):
    """A block or attention layer called as the encoder calls it: on x's real tokens, packed;
    returns (batch, seq, hidden) with zeros at the padded positions."""
    layout = packing.TokenLayout()(tf.constant(mask))
    return packing.unpack(layer(packing.pack(tf.constant(x), layout), layout), layout)


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
    monkeypatch.setattr(layers, "spread_for_attention",
                        lambda tokens, layout: tf.gather(tokens, layout["slots"]))  # fmt: skip
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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_swapping_heads_and_positions_is_a_transpose_and_its_own_gradient(dtype):
    x = tf.cast(tf.random.normal((2, 5, 3, 4), seed=3), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layers.swap_heads_and_positions(x)
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
        monkeypatch.setattr(layers, "SMALL_ATTENTION", limit)
        with tf.GradientTape() as tape:
            y = on_tokens(block, x, mask)
            loss = tf.reduce_sum(y * y)
        results.append([y] + tape.gradient(loss, block.trainable_weights))
    atol = 1e-5 if policy == "float32" else 0.05  # half precision sums in another order
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, atol=atol * max(1, np.abs(theirs).max()))


# Which ops the optimised graph of a 3-block encoder ran, as JSON (null: TensorFlow has no oneDNN).
_FUSED_OPS = """
import json, sys
import numpy as np, tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
from benchmarks.profiling import op_times
from keras_bert import BertEncoder, layers
if not _pywrap_util_port.IsMklEnabled():
    print(json.dumps(None))
    sys.exit()
layers.FUSED_LAYER_NORM = 0  # every LayerNorm in its fused form, as BERT-base batches take it
encoder = BertEncoder(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64)
shape = (4, 64)  # 4 x 64 x 64 scores a head: above SMALL_ATTENTION, on oneDNN's kernels
x = {"input_word_ids": tf.ones(shape, tf.int32), "input_type_ids": tf.zeros(shape, tf.int32),
     "input_mask": tf.constant(np.arange(64)[None] < np.array([[64], [40], [9], [1]]), tf.int32)}
forward = tf.function(lambda x: encoder(x)["sequence_output"])
forward(x).numpy()
tf.profiler.experimental.start(sys.argv[1])
forward(x).numpy()
tf.profiler.experimental.stop()
print(json.dumps([op for _, op in op_times(sys.argv[1], 1)]))
"""


def test_every_layers_attention_and_layer_norms_fuse_into_onednn_ops(tmp_path):
    # Not a timing: which ops the optimised graph ran. The attention fusion hangs on the names
    # Grappler sorts the ops' inputs by (layers.BertSelfAttention); without them 2 of 3 layers
    # fused. The LayerNorm fusion (layers.BertLayerNorm) hangs on the shape of the graph around
    # it: with attention's packing gathers alone replaced by reshapes (a form benchmarks/
    # headroom.py leaves out for this reason) every block's LayerNorms ran as FusedBatchNormV3,
    # Mul and AddV2 instead, 4 times as long.
    # In a process with oneDNN asked for: TensorFlow turns it on by itself only on CPUs with
    # AVX512 VNNI, BF16 or AMX, and the fusion is oneDNN's.
    done = subprocess.run([sys.executable, "-c", _FUSED_OPS, str(tmp_path)], cwd=ROOT, text=True,
                          capture_output=True, env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1",
                                                    "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ops = json.loads(done.stdout.strip().splitlines()[-1])
    if ops is None:
        pytest.skip("this TensorFlow is built without oneDNN (not an x86 Linux or Windows "
                    "build): the fusion is oneDNN's")
    assert ops.count("_MklFusedBatchMatMulV2") == 3, sorted(set(ops))
    # Two a block; the embeddings' LayerNorm, on a batch whose shape is known while tracing,
    # is left to FusedBatchNormV3.
    assert ops.count("_MklLayerNorm") == 6, sorted(set(ops))


@pytest.mark.parametrize("fused", [False, True])
def test_layer_norm_matches_keras_in_values_and_gradients(fused, monkeypatch):
    # Both of BertLayerNorm's forms (plain ops for small inputs, one fused op for large), in a
    # tf.function, where oneDNN's graph rewrite fuses the large form into one LayerNorm op.
    monkeypatch.setattr(layers, "FUSED_LAYER_NORM", -1 if fused else 2**30)
    rng = np.random.default_rng(9)
    ours, keras_own = layers.layer_norm("ours"), keras.layers.LayerNormalization(epsilon=1e-12)
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
    inference = tf.function(lambda x: ours(x))(x)  # no gradient: the fused op
    np.testing.assert_allclose(inference, expected[0], rtol=1e-5, atol=1e-5)


def test_a_training_step_traces_no_kernel_choice():
    # Inference picks LayerNorm's form and attention's kernels by the input's size, in a cond,
    # since the size is known only when the graph runs. A training step takes the large-input
    # kernels outright: a cond there would trace both branches and both their gradients.
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    on_tokens(block, np.zeros((1, 3, 12), "float32"), np.ones((1, 3), "int32"))  # builds it
    spec = [tf.TensorSpec([None, None, 12], tf.float32), tf.TensorSpec([None, None], tf.int32)]

    def op_types(training):
        @tf.function(input_signature=spec)
        def step(x, mask):
            layout = packing.TokenLayout()(mask)
            with tf.GradientTape() as tape:
                y = block(packing.pack(x, layout), layout, training=training)
                loss = tf.reduce_sum(y * y)
            return tape.gradient(loss, block.trainable_weights)

        return [op.type for op in step.get_concrete_function().graph.get_operations()]

    conds = {"If", "StatelessIf"}
    # Not training: the two LayerNorms' conds and attention's two, and their four gradients.
    assert sum(op in conds for op in op_types(False)) == 8
    assert not conds & set(op_types(True))
    # The fused LayerNorm (and its gradient) and the softmax oneDNN replaces.
    assert {"FusedBatchNormV3", "FusedBatchNormGradV3", "Softmax"} <= set(op_types(True))


def test_gelu_forms_differ_and_match_their_formulas():
    x = np.linspace(-4, 4, 81).astype("float32")
    exact = layers.activation("gelu")(x).numpy()
    tanh = layers.activation("gelu_new")(x).numpy()
    from math import erf, pi, sqrt, tanh as th

    np.testing.assert_allclose(exact, [v * 0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=1e-6)
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
        y = layers.training_gelu(x)
    gradient = tape.gradient(y, x, upstream)
    assert y.dtype == gradient.dtype == dtype
    # Within one rounding of the result: computed in float32 whatever the dtype.
    want_y = x64 * cdf
    want_gradient = tf.cast(upstream, "float64").numpy() * (cdf + x64 * pdf)
    np.testing.assert_allclose(tf.cast(y, "float64"), want_y, rtol=tolerance, atol=1e-7)
    np.testing.assert_allclose(tf.cast(gradient, "float64"), want_gradient, rtol=tolerance,
                               atol=1e-7)  # fmt: skip


def test_gelu_dense_trains_with_training_gelu_and_infers_with_keras_gelu():
    rng = np.random.default_rng(4)
    ours, keras_own = layers.GeluDense(16, name="ours"), keras.layers.Dense(
        16, activation=layers.activation("gelu"))
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
    rebuilt = layers.GeluDense.from_config(ours.get_config())
    assert rebuilt.units == 16 and rebuilt.activation is not None
    no_bias = layers.GeluDense(16, use_bias=False)
    no_bias.build((None, 8))
    no_bias.set_weights(weights[:1])
    np.testing.assert_allclose(no_bias(x, training=True), no_bias(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_drops_its_rate_and_scales_what_it_keeps(dtype, rate):
    dropout = layers.BertDropout(rate, seed=3, dtype=dtype)
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
    same_seed = layers.BertDropout(rate, seed=3, dtype=dtype)(x, training=True)
    same_seed = same_seed.numpy().astype("float64")
    np.testing.assert_array_equal(same_seed, y)
    assert dropout(x) is x and dropout(x, training=False) is x


def test_block_is_post_layer_norm():
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    x = np.random.default_rng(2).normal(3.0, 5.0, size=(2, 7, 12)).astype("float32")
    y = on_tokens(block, x, np.ones((2, 7), "int32")).numpy()
    # The last operation is a LayerNorm with gamma=1, beta=0: each vector is standardised.
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.std(-1), 1.0, atol=1e-3)


def test_embeddings_sum_three_tables():
    emb = layers.BertEmbeddings(99, 12, 16, 2, 0.0, 0.02)
    ids = np.array([[5, 6, 7]], "int32")
    types = np.array([[0, 1, 1]], "int32")
    y = emb(ids, types).numpy()
    raw = (emb.word_embeddings.embeddings.numpy()[ids[0]]
           + emb.token_type_embeddings.embeddings.numpy()[types[0]]
           + emb.position_embeddings.numpy()[:3])  # fmt: skip
    normed = (raw - raw.mean(-1, keepdims=True)) / np.sqrt(raw.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(y[0], normed, atol=1e-5)


@pytest.mark.parametrize(
    "layer",
    [
        layers.BertEmbeddings(99, 12, 16, 2, 0.1, 0.02, name="embeddings"),
        layers.BertSelfAttention(12, 3, 0.1, 0.02, name="attention"),
        layers.BertTransformerBlock(12, 3, 37, "gelu_new", 0.1, 0.1, 0.02, name="block"),
        layers.BertPooler(12, 0.02, name="pooler"),
        NextSentenceHead(0.02, name="nsp"),
        ClassifierHead(3, 0.1, 0.02, name="classifier"),
        MultipleChoiceHead(4, 0.1, 0.02, name="choices"),
        SpanLabelerHead(0.02, name="span"),
        TokenClassifierHead(9, 0.1, 0.02, name="tokens"),
    ],
    ids=lambda layer: layer.name,
)
def test_config_round_trip(layer):
    clone = layer.__class__.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_masked_lm_head_ties_the_embedding_and_scores_only_masked_positions():
    embedding = keras.layers.Embedding(99, 12)
    embedding.build()
    head = MaskedLMHead(embedding, "gelu", 0.02)
    sequence = np.random.default_rng(3).normal(size=(2, 7, 12)).astype("float32")
    positions = np.array([[1, 4], [0, 6]], "int32")
    logits = head(sequence, positions)
    assert logits.shape == (2, 2, 99)
    assert head.word_embeddings.embeddings is embedding.embeddings
    # dense kernel+bias, LayerNorm gamma+beta, output bias, and the shared table itself
    assert len(head.trainable_weights) == 6
    assert any(w is embedding.embeddings for w in head.trainable_weights)
    # Changing an unmasked position changes nothing; changing a masked one does.
    other = sequence.copy()
    other[0, 2] += 1.0
    np.testing.assert_array_equal(head(other, positions).numpy(), logits.numpy())
    other[0, 4] += 1.0
    assert not np.allclose(head(other, positions).numpy()[0, 1], logits.numpy()[0, 1])


def test_mixed_precision_keeps_layer_norm_and_softmax_in_float32(attention_kernels):
    keras.config.set_dtype_policy("mixed_bfloat16")
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    x = tf.random.normal((2, 7, 12))
    y = on_tokens(block, x, tf.ones((2, 7), tf.int32))
    assert block.attention_layer_norm.compute_dtype == "float32"
    assert block.output_layer_norm.compute_dtype == "float32"
    assert block.intermediate.compute_dtype == "bfloat16"
    assert block.intermediate.kernel.dtype == "float32"  # variables stay float32
    assert y.dtype == tf.float32
    # The softmax sees float32 scores: its result for a padded key is exactly 0, and the
    # attention output is still bfloat16 (the compute dtype) after the output projection.
    mask = tf.constant([[1, 1, 1, 0, 0, 0, 0]] * 2)
    out = on_tokens(block.attention, x, mask)
    assert out.dtype == tf.bfloat16
    # Padded keys get a weight of exactly 0: whatever the padded positions hold (here values a
    # thousand times larger), the real positions' outputs do not change by a single bit.
    noise = tf.random.normal((2, 4, 12), seed=5) * 1000.0
    loud = tf.concat([x[:, :3], noise], axis=1)
    np.testing.assert_array_equal(on_tokens(block.attention, loud, mask)[:, :3].numpy(),
                                  out[:, :3].numpy())  # fmt: skip
    assert not np.array_equal(on_tokens(block.attention, loud, tf.ones_like(mask))[:, :3].numpy(),
                              out[:, :3].numpy())  # fmt: skip


def test_mixed_precision_keeps_the_residual_stream_in_float32():
    # x exactly representable in bfloat16 (|x| in [0.5, 4)), plus a step below half its
    # bfloat16 ulp: a block that rounded its input to bfloat16 would not see the step at all.
    keras.config.set_dtype_policy("mixed_bfloat16")
    block = layers.BertTransformerBlock(12, 3, 37, "gelu", 0.0, 0.0, 0.02)
    rng = np.random.default_rng(8)
    magnitudes = tf.cast(tf.constant(rng.uniform(0.5, 4.0, (2, 7, 12)), tf.bfloat16), tf.float32)
    x = magnitudes * rng.choice([-1.0, 1.0], (2, 7, 12)).astype("float32")
    # The step on the first feature only: LayerNorm would cancel one added to every feature.
    step = np.zeros((12,), "float32")
    step[0] = 2.0**-10
    assert np.array_equal(tf.cast(tf.cast(x + step, tf.bfloat16), tf.float32), x)
    mask = np.ones((2, 7), "int32")
    a, b = on_tokens(block, x, mask).numpy(), on_tokens(block, x + step, mask).numpy()
    assert a.dtype == np.float32 and not np.array_equal(a, b)
    np.testing.assert_allclose(a, b, atol=0.05)  # the step, through two LayerNorms


def test_random_inputs_helper_masks_padding():
    inputs = random_inputs(lengths=[7, 3, 1])
    assert inputs["input_mask"].sum(1).tolist() == [7, 3, 1]


def test_multiple_choice_scores_each_choice_on_its_own():
    head = MultipleChoiceHead(4, 0.0, 0.02)
    pooled = np.random.default_rng(4).normal(size=(2 * 4, 12)).astype("float32")
    scores = head(pooled).numpy()
    assert scores.shape == (2, 4)
    expected = pooled @ head.scorer.dense.kernel.numpy() + head.scorer.dense.bias.numpy()
    np.testing.assert_allclose(scores, expected.reshape(2, 4), atol=1e-6)
    folded = FoldChoices()(np.arange(2 * 4 * 5).reshape(2, 4, 5))
    assert folded.shape == (8, 5) and folded.numpy()[5].tolist() == list(range(25, 30))


def test_classifier_regression_output_is_one_float32_score():
    keras.config.set_dtype_policy("mixed_bfloat16")
    head = ClassifierHead(1)
    score = head(tf.random.normal((3, 12)))
    assert score.shape == (3, 1) and score.dtype == tf.float32


def test_span_and_token_heads_score_every_position():
    sequence = np.random.default_rng(5).normal(size=(2, 7, 12)).astype("float32")
    span = SpanLabelerHead()
    logits = span(sequence)
    assert logits["start_logits"].shape == logits["end_logits"].shape == (2, 7)
    expected = sequence @ span.dense.kernel.numpy() + span.dense.bias.numpy()
    np.testing.assert_allclose(logits["end_logits"], expected[..., 1], atol=1e-6)
    assert TokenClassifierHead(9)(sequence).shape == (2, 7, 9)


@pytest.mark.parametrize("parts", [3, 4])
def test_blocks_split_in_column_parts_compute_the_same_numbers(attention_kernels, parts):
    # 12 heads of 2, intermediate 24: 3 or 4 parts of each product, heads in 3 or 4 groups.
    encoder = BertEncoder(vocab_size=99, hidden_size=24, num_hidden_layers=2,
                          num_attention_heads=12, intermediate_size=48, max_position_embeddings=64)  # fmt: skip
    x = random_inputs(lengths=[7, 3, 5])
    names = ("sequence_output", "pooled_output", "pooled_output_only")
    whole = {n: encoder(x)[n].numpy() for n in names}
    encoder.split_columns(parts)
    block = encoder.transformer_layers[0]
    kernels = block._column_parts["intermediate"].kernels
    assert [k.shape for k in kernels] == [(24, 48 // parts)] * parts
    # Each group of heads: its query, key and value columns side by side, one product.
    fused = block.attention._column_parts["query_key_value"].kernels
    assert [k.shape for k in fused] == [(24, 3 * 24 // parts)] * parts
    width = 24 // parts
    np.testing.assert_array_equal(fused[1], np.concatenate(
        [d.kernel.numpy()[:, width : 2 * width]
         for d in (block.attention.query, block.attention.key, block.attention.value)], axis=1))
    # Each sublayer's second product takes the first's column blocks, each with its own rows
    # of the weights: the parts join once a sublayer, in a sum.
    rows = {"feed-forward": block._column_parts["output_dense"].kernels,
            "attention": block.attention._column_parts["output_dense"].kernels}  # fmt: skip
    assert [k.shape for k in rows["feed-forward"]] == [(48 // parts, 24)] * parts
    assert [k.shape for k in rows["attention"]] == [(24 // parts, 24)] * parts
    split = {n: encoder(x)[n].numpy() for n in names}
    for n in names:
        np.testing.assert_allclose(split[n], whole[n], atol=1e-6, err_msg=n)
    # The parts are copies: training would change the weights and serve the copies stale.
    with pytest.raises(ValueError, match="column parts, frozen copies"):
        encoder(x, training=True)
    encoder.split_columns(1)
    assert block._column_parts is None and block.attention._column_parts is None
    encoder(x, training=True)


def test_a_pooled_only_encoder_splits_its_last_block_for_the_first_tokens():
    # Only pooled_output_only kept (a classifier's export): the last block computes the first
    # tokens' queries alone, so its query product stays apart from key and value's.
    config = dict(vocab_size=99, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=64)  # fmt: skip
    encoder = BertEncoder(**config, keep_outputs=["pooled_output_only"])
    x = random_inputs(lengths=[7, 3, 5])
    whole = encoder(x)["pooled_output_only"].numpy()
    encoder.split_columns(2)
    first, last = (block.attention._column_parts for block in encoder.transformer_layers)
    assert "query_key_value" in first and "query" not in first
    assert [k.shape for k in last["query"].kernels] == [(24, 12)] * 2
    assert [k.shape for k in last["key_value"].kernels] == [(24, 24)] * 2
    np.testing.assert_allclose(encoder(x)["pooled_output_only"].numpy(), whole, atol=1e-6)
    # The graph: two products a part in the last block's attention, one in the first's.
    graph = tf.function(lambda x: encoder(x)).get_concrete_function(x).graph
    products = collections.Counter(re.search(r"layer_(\d)", op.name)[1]
                                   for op in graph.get_operations()
                                   if op.type == "MatMul" and "attention" in op.name)  # fmt: skip
    assert products == {"0": 2 + 2, "1": 2 * 2 + 2}  # and each part's output product


def test_16_bit_blocks_join_column_blocks_not_sums():
    # A partial product rounded to bfloat16's 8 bits, then summed, would round twice: in 16
    # bits every product keeps whole columns, and each column is the unsplit one's, bit for bit.
    encoder = BertEncoder(vocab_size=99, hidden_size=24, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=48,
                          max_position_embeddings=64, dtype="bfloat16")  # fmt: skip
    x = random_inputs(lengths=[7, 3, 5])
    whole = encoder(x)["sequence_output"].numpy()
    encoder.split_columns(2)
    block = encoder.transformer_layers[0]
    assert [k.shape for k in block._column_parts["output_dense"].kernels] == [(48, 12)] * 2
    output_kernels = block.attention._column_parts["output_dense"].kernels
    assert [k.shape for k in output_kernels] == [(24, 12)] * 2
    np.testing.assert_array_equal(encoder(x)["sequence_output"].numpy(), whole)


@pytest.mark.parametrize("count, message", [(0, "at least 1"), (True, "whole number"),
                                            (5, "12 attention heads"), (4, "42 intermediate units")])  # fmt: skip
def test_column_parts_must_share_heads_and_units_equally(count, message):
    encoder = BertEncoder(vocab_size=99, hidden_size=24, num_hidden_layers=1,
                          num_attention_heads=12, intermediate_size=42, max_position_embeddings=64)  # fmt: skip
    with pytest.raises(ValueError, match=message):
        encoder.split_columns(count)
    block = encoder.transformer_layers[0]  # left whole
    assert getattr(block, "_column_parts", None) is None
    assert getattr(block.attention, "_column_parts", None) is None
