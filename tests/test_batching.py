"""Raw data in memory through a task model's Keras entry points beyond fit, evaluate and
predict (keras_bert/training/batching.py and BertTask): validation_split, train_on_batch and
test_on_batch, labels of either rank, and data that is no tensor."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_bert
from keras_bert.training import batching

SENTENCES = ["a gripping , moving film", "dull and far too long", "a delight", "tedious mess",
             "the cat sat on the mat", "what a waste of an evening"]  # fmt: skip
LABELS = [1, 0, 1, 0, 1, 0]


@pytest.fixture
def classifier(tiny_checkpoint):
    keras.utils.set_random_seed(3)
    return keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                     sequence_length=32)  # fmt: skip


def test_validation_split_validates_on_the_last_examples_as_keras_does(classifier):
    classifier.compile(learning_rate=2e-2)
    history = classifier.fit(SENTENCES, LABELS, validation_split=1 / 3, epochs=12, batch_size=2,
                             verbose=0).history  # fmt: skip
    assert len(history["val_loss"]) == 12
    # The validation loss is the trained model's on the last third (dropout is off in both).
    last = classifier.evaluate(SENTENCES[4:], LABELS[4:], verbose=0, return_dict=True)
    np.testing.assert_allclose(history["val_loss"][-1], last["loss"], rtol=1e-5)
    first = classifier.evaluate(SENTENCES[:4], LABELS[:4], verbose=0, return_dict=True)
    assert abs(first["loss"] - last["loss"]) > 1e-4  # the two parts are told apart
    # Pairs, arrays and sample weights are split the same way.
    train, validate = batching.split_off(0.5, *batching.in_memory(
        (SENTENCES, SENTENCES), np.array(LABELS), sample_weight=[1, 2, 3, 4, 5, 6]))  # fmt: skip
    assert [t.numpy().tolist() for t in train[1:]] == [[1, 0, 1], [1, 2, 3]]
    assert validate[0][1].numpy().tolist() == [s.encode() for s in SENTENCES[3:]]


def test_validation_split_refuses_what_it_cannot_split(classifier):
    classifier.compile()
    dataset = tf.data.Dataset.from_tensor_slices((SENTENCES, LABELS)).batch(2)
    for kwargs, message in [
        (dict(x=dataset), "x is a tf.data.Dataset: pass validation_data instead"),
        (dict(x=SENTENCES, y=LABELS, validation_data=(SENTENCES, LABELS)),
         "pass validation_data or validation_split, not both"),
        (dict(x=SENTENCES, y=LABELS, validation_split=0.9), "0.9 of 6 examples leaves none to "
                                                            "train on"),
        (dict(x=SENTENCES, y=LABELS, validation_split=1.5), "between 0 and 1, got 1.5"),
        (dict(x=SENTENCES, y=LABELS[:5]), r"len\(x\) is 6 but len\(y\) is 5"),
    ]:  # fmt: skip
        kwargs = {"validation_split": 0.5, **kwargs}
        with pytest.raises(ValueError, match=message):
            classifier.fit(verbose=0, **kwargs)


def test_train_and_test_on_batch_take_raw_strings(classifier):
    with pytest.raises(ValueError, match=r"cannot count the steps .* compile\(total_steps=...\)"):
        classifier.train_on_batch(SENTENCES, LABELS)
    classifier.compile(learning_rate=2e-2, total_steps=40)
    before = classifier.test_on_batch(SENTENCES, LABELS, return_dict=True)
    assert before == pytest.approx(classifier.evaluate(SENTENCES, LABELS, verbose=0,
                                                       return_dict=True), rel=1e-5)  # fmt: skip
    for _ in range(40):
        classifier.train_on_batch(SENTENCES, LABELS)
    after = classifier.test_on_batch(SENTENCES, np.array(LABELS), return_dict=True)
    assert after["loss"] < 0.7 * before["loss"] and after["accuracy"] == 1.0
    with pytest.raises(ValueError, match=r"y\[1\] is 2: labels must be whole numbers"):
        classifier.train_on_batch(SENTENCES[:2], [0, 2])
    with pytest.raises(ValueError, match="takes 1 text"):
        classifier.test_on_batch((SENTENCES, SENTENCES), LABELS)
    # Encoder inputs pass as they are.
    ids = classifier.preprocessor(SENTENCES)
    assert classifier.test_on_batch(ids, np.array(LABELS)) == pytest.approx(
        classifier.test_on_batch(SENTENCES, LABELS), rel=1e-6)  # fmt: skip


def test_labels_may_change_rank_between_fits(classifier):
    """The preprocessing function is traced once for the model's life: a fit with a list of
    labels, then one with a column of them (or back) relaxed it to labels of unknown rank, and
    Keras's loss failed ("Cannot take the length of shape with unknown rank")."""
    classifier.compile()
    column = np.array(LABELS)[:, None]
    for labels in (LABELS, column, LABELS, column.astype("float32")):
        classifier.fit(SENTENCES, labels, verbose=0)
    losses = [classifier.evaluate(SENTENCES, y, verbose=0)[0] for y in (LABELS, column)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    dataset = tf.data.Dataset.from_tensor_slices((SENTENCES, np.stack([LABELS] * 2, 1))).batch(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="give one label per example"):
        classifier.evaluate(dataset, verbose=0)


def test_a_classifier_made_with_label_names_takes_them_as_targets(classifier, tiny_checkpoint):
    """Names were refused in memory ("y must be labels as numbers, got strings") though the
    model knows them, and a Dataset's failed in TensorFlow's cast from string to int."""
    keras.utils.set_random_seed(3)
    named = keras_bert.BertClassifier.from_checkpoint(
        tiny_checkpoint, num_classes=2, sequence_length=32, labels=["neg", "pos"])
    names = [["neg", "pos"][label] for label in LABELS]
    named.compile()
    by_id = named.evaluate(SENTENCES, LABELS, verbose=0)
    for y in (names, np.array(names), np.array(names, dtype=bytes)):
        np.testing.assert_allclose(named.evaluate(SENTENCES, y, verbose=0), by_id, rtol=1e-6)
    dataset = tf.data.Dataset.from_tensor_slices((SENTENCES, names)).batch(4)
    np.testing.assert_allclose(named.evaluate(dataset, verbose=0), by_id, rtol=1e-6)
    assert named.fit(SENTENCES, names, verbose=0).history["loss"]
    with pytest.raises(ValueError, match=r"y\[1\] is 'negative', not one of the model's labels "
                       r"\['neg', 'pos'\]"):  # fmt: skip
        named.fit(SENTENCES[:2], ["pos", "negative"], verbose=0)
    wrong = tf.data.Dataset.from_tensor_slices((SENTENCES, ["pos", "negative"] * 3)).batch(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="a label is not one of the model"):
        named.evaluate(wrong, verbose=0)
    classifier.compile()
    with pytest.raises(ValueError, match="y must be labels as numbers from 0 to 1, got strings"):
        classifier.evaluate(SENTENCES, names, verbose=0)
    with pytest.raises(ValueError, match=r"labels given as strings need a model made with "
                       r"their names, labels=\[...\]"):  # fmt: skip
        classifier.evaluate(dataset, verbose=0)


def test_data_of_kinds_task_models_do_not_take_is_refused_in_one_line(classifier):
    """A generator or a keras.utils.PyDataset read as "x cannot be read as a tensor: give
    strings of one kind", and a dataset of single examples failed inside the traced
    preprocessing ("slice index 0 of dimension 0 out of bounds")."""
    def batches():
        yield SENTENCES[:2], LABELS[:2]

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return np.array(SENTENCES), np.array(LABELS)

    single = tf.data.Dataset.from_tensor_slices((SENTENCES, LABELS))
    for x, message in [
        (batches(), r"x is a generator: task models take raw data in memory \(lists or arrays\) "
                    "or a batched tf.data.Dataset; wrap a generator in .*from_generator"),
        (Batches(), "x is a Batches: task models take"),
        (iter(SENTENCES), "x is a list_iterator: task models take"),
        (single, r"x is a tf.data.Dataset of single examples: batch it, dataset.batch\(32\)"),
    ]:  # fmt: skip
        for call in (classifier.fit, classifier.evaluate):
            with pytest.raises(ValueError, match=message):
                call(x, verbose=0)
    with pytest.raises(ValueError, match="x is a generator"):
        classifier.predict((s for s in SENTENCES), verbose=0)
    with pytest.raises(ValueError, match="single examples"):
        classifier.predict(tf.data.Dataset.from_tensor_slices(SENTENCES), verbose=0)
    assert classifier.fit(single.batch(4), verbose=0).history["loss"]


def test_data_that_is_no_tensor_is_refused_in_one_line(classifier, tiny_checkpoint, tmp_path):
    for x, message in [
        (["a film", None], r"x cannot be read as a tensor \(item 1 is None\)"),
        (["a film", 3], r"\(item 1 is 3\): give strings of one kind"),
        ([["a film"], ["a mess"]], r"expected a list .* shape \(2, 1\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            classifier.predict(x, verbose=0)
    choices = keras_bert.BertMultipleChoice.from_checkpoint(tiny_checkpoint, num_choices=2,
                                                            sequence_length=16)  # fmt: skip
    with pytest.raises(ValueError, match=r"x cannot be read as a tensor \(item 1 has 3 entries, "
                                         r"item 0 2\)"):  # fmt: skip
        choices.predict((["a cat", "a dog"], [["sat", "flew"], ["ran", "sat", "flew"]]), verbose=0)
    with pytest.raises(ValueError, match=r"y cannot be read as a tensor \(item 1 is None\)"):
        batching.in_memory(SENTENCES[:2], [0, None])
    with pytest.raises(ValueError, match=r"model.h5: a task model saves as one .keras file"):
        classifier.save(str(tmp_path / "model.h5"))
    # Saved without the extension, the file was written whole and keras.saving.load_model
    # then refused it ("File format not supported"); the others named the temporary file.
    (tmp_path / "folder.keras").mkdir()
    for path, error, message in [
        (tmp_path / "model", ValueError, (r"model: a task model saves as one .keras file, and "
                                          r"keras.saving.load_model reads it by that extension")),
        (tmp_path / "folder.keras", IsADirectoryError,
         r"folder.keras is a folder; give the path of a .keras file"),
        (tmp_path / "missing" / "m.keras", FileNotFoundError,
         r"m.keras: the folder .*missing does not exist \(or is not a folder\); make it first"),
    ]:  # fmt: skip
        with pytest.raises(error, match=message):
            classifier.save(path)
    assert sorted(os.listdir(tmp_path)) == ["folder.keras"]  # nothing written


PASSAGE = "The Normans gave their name to Normandy, a region in France, in the 10th century."
QUESTIONS = ["Who gave their name to Normandy?", "Where is Normandy?", "When?"]
ANSWERS = ["The Normans", "France", "the 10th century"]


def test_question_answerer_takes_raw_data_in_every_entry_point(tiny_checkpoint):
    """Its windows are cut in the graph: fit with validation_data used to fail (Keras hands the
    prepared windows back to the model's evaluate, which cut them again), and so did
    validation_split and the *_on_batch calls."""
    model = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=12, doc_stride=8)
    starts = [PASSAGE.index(a) for a in ANSWERS]
    x, y = (QUESTIONS, [PASSAGE] * 3), (starts, [s + len(a) for s, a in zip(starts, ANSWERS)])
    traces, cut = [], model.preprocess_batch
    model.preprocess_batch = lambda *data: traces.append(1) or cut(*data)  # runs when traced
    model.compile(learning_rate=1e-3, total_steps=8)
    history = model.fit(x, y, validation_data=(x, y), verbose=0).history
    loss = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    np.testing.assert_allclose(history["val_loss"], [loss], rtol=1e-5)
    assert model.test_on_batch(x, y, return_dict=True)["loss"] == pytest.approx(loss, rel=1e-5)
    doubled = (QUESTIONS * 2, [PASSAGE] * 6), tuple(v * 2 for v in y)
    history = model.fit(*doubled, validation_split=0.5, verbose=0).history
    loss = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]  # the last three
    np.testing.assert_allclose(history["val_loss"], [loss], rtol=1e-5)
    # Every fit (and its validation data), evaluate and test_on_batch ran one graph that cuts
    # windows, traced once: each make_dataset traced its own before (7 traces here).
    assert len(traces) == 1
    model.train_on_batch(x, np.array(y).T)  # rows of (start, end) too
    answers = model.predict(x, verbose=0)
    pairs = tf.data.Dataset.from_tensor_slices(x).batch(2)  # elements (question, passage)
    with pytest.raises(ValueError, match=r"reads as \(x, y\): make it \(\(first, second\), y\), "
                                         r"or \(\(first, second\),\) to predict"):
        model.predict(pairs, verbose=0)
    nested = tf.data.Dataset.from_tensor_slices((x,)).batch(2)
    assert model.predict(nested, verbose=0)["answer"].tolist() == answers["answer"].tolist()
    on_batch = model.predict_on_batch(x)
    assert on_batch["answer"].tolist() == answers["answer"].tolist()
    np.testing.assert_allclose(on_batch["score"], answers["score"], rtol=1e-5)
    with pytest.raises(ValueError, match=r"y must be \(answer_starts, answer_ends\): character "
                                         "offsets as whole numbers"):  # fmt: skip
        model.fit(x, (starts, [None, 3, 4]), verbose=0)  # was int()'s TypeError
    with pytest.raises(ValueError, match="training and testing need targets: pass y"):
        model.test_on_batch(x)


def test_token_classifier_takes_raw_data_in_every_entry_point(tiny_checkpoint):
    model = keras_bert.BertTokenClassifier.from_checkpoint(tiny_checkpoint, ["O", "B-PER", "B-LOC"],
                                                           sequence_length=24)  # fmt: skip
    sentences = ["hello world the cat sat", "the dog sat on the mat"] * 2
    tags = [["O", "B-LOC", "O", "B-PER", "O"], ["O", "B-PER", "O", "O", "O", "B-LOC"]] * 2
    model.compile(learning_rate=1e-3, total_steps=8)
    history = model.fit(sentences, tags, validation_split=0.5, verbose=0).history
    last = model.evaluate(sentences[2:], tags[2:], verbose=0, return_dict=True)["loss"]
    np.testing.assert_allclose(history["val_loss"], [last], rtol=1e-5)
    assert model.test_on_batch(sentences[2:], tags[2:]) == pytest.approx(last, rel=1e-5)
    model.train_on_batch(sentences, tags)
    assert model.predict_on_batch(sentences) == model.predict(sentences, verbose=0)
    # A sentence's weight applies to each of its words' losses (Keras averages over the
    # batch's tagged words: 5 + 6 + 5 + 6); a (batch,) weight failed against the (batch, seq)
    # loss with an InvalidArgumentError.
    alone = model.evaluate(sentences[:1], tags[:1], verbose=0, return_dict=True)["loss"]
    weighted = model.evaluate(sentences, tags, sample_weight=[1, 0, 0, 0], verbose=0)
    assert weighted == pytest.approx(alone * 5 / 22, rel=1e-5)
    # A Dataset's tags as strings (it failed: "Cast string to int32 is not supported").
    dataset = tf.data.Dataset.from_tensor_slices((sentences, tf.ragged.constant(tags))).batch(4)
    assert model.evaluate(dataset, verbose=0) == pytest.approx(model.evaluate(
        sentences, tags, verbose=0), rel=1e-5)  # fmt: skip
    unknown = tf.data.Dataset.from_tensor_slices((sentences[:1], tf.ragged.constant(
        [["O", "B-ORG", "O", "O", "O"]]))).batch(1)  # fmt: skip
    with pytest.raises(tf.errors.InvalidArgumentError, match="a tag is not one of the model"):
        model.evaluate(unknown, verbose=0)
    with pytest.raises(ValueError, match="tag 'B-ORG' is not one of the model's tags"):
        model.train_on_batch(sentences[:1], [["B-ORG", "O", "O", "O", "O"]])


def test_weights_a_model_cannot_apply_are_refused_before_any_graph(classifier, tiny_checkpoint):
    """A class_weight missing a class failed mid-epoch with Keras's index error ('indices[0] =
    2 is not in [0, 2)'); the token classifier's failed the same way on its ignored positions;
    the pretrainer's sample_weight was refused inside the traced graph, and its class_weight
    with Keras's 'cannot class_weight and sample_weight at the same time'."""
    classifier.compile()
    for class_weight, message in [
        ({0: 1.0}, r"each class 0 to 1 to its weight, got the keys \[0\]"),
        ({0: 1.0, 1: float("nan")}, r"class_weight\[1\] is nan"),
    ]:
        with pytest.raises(ValueError, match=message):
            classifier.fit(SENTENCES, LABELS, class_weight=class_weight, verbose=0)
    classifier.fit(SENTENCES, LABELS, class_weight={0: 1.0, 1: 2.0}, verbose=0)
    tagger = keras_bert.BertTokenClassifier.from_checkpoint(tiny_checkpoint, ["O", "B-PER"],
                                                            sequence_length=16)  # fmt: skip
    message = r"BertTokenClassifier takes no class_weight: .* \(weigh examples with"
    with pytest.raises(ValueError, match=message):
        tagger.fit(["a cat"], [["O", "B-PER"]], class_weight={0: 1.0, 1: 5.0}, verbose=0)
    pretrainer = keras_bert.BertPretrainer.from_checkpoint(tiny_checkpoint, sequence_length=16)
    pairs = (["the cat sat", "a dog barked"], ["on the mat", "at night"])
    for use in (lambda: pretrainer.evaluate(pairs, [0, 1], sample_weight=[1, 0], verbose=0),
                lambda: pretrainer.test_on_batch(pairs, [0, 1], sample_weight=[1, 0])):  # fmt: skip
        with pytest.raises(ValueError, match="weighs its predictions itself; pass no "
                                             "sample_weight"):  # fmt: skip
            use()
    with pytest.raises(ValueError, match=r"BertPretrainer takes no class_weight: .* example$"):
        pretrainer.fit(pairs, [0, 1], class_weight={0: 1.0, 1: 1.0}, verbose=0)
