"""Numeric parity with the reference implementation on real weights (MiniLM-L6-H384).

The golden values come from tests/golden/make_golden.py (Hugging Face transformers, PyTorch).
"""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA

from keras_bert import load_checkpoint
from keras_bert.text.packer import BertPacker
from keras_bert.text.tokenizer import BertTokenizer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
from inputs import PAIR, SENTENCES  # noqa: E402  (the golden script's inputs)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(os.path.join(DATA, "minilm_golden.npz")))


@pytest.fixture(scope="module")
def encoder(minilm_dir):
    return load_checkpoint(minilm_dir).encoder


def test_tokenizer_and_packer_build_the_reference_batch(minilm_dir, golden):
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=512)
    singles = packer(tokenizer(tf.constant(SENTENCES)))
    pair = packer(tokenizer(tf.constant(PAIR[:1])), tokenizer(tf.constant(PAIR[1:])))
    width = golden["input_word_ids"].shape[1]
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        got = np.zeros_like(golden[key])
        got[: len(SENTENCES), :] = singles[key].numpy()
        got[-1, : pair[key].shape[1]] = pair[key].numpy()[0]
        assert singles[key].shape[1] == width  # dynamic padding: the longest sentence
        np.testing.assert_array_equal(got, golden[key], err_msg=key)


