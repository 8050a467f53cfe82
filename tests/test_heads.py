import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bert.model.heads import (
    ClassifierHead,
    FoldChoices,
    MaskedLMHead,
    MultipleChoiceHead,
    NextSentenceHead,
    SpanLabelerHead,
    TokenClassifierHead,
)


@pytest.mark.parametrize(
    "head",
    [
        NextSentenceHead(0.02, name="nsp"),
        ClassifierHead(3, 0.1, 0.02, name="classifier"),
        MultipleChoiceHead(4, 0.1, 0.02, name="choices"),
        SpanLabelerHead(0.02, name="span"),
        TokenClassifierHead(9, 0.1, 0.02, name="tokens"),
    ],
    ids=lambda head: head.name,
)
def test_config_round_trip(head):
    clone = head.__class__.from_config(head.get_config())
    assert clone.get_config() == head.get_config()


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
