"""BertQuestionAnswerer as a Keras user meets it: (question, passage) strings in, answer spans
and their text out, windows of long passages cut in the graph."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_bert
from keras_bert.model.encoder import INPUT_NAMES

PASSAGE = "The Normans gave their name to Normandy, a region in France, in the 10th century."
QUESTIONS = ["Who gave their name to Normandy?", "Where is Normandy?", "When?"]
ANSWERS = ["The Normans", "France", "the 10th century"]


def test_question_answerer_learns_spans_and_reloads(tiny_checkpoint, tmp_path):
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=12, doc_stride=8)
    starts = [PASSAGE.index(a) for a in ANSWERS]
    ends = [s + len(a) for s, a in zip(starts, ANSWERS)]
    model.compile(learning_rate=1e-2)
    # 25 passes as one epoch: Keras's cost of an epoch was most of the time.
    model.fit((QUESTIONS * 100, [PASSAGE] * 300), (starts * 100, ends * 100), batch_size=8,
              verbose=0)  # fmt: skip
    result = model.predict((QUESTIONS, [PASSAGE] * 3), verbose=0)
    # A 2-layer, 12-wide random encoder learns the starts; most ends too (chance: ~1 in 300).
    assert result["start"].tolist() == starts
    assert sum(a == b for a, b in zip(result["answer"].tolist(), ANSWERS)) >= 2
    assert [PASSAGE[s:e] for s, e in zip(result["start"], result["end"])] == result["answer"].tolist()
    model.save(str(tmp_path / "qa.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "qa.keras"))
    assert reloaded.preprocessor.doc_stride == 8
    again = reloaded.predict((QUESTIONS, [PASSAGE] * 3), verbose=0)
    assert again["answer"].tolist() == result["answer"].tolist()
    assert not result["passage_cut"].any()


def test_question_answerer_refuses_answers_outside_their_passage(tiny_checkpoint):
    """A span past the passage's end, ending before it starts, empty or starting below -1
    was trained on as whatever windowing made of it; now one line names the example (in
    memory), or the graph stops (a Dataset). Start -1 (no answer) and an answer ending at
    the passage's last character are taken."""
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=12, doc_stride=8)
    model.compile()
    x = (QUESTIONS[:2], [PASSAGE, "Bob ran"])
    for starts, ends in [([0, 0], [11, 50]), ([0, 4], [11, 2]), ([0, 3], [11, 3]),
                         ([0, -2], [11, 2])]:  # fmt: skip
        with pytest.raises(ValueError, match=rf"example 1: the answer \[{starts[1]}, "
                                             rf"{ends[1]}\) is not within its passage of 7 "
                                             "characters"):  # fmt: skip
            model.fit(x, (starts, ends), verbose=0)
    model.fit(x, ([-1, 0], [-1, 7]), verbose=0)
    # Offsets that are not whole numbers were cast: 3.5 trained as 3.
    with pytest.raises(ValueError, match=r"^answer_ends\[1\] is 3.5: give character offsets as "
                                         "whole numbers, start -1 for no answer$"):  # fmt: skip
        model.fit(x, ([0, 0], [11, 3.5]), verbose=0)
    halves = tf.data.Dataset.from_tensor_slices((x, ([0.0, 0.5], [11.0, 3.0]))).batch(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="an answer offset is not a whole"):
        model.fit(halves, verbose=0)
    whole = tf.data.Dataset.from_tensor_slices((x, ([0.0, 0.0], [11.0, 3.0]))).batch(2)
    assert np.isfinite(model.fit(whole, verbose=0).history["loss"][0])
    # A question's sample weight goes to each of its windows (it raised TypeError before).
    spans = ([0, 0], [11, 7])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Your input ran out of data")
        plain = model.evaluate(x, spans, verbose=0)
    assert model.evaluate(x, spans, sample_weight=[1.0, 1.0], verbose=0) == plain
    assert model.evaluate(x, spans, sample_weight=[0.0, 0.0], verbose=0)[0] == 0
    dataset = tf.data.Dataset.from_tensor_slices((x, ([0, 0], [11, 50]))).batch(2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not within its passage"):
        model.fit(dataset, verbose=0)


def test_a_windows_span_loss_does_not_depend_on_its_batchs_padding(tiny_checkpoint):
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(tiny_checkpoint, sequence_length=48,
                                                            max_query_length=12)  # fmt: skip
    start = PASSAGE.index(ANSWERS[0])
    windows = model.preprocessor.windows(
        tf.constant(QUESTIONS[:2]), tf.constant(["a short one .", PASSAGE]),
        tf.constant([-1, start], tf.int64), tf.constant([-1, start + len(ANSWERS[0])], tf.int64))
    x = {n: windows[n] for n in INPUT_NAMES}
    length = int(x["input_mask"][0].numpy().sum())
    assert length < x["input_mask"].shape[1]  # the short window is padded in the batch

    def losses(inputs, rows):
        logits = model(inputs)
        return [keras.losses.sparse_categorical_crossentropy(
            windows[f"{side}_positions"][rows], logits[f"{side}_logits"], from_logits=True
        ).numpy() for side in ("start", "end")]  # fmt: skip

    padded = losses(x, slice(0, 2))
    alone = losses(tf.nest.map_structure(lambda t: t[:1, :length], x), slice(0, 1))
    # Padding's logits used to add to the softmax's sum: 3.19 padded against 2.59 alone.
    for side_padded, side_alone in zip(padded, alone):
        np.testing.assert_allclose(side_padded[:1], side_alone, rtol=1e-6)


def test_question_answerer_bounds_the_windows_of_a_long_passage(tiny_checkpoint):
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=12, doc_stride=8, max_windows=3)
    long = " ".join(f"word{i}" for i in range(2000))  # about 6,000 pieces: 700+ windows
    windows = model.preprocessor.windows(tf.constant(["q", "q"]), tf.constant([long, "short"]))
    assert windows["example"].numpy().tolist() == [0, 0, 0, 1]
    assert windows["passage_cut"].numpy().tolist() == [True, False]
    result = model.predict((["where?", "where?"], [long, "a short passage"]), verbose=0)
    assert result["passage_cut"].tolist() == [True, False]
    first_windows = long[: int(result["candidates"]["char_ends"].max()) + 1]
    assert result["answer"][0] in first_windows  # an answer from what was read
    assert model.preprocessor.get_config()["max_windows"] == 3
    # Two questions, one passage, sizes known only when the graph runs (as served): an op
    # error with an index ("indices[1] = 1 is not in [0, 1)") before.
    texts = tf.TensorSpec([None], tf.string)
    answer = tf.function(model.answer, input_signature=[texts, texts])
    with pytest.raises(tf.errors.InvalidArgumentError, match="questions and passages differ in "
                                                             "batch size"):  # fmt: skip
        answer(tf.constant(["who?", "where?"]), tf.constant(["a short passage"]))


def test_span_and_tag_models_leave_the_pooler_out_of_training(tiny_checkpoint):
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=12, doc_stride=8)
    pooler = [w.path for w in model.encoder.pooler.weights]
    assert len(pooler) == 2 and not set(pooler) & {w.path for w in model.trainable_weights}
    classifier = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, sequence_length=32)
    assert set(pooler) <= {w.path for w in classifier.trainable_weights}  # it reads [CLS]
    before = model.encoder.pooler.get_weights()
    starts = [PASSAGE.index(a) for a in ANSWERS]
    model.compile(learning_rate=1e-2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit((QUESTIONS, [PASSAGE] * 3), (starts, [s + 1 for s in starts]), verbose=0)
    # Keras warned "Gradients do not exist for variables ['pooler/dense/kernel', ...]".
    assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
    for old, new in zip(before, model.encoder.pooler.get_weights()):
        np.testing.assert_array_equal(old, new)
    assert len(model.weights) == len(model.trainable_weights) + len(pooler)
