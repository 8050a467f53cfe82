import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, random_inputs
from op_trace import ops_run

from keras_bert import BertConfig, BertEncoder


def test_outputs_follow_the_tf_hub_interface(tiny_encoder):
    outputs = tiny_encoder(random_inputs())
    assert set(outputs) == {"sequence_output", "pooled_output", "encoder_outputs",
                            "pooled_output_only"}  # fmt: skip
    assert outputs["sequence_output"].shape == (3, 7, 12)
    assert outputs["pooled_output"].shape == (3, 12)
    assert len(outputs["encoder_outputs"]) == 2
    np.testing.assert_array_equal(outputs["encoder_outputs"][-1], outputs["sequence_output"])
    assert {i.name for i in tiny_encoder.inputs} == {
        "input_word_ids",
        "input_mask",
        "input_type_ids",
    }
    assert all(i.dtype == "int32" for i in tiny_encoder.inputs)


def test_any_length_up_to_max_position_embeddings(tiny_encoder):
    for seq in (1, 5, 16):
        assert tiny_encoder(random_inputs(seq=seq))["sequence_output"].shape == (3, seq, 12)
    # One position more: a line naming the limit, not TensorFlow's "Incompatible shapes".
    with pytest.raises(ValueError, match="the inputs have 17 positions, more than this encoder's "
                                         "max_position_embeddings=16"):  # fmt: skip
        tiny_encoder(random_inputs(seq=17))


def test_padding_does_not_change_real_positions(tiny_encoder):
    short = random_inputs(batch=1, seq=5)
    padded = {k: np.pad(v, ((0, 0), (0, 4))) for k, v in short.items()}
    padded["input_word_ids"][0, 5:] = 42  # junk under the mask
    a = tiny_encoder(short)
    b = tiny_encoder(padded)
    np.testing.assert_allclose(b["sequence_output"][:, :5], a["sequence_output"], atol=1e-6)
    np.testing.assert_allclose(b["pooled_output"], a["pooled_output"], atol=1e-6)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_pooled_output_only_equals_pooled_output(policy):
    # The last block on the first tokens alone: the same numbers (up to the order of sums)
    # for rows of any length, a one-token row and an all-padding row among them.
    encoder = BertEncoder(**{**TINY, "max_position_embeddings": 64}, dtype=policy)
    for inputs in (random_inputs(batch=1, seq=5), random_inputs(lengths=[7, 4, 1]),
                   random_inputs(batch=4, seq=40, lengths=[40, 17, 3, 0])):  # fmt: skip
        outputs = {k: np.asarray(v, "float32") for k, v in encoder(inputs).items()
                   if k != "encoder_outputs"}  # fmt: skip
        assert outputs["pooled_output_only"].shape == outputs["pooled_output"].shape
        atol = 1e-6 if policy == "float32" else 2**-8  # bfloat16: one rounding step near 1
        np.testing.assert_allclose(outputs["pooled_output_only"], outputs["pooled_output"],
                                   atol=atol)  # fmt: skip


def test_a_function_reading_pooled_output_only_skips_the_full_last_block(tmp_path):
    # Which ops the function ran (not a timing). Both forms of the last block sit in the
    # encoder's graph; a tf.function runs only what its outputs need, unless a stateful op
    # (a cond reading a variable, say) keeps the other alive. Each full block packs its
    # attention output with one GatherNd (and the embeddings one more); the first-token form
    # has none.
    encoder = BertEncoder(**{**TINY, "max_position_embeddings": 64})
    inputs = random_inputs(batch=4, seq=40, lengths=[40, 17, 3, 1])
    x = {k: tf.constant(v) for k, v in inputs.items()}
    counts = {}
    for key in ("pooled_output", "pooled_output_only"):
        # Unknown shapes, as in an export: the LayerNorms' and attention's conds stay conds.
        spec = {k: tf.TensorSpec((None, None), tf.int32) for k in x}
        forward = tf.function(lambda x, key=key: encoder(x)[key], input_signature=[spec])
        forward(x).numpy()
        tf.profiler.experimental.start(str(tmp_path / key))
        forward(x).numpy()
        tf.profiler.experimental.stop()
        counts[key] = ops_run(tmp_path / key).count("GatherNd")
    blocks = TINY["num_hidden_layers"]
    assert counts == {"pooled_output": blocks + 1, "pooled_output_only": blocks}


@pytest.mark.parametrize(
    "config, count",
    [(BertConfig(), 109_482_240),
     (BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 intermediate_size=4096), 335_141_888)],
    ids=["base", "large"],
)  # fmt: skip
def test_parameter_counts_match_the_published_models(config, count):
    assert BertEncoder(**config.to_dict()).count_params() == count


def test_keras_file_round_trip(tiny_encoder, tmp_path):
    inputs = random_inputs(lengths=[7, 4, 2])
    path = str(tmp_path / "encoder.keras")
    tiny_encoder.save(path)
    reloaded = keras.saving.load_model(path)
    assert isinstance(reloaded, BertEncoder)
    assert reloaded.config == tiny_encoder.config
    a, b = tiny_encoder(inputs), reloaded(inputs)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(a[key], b[key])