def test_outputs_match_the_reference_within_1e_4(encoder, golden):
    inputs = {k: golden[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    outputs = encoder(inputs)
    sequence_error = np.abs(outputs["sequence_output"].numpy() - golden["sequence_output"])
    pooled_error = np.abs(outputs["pooled_output"].numpy() - golden["pooled_output"])
    real = golden["input_mask"].astype(bool)
    assert sequence_error[real].max() < 1e-4
    # Padded positions are not computed (the blocks see real tokens only): exactly 0, where
    # the reference has values that nothing should read.
    np.testing.assert_array_equal(outputs["sequence_output"].numpy()[~real], 0.0)
    assert pooled_error.max() < 1e-4
    # The same numbers from the last block computed on the first tokens alone.
    alone_error = np.abs(outputs["pooled_output_only"].numpy() - golden["pooled_output"])
    assert alone_error.max() < 1e-4


def test_bfloat16_stays_close_to_the_reference(minilm_dir, golden):
    import keras

    keras.config.set_dtype_policy("mixed_bfloat16")
    encoder = load_checkpoint(minilm_dir).encoder
    inputs = {k: golden[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    pooled = encoder(inputs)["pooled_output"].numpy().astype("float32")
    cosine = (pooled * golden["pooled_output"]).sum(-1) / (
        np.linalg.norm(pooled, axis=-1) * np.linalg.norm(golden["pooled_output"], axis=-1))  # fmt: skip
    assert cosine.min() > 0.99


def test_fine_tuning_follows_the_reference_step_by_step(minilm_dir):
    """16 steps of the library's recipe (`compile(learning_rate=1e-4)`) on 64 SST-2 sentences
    with dropout off, against PyTorch's run of the same recipe from the same head
    (tests/golden/make_training_golden.py): every step's loss and the dev logits after. This
    holds the whole training path to the reference: the tokenizer, the gradients, the clipping,
    the schedule and AdamW (epsilon after the bias correction; decay skips LayerNorm and bias)."""
    import keras

    import keras_bert
    from tasks import glue

    def sst2(split):
        path = os.path.join(DATA, "glue", "SST-2", f"{split}.tsv")
        data = glue.read_tsv(path, glue.get_task("SST-2"), True)
        return data.texts["sentence"], np.asarray(data.labels, "int64")

    golden = np.load(os.path.join(DATA, "minilm_training_golden.npz"))
    (texts, labels), (dev_texts, _) = sst2("train"), sst2("dev")
    model = keras_bert.BertClassifier.from_checkpoint(minilm_dir, num_classes=2,
                                                      sequence_length=128)  # fmt: skip
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    model.head.dense.set_weights([golden["head_kernel"], np.zeros(2, "float32")])
    np.testing.assert_allclose(model.predict(dev_texts, verbose=0), golden["dev_logits_before"],
                               atol=2e-5)  # fmt: skip
    means = []  # Keras logs the running mean of the loss after each step
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: means.append(
        logs["loss"]))  # fmt: skip
    model.compile(learning_rate=1e-4)
    model.fit(texts, labels, batch_size=4, epochs=1, shuffle=False,
              verbose=0, callbacks=[record])  # fmt: skip
    steps = np.arange(1, len(means) + 1)
    losses = np.diff(np.concatenate([[0.0], steps * np.asarray(means, "float64")]))
    # Measured: within 8e-7 of the reference's losses and 3e-7 of its logits; with epsilon
    # added before the bias correction (Keras's Adam), losses 9e-3 apart.
    np.testing.assert_allclose(losses, golden["losses"], atol=1e-5)
    np.testing.assert_allclose(model.predict(dev_texts, verbose=0), golden["dev_logits_after"],
                               atol=1e-5)  # fmt: skip


def test_a_training_step_with_the_references_dropout_masks_is_the_references(minilm_dir,
                                                                              monkeypatch):
    """Dropout on: each of our dropout layers given the mask the reference drew at the same
    place (tests/golden/make_dropout_golden.py), one training step's logits, loss and
    gradients from the embeddings to the head equal the reference's. This holds where each
    dropout sits (after the embeddings' LayerNorm, on the attention probabilities, on each
    sublayer's output before its residual sum, on the pooled output) and how it scales what
    it keeps, which dropout-off parity cannot show."""
    import keras
    import tensorflow as tf

    import keras_bert

    golden = np.load(os.path.join(DATA, "minilm_dropout_golden.npz"))
    model = keras_bert.BertClassifier.from_checkpoint(minilm_dir, num_classes=2,
                                                      sequence_length=128)  # fmt: skip
    model.head.dense.set_weights([golden["head_kernel"], np.zeros(2, "float32")])
    real = golden["input_mask"].astype(bool)  # (batch, seq): the reference's padding

    def mask(name):
        shape = tuple(golden[f"shape/{name}"])
        return np.unpackbits(golden[f"mask/{name}"], count=int(np.prod(shape))).reshape(shape)

    def given(kept, packed=False):
        """keep_mask for a layer: the reference's mask laid out as our layer's input is, its
        tokens packed (those of the real positions alone) or the first token's alone."""
        def keep_mask(inputs):
            if len(inputs.shape) == 2 and packed:  # (tokens, hidden), or (batch, hidden)
                laid_out = kept[:, 0] if inputs.shape[0] == len(real) else kept[real]
            elif len(inputs.shape) == 4:  # (batch, heads, queries, keys): queries 1 or all
                laid_out = kept[:, :, : inputs.shape[2]]
            else:
                laid_out = kept
            assert laid_out.shape == tuple(inputs.shape)
            return tf.constant(laid_out.astype(bool))
        return keep_mask

    bert = "bert.encoder.layer.{}.{}.dropout"
    encoder = model.encoder
    monkeypatch.setattr(encoder.get_layer("embeddings").dropout, "keep_mask",
                        given(mask("bert.embeddings.dropout")))  # fmt: skip
    for i in range(encoder.config.num_hidden_layers):
        block = encoder.get_layer(f"layer_{i}")
        for layer, name, packed in [(block.attention.dropout, "attention.self", False),
                                    (block.attention_dropout, "attention.output", True),
                                    (block.output_dropout, "output", True)]:  # fmt: skip
            monkeypatch.setattr(layer, "keep_mask", given(mask(bert.format(i, name)), packed))
    head_kept = tf.constant(mask("dropout").astype(bool))  # Keras's Dropout, 1 / (1 - rate)
    monkeypatch.setattr(model.head.dropout, "call", lambda x, training=False: tf.where(
        head_kept, x / (1 - model.head.dropout.rate), 0.0))  # fmt: skip
    inputs = model.preprocessor([str(t) for t in golden["texts"]])
    assert inputs["input_mask"].numpy().tolist() == golden["input_mask"].tolist()
    weights = {"head": model.head.dense.kernel,
               "pooler": encoder.get_layer("pooler").dense.kernel,
               "layer_5_output": encoder.get_layer("layer_5").output_dense.kernel,
               "layer_0_query": encoder.get_layer("layer_0").attention.query.kernel,
               "embeddings_layer_norm": encoder.get_layer("embeddings").layer_norm.gamma}
    with tf.GradientTape() as tape:
        logits = model(inputs, training=True)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(golden["labels"],
                                                                            logits)  # fmt: skip
    gradients = dict(zip(weights, tape.gradient(loss, list(weights.values()))))
    # Measured: logits within 4e-7, the loss within 1e-7, gradients within 1e-5 to 5e-5 of
    # each one's largest (BertDropout keeps 1 - 6554 / 65536 and scales by its inverse, 7e-6
    # above the reference's 1 / 0.9). With one block's output dropout drawing its own mask:
    # gradients 9% to 34% apart.
    np.testing.assert_allclose(logits, golden["logits"], atol=1e-5)
    np.testing.assert_allclose(float(loss), golden["loss"], atol=1e-5)
    for name, gradient in gradients.items():
        expected = golden[f"gradient/{name}"]
        got = np.atleast_2d(np.asarray(gradient))[: expected.shape[0], : expected.shape[1]]
        assert np.abs(got - expected).max() <= 2e-4 * np.abs(expected).max(), name
