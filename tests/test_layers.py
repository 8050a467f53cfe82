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
from conftest import ROOT, on_tokens, random_inputs

from keras_bert import BertEncoder
from keras_bert.model import attention, layers, packing

# Which ops the optimised graph of a 3-block encoder ran, as JSON (null: TensorFlow has no oneDNN).
_FUSED_OPS = """
import json, sys
import numpy as np, tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
from keras_bert import BertEncoder
sys.path.insert(0, "tests")
from op_trace import ops_run
if not _pywrap_util_port.IsMklEnabled():
    print(json.dumps(None))
    sys.exit()
encoder = BertEncoder(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64)
shape = (4, 64)
x = {"input_word_ids": tf.ones(shape, tf.int32), "input_type_ids": tf.zeros(shape, tf.int32),
     "input_mask": tf.constant(np.arange(64)[None] < np.array([[64], [40], [9], [1]]), tf.int32)}
forward = tf.function(lambda x: encoder(x)["sequence_output"])
forward(x).numpy()
tf.profiler.experimental.start(sys.argv[1])
forward(x).numpy()
tf.profiler.experimental.stop()
print(json.dumps(ops_run(sys.argv[1])))
"""


def test_every_layers_layer_norms_fuse_into_onednn_ops(tmp_path):
    # Not a timing: which ops the optimised graph ran. The LayerNorm fusion
    # (primitives.BertLayerNorm) hangs on the shape of the graph around it: with attention's
    # packing gathers alone replaced by reshapes every block's LayerNorms ran as
    # FusedBatchNormV3, Mul and AddV2 instead, 4 times as long.
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
    # Two a block; the embeddings' LayerNorm, on a batch whose shape is known while tracing,
    # is left to FusedBatchNormV3.
    assert ops.count("_MklLayerNorm") == 6, sorted(set(ops))


def test_a_block_traces_no_kernel_choice():
    # One form of each op whatever the input's size: no cond, whose branches a training step
    # would trace twice, with both their gradients.
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
    assert not conds & set(op_types(False)) and not conds & set(op_types(True))
    # The fused LayerNorm (and its gradient) and the softmax oneDNN replaces.
    assert {"FusedBatchNormV3", "FusedBatchNormGradV3", "Softmax"} <= set(op_types(True))


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
        attention.BertSelfAttention(12, 3, 0.1, 0.02, name="attention"),
        layers.BertTransformerBlock(12, 3, 37, "gelu_new", 0.1, 0.1, 0.02, name="block"),
        layers.BertPooler(12, 0.02, name="pooler"),
    ],
    ids=lambda layer: layer.name,
)
def test_config_round_trip(layer):
    clone = layer.__class__.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_mixed_precision_keeps_layer_norm_and_softmax_in_float32():
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


@pytest.mark.parametrize("parts", [3, 4])
def test_blocks_split_in_column_parts_compute_the_same_numbers(parts):
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
    # And its heads apart in one transpose for what one product computed (the first block's
    # query, key and value; the last's key and value, and its query), one for the context.
    swaps = collections.Counter(re.search(r"layer_(\d)", op.name)[1]
                                for op in graph.get_operations()
                                if op.type == "Transpose" and "attention" in op.name)  # fmt: skip
    assert swaps == {"0": 2 * (1 + 1), "1": 2 * (2 + 1)}


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
