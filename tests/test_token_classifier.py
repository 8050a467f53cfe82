"""BertTokenClassifier as a Keras user meets it: sentences and word tags in, entities out."""

import keras
import pytest
import tensorflow as tf

import keras_bert


def test_token_classifier_learns_entities_and_refuses_unknown_tags(tiny_checkpoint, tmp_path):
    tags = ["O", "B-PER", "I-PER", "B-LOC"]
    model = keras_bert.BertTokenClassifier.from_checkpoint(tiny_checkpoint, tags,
                                                           sequence_length=24)  # fmt: skip
    sentences = ["hello world the cat sat", "the dog sat on the mat"] * 8
    word_tags = [["O", "B-LOC", "O", "B-PER", "O"], ["O", "B-PER", "O", "O", "O", "B-LOC"]] * 8
    model.compile(learning_rate=1e-2)
    model.fit(sentences * 15, word_tags * 15, batch_size=8, verbose=0)  # 15 passes, one epoch
    result = model.predict(sentences[:2], verbose=0)
    assert result["word_tags"] == word_tags[:2]
    # A second predict (as a dev callback's, each epoch) runs the graph the first one traced.
    assert model.predict(sentences[:2], verbose=0) == result
    # ... and any batch size: batches of 2 then 1.
    assert model.predict(sentences[:3], batch_size=2, verbose=0)["word_tags"] == word_tags[:3]
    assert model.traced(model.tag).function.experimental_get_tracing_count() == 1
    assert result["entities"][0] == [{"text": "world", "type": "LOC", "start": 6, "end": 11},
                                     {"text": "cat", "type": "PER", "start": 16, "end": 19}]  # fmt: skip
    with pytest.raises(ValueError, match="tag 'B-ORG' is not one of the model's tags"):
        model.fit(sentences[:1], [["B-ORG", "O", "O", "O", "O"]], verbose=0)
    # Tags not one per word (words split at white space): in memory one line, a Dataset's in
    # the graph. More tags than words used to be dropped, silently.
    for tags, message in [(["O"] * 6, "example 0: 6 tags for 5 words"),
                          (["O"] * 4, "example 0: 4 tags for 5 words")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            model.fit(sentences[:2], [tags, word_tags[1]], verbose=0)
        dataset = tf.data.Dataset.from_tensor_slices(
            (sentences[:1], model.tag_ids([tags]))).batch(1)
        with pytest.raises(tf.errors.InvalidArgumentError, match="not one per word"):
            model.fit(dataset, verbose=0)
    model.save(str(tmp_path / "ner.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "ner.keras"))
    assert reloaded.predict(sentences[:2], verbose=0) == result