def test_mixed_precision_encoder_reloads_mixed_whatever_the_global_policy(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    encoder = BertEncoder(**TINY)
    inputs = random_inputs()
    expected = encoder(inputs)["sequence_output"]
    encoder.save(tmp_path / "encoder.keras")
    keras.config.set_dtype_policy("float32")  # e.g. the exporter's process
    restored = keras.saving.load_model(tmp_path / "encoder.keras")
    assert restored.transformer_layers[0].dtype_policy.name == "mixed_bfloat16"
    np.testing.assert_array_equal(restored(inputs)["sequence_output"], expected)


def test_config_round_trip(tiny_encoder):
    clone = BertEncoder.from_config(tiny_encoder.get_config())
    assert clone.config == tiny_encoder.config == BertConfig(**TINY)
    # Keras's functional Model dropped unknown keyword arguments: a misspelt field built an
    # encoder of the default size (hidden 768) without a word.
    with pytest.raises(TypeError, match="unexpected argument.* hiden_size: it takes "
                                        "bert_config.json's fields"):  # fmt: skip
        BertEncoder(**{**TINY, "hiden_size": 24})
    config_json = {**TINY, "model_type": "bert", "pad_token_id": 0, "hidden_act": "gelu",
                   "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                   "type_vocab_size": 2, "initializer_range": 0.02}  # fmt: skip
    assert BertEncoder(**BertConfig.from_dict(config_json).to_dict()).config == BertConfig(
        **TINY)  # fmt: skip


def test_an_encoder_keeps_only_the_outputs_asked(tiny_encoder):
    kept = BertEncoder.from_config({**tiny_encoder.get_config(),
                                    "keep_outputs": ["pooled_output_only"]})  # fmt: skip
    kept.set_weights(tiny_encoder.get_weights())
    inputs = random_inputs(lengths=[7, 4, 2])
    outputs = kept(inputs)
    assert set(outputs) == {"pooled_output_only"}
    np.testing.assert_array_equal(outputs["pooled_output_only"],
                                  tiny_encoder(inputs)["pooled_output_only"])  # fmt: skip
    assert BertEncoder.from_config(kept.get_config()).keep_outputs == ("pooled_output_only",)
    assert "keep_outputs" not in tiny_encoder.get_config()  # a whole encoder's config as before
    for bad in (["pooler_output"], []):
        with pytest.raises(ValueError, match="keep_outputs must name some of"):
            BertEncoder(**TINY, keep_outputs=bad)


def test_dropout_only_in_training(tiny_encoder):
    inputs = random_inputs()
    a = tiny_encoder(inputs, training=False)["sequence_output"]
    b = tiny_encoder(inputs, training=False)["sequence_output"]
    c = tiny_encoder(inputs, training=True)["sequence_output"]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_is_close_to_float32(policy):
    float32 = BertEncoder(**TINY)
    inputs = random_inputs(lengths=[7, 5, 3])
    expected = float32(inputs)["sequence_output"].numpy()
    keras.config.set_dtype_policy(policy)
    mixed = BertEncoder(**TINY)
    mixed.set_weights(float32.get_weights())
    got = mixed(inputs)
    assert got["sequence_output"].dtype == tf.float32  # the final LayerNorm runs in float32
    assert mixed.get_layer("layer_0").intermediate.compute_dtype == policy.split("_")[1]
    np.testing.assert_allclose(got["sequence_output"].numpy(), expected, atol=0.1)


def test_trains_with_fit():
    encoder = BertEncoder(**TINY)
    model_inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in
                    ("input_word_ids", "input_mask", "input_type_ids")}  # fmt: skip
    logits = keras.layers.Dense(2)(encoder(model_inputs)["pooled_output"])
    model = keras.Model(model_inputs, logits)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    x = random_inputs(batch=16, seed=4)
    y = (x["input_word_ids"][:, 1] % 2).astype("int32")
    before = model.evaluate(x, y, verbose=0)
    # 30 passes as one epoch of 30 batches: Keras's cost of an epoch was most of the time.
    model.fit({k: np.tile(v, (30, 1)) for k, v in x.items()}, np.tile(y, 30), batch_size=16,
              verbose=0)  # fmt: skip
    assert model.evaluate(x, y, verbose=0) < 0.5 * before


def _run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)  # fmt: skip


def test_import_refuses_another_backend_env_variable():
    result = _run_python("import keras_bert", KERAS_BACKEND="jax")
    assert result.returncode != 0
    assert "KERAS_BACKEND='jax'" in result.stderr


def test_import_refuses_keras_loaded_with_another_backend():
    # A stand-in for Keras already loaded with JAX (the real one would need jax installed).
    result = _run_python("import sys, types\n"
                         "sys.modules['keras'] = types.SimpleNamespace(\n"
                         "    config=types.SimpleNamespace(backend=lambda: 'jax'))\n"
                         "import keras_bert")  # fmt: skip
    assert result.returncode != 0
    assert "already imported with the 'jax' backend" in result.stderr, result.stderr[-2000:]


ONEDNN_ON = ("import keras\n"
             "from tensorflow.python.util import _pywrap_util_port\n"
             "print(keras.config.backend(), _pywrap_util_port.IsMklEnabled())")  # fmt: skip


@pytest.mark.parametrize("setting, first, expected", [
    (None, "import keras_bert", "True"),  # turned on, on every x86 CPU
    ("0", "import keras_bert", "False"),  # the user's setting is kept
    ("0", "import tasks", "False"),
    (None, "import tasks", "True"),  # the binaries' package, which loads TensorFlow itself
])  # fmt: skip
def test_import_selects_tensorflow_and_turns_onednn_on_unless_told(setting, first, expected):
    # No KERAS_BACKEND either: the import selects the TensorFlow backend itself.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_ENABLE_ONEDNN_OPTS", "KERAS_BACKEND")}  # fmt: skip
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    result = subprocess.run([sys.executable, "-c", f"{first}\n{ONEDNN_ON}"], cwd=ROOT,
                            capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert result.stdout.strip() == f"tensorflow {expected}", result.stderr[-2000:]


def test_import_after_tensorflow_leaves_its_setting_alone():
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    code = ("import os, tensorflow\nimport keras_bert\n"
            "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.stdout.strip() == "None", result.stderr[-2000:]
