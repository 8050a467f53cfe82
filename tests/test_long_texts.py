"""Classifiers that read whole texts: windows (keras_bert.text.windows), their logits combined
into the text's, in fit, evaluate, predict, a saved file and an export."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import app
from conftest import DATA, run_with_flags, served_in_clean_process
from run_squad_reference import reference_max_context, reference_windows

import keras_bert
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.windows import window_spans
from tasks import glue, ner, trainer

CAT = "the cat sat on the mat"  # 6 tokens of MiniLM's vocabulary
LONG = f"{CAT} a dog {CAT} a dog ! {CAT} the dog sat {CAT}"  # 33 tokens


@pytest.mark.parametrize("room, stride", [(14, 7), (14, 14), (14, 5), (5, 1)])
def test_windows_lie_where_the_original_code_puts_them(room, stride):
    lengths = [1, 5, 13, 14, 15, 21, 22, 40, 97]
    batch = len(lengths)
    found = window_spans(
        tf.constant(lengths, tf.int64), tf.fill([batch], tf.constant(room, tf.int64)),
        tf.fill([batch], tf.constant(stride, tf.int64)), 6)  # fmt: skip
    example, starts, sizes, cut = (found[k] for k in ("example", "starts", "sizes", "cut"))
    got = {}
    for e, s, n in zip(example.numpy(), starts.numpy(), sizes.numpy()):
        got.setdefault(int(e), []).append((int(s), int(n)))
    for i, length in enumerate(lengths):
        spans = reference_windows(length, room, stride)
        assert got[i] == spans[:6]
        assert bool(cut[i]) == (len(spans) > 6)


def test_an_empty_text_has_one_empty_window():
    spans = window_spans(*(tf.constant([v], tf.int64) for v in (0, 14, 7)), 4)
    example, sizes, cut = spans["example"], spans["sizes"], spans["cut"]
    assert example.numpy().tolist() == [0] and sizes.numpy().tolist() == [0]
    assert not cut.numpy()[0]


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    """A classifier reading up to 4 windows of 16 tokens, and a plain one with the same
    weights (its encoder and head), which reads one."""
    windowed = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=3,
                                                         sequence_length=16, max_windows=4)
    plain = keras_bert.BertClassifier(windowed.encoder, keras_bert.BertPreprocessor.from_tokenizer(
        windowed.preprocessor.tokenizer, 16), num_classes=3)  # fmt: skip
    plain.head.set_weights(windowed.head.get_weights())
    return windowed, plain


def test_windows_hold_the_whole_text_and_a_pairs_first_text_in_each(models):
    tokenizer = models[0].preprocessor.tokenizer
    windowed = models[0]
    inputs, cut = windowed.preprocessor.windows([LONG, CAT, LONG + " " + LONG])
    assert inputs["input_word_ids"].shape == (3, 4, 16)
    assert cut.numpy().tolist() == [False, False, True]
    ids = inputs["input_word_ids"].numpy()
    tokens = tokenizer([LONG]).flat_values.numpy().tolist()
    # Windows of 14 tokens, each 7 after the one before: the halves of window k + 1 and k meet.
    read = ids[0, 0, 1:15].tolist() + [t for w in ids[0, 1:] for t in w[8:15] if t]
    assert read[: len(tokens)] == tokens
    assert ids[1, 0, 1:7].tolist() == tokenizer([CAT]).flat_values.numpy().tolist()
    assert not inputs["input_mask"].numpy()[1, 1:].any()  # a short text's other windows are 0
    pairs = keras_bert.BertWindowsPreprocessor.from_tokenizer(
        tokenizer, 16, num_segments=2, max_windows=8)  # fmt: skip
    first_ids = tokenizer(["a dog"]).flat_values.numpy().tolist()
    pair_inputs, _ = pairs.windows((["a dog"], [LONG]))
    for window in pair_inputs["input_word_ids"].numpy()[0]:
        if window.any():
            assert window[1:3].tolist() == first_ids and window[3] == tokenizer.sep_id


def test_a_text_of_one_window_scores_as_the_plain_classifier(models):
    windowed, plain = models
    texts = [CAT, "a dog", ""]
    np.testing.assert_allclose(windowed.predict(texts, verbose=0), plain.predict(texts, verbose=0),
                               atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_a_texts_logits_combine_its_windows_logits(models, pooling):
    windowed, plain = models
    windowed.get_layer("windows").pooling = pooling
    try:
        inputs, _ = windowed.preprocessor.windows([LONG, CAT])
        got = windowed(inputs, training=False).numpy()
    finally:
        windowed.get_layer("windows").pooling = "mean"
    for row in range(2):
        real = inputs["input_mask"].numpy()[row, :, 0] > 0
        each = plain({n: inputs[n][row][real] for n in INPUT_NAMES}, training=False).numpy()
        assert len(each) == (4 if row == 0 else 1)
        expected = each.mean(0) if pooling == "mean" else each.max(0)
        np.testing.assert_allclose(got[row], expected, atol=1e-6)


def test_attention_weighs_the_windows_vectors_before_the_head(tiny_checkpoint, tmp_path):
    model = keras_bert.BertClassifier.from_checkpoint(
        tiny_checkpoint, num_classes=3, sequence_length=16, max_windows=4,
        window_pooling="attention", dropout=0.0)  # fmt: skip
    attend = model.get_layer("windows")
    kernel = np.random.default_rng(0).normal(size=attend.score.kernel.shape).astype("float32")
    attend.score.set_weights([kernel, np.array([0.5], "float32")])
    inputs, _ = model.preprocessor.windows([LONG, CAT])
    got = model(inputs, training=False).numpy()
    head = model.head.get_weights()
    for row in range(2):
        real = inputs["input_mask"].numpy()[row, :, 0] > 0
        vectors = model.encoder({n: inputs[n][row][real] for n in INPUT_NAMES},
                                training=False)["pooled_output"].numpy()  # fmt: skip
        scores = vectors @ kernel[:, 0] + 0.5
        weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        expected = (weights[:, None] * vectors).sum(0) @ head[0] + head[1]
        assert len(vectors) == (4 if row == 0 else 1)
        np.testing.assert_allclose(got[row], expected, atol=1e-5)
    texts, labels = [LONG, CAT, "a dog", LONG + " " + LONG], np.array([1, 0, 2, 1])
    model.compile(learning_rate=1e-2)
    before = model.evaluate(texts, labels, verbose=0)[0]
    model.fit(texts * 10, np.tile(labels, 10), batch_size=2, shuffle=False, verbose=0)
    assert model.evaluate(texts, labels, verbose=0)[0] < before
    assert not np.allclose(attend.score.get_weights()[0], kernel)  # the scores learn too
    path = str(tmp_path / "attention.keras")
    model.save(path)
    np.testing.assert_allclose(keras.saving.load_model(path).predict(texts, verbose=0),
                               model.predict(texts, verbose=0), atol=1e-5)  # fmt: skip


def test_a_long_text_is_one_example_in_training(tiny_checkpoint, tmp_path):
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                      sequence_length=16, max_windows=4,
                                                      dropout=0.0)  # fmt: skip
    texts, labels = [LONG, CAT, "a dog", LONG + " " + LONG], np.array([1, 0, 0, 1])
    weights = np.array([1.0, 2.0, 0.5, 1.0])
    model.compile(learning_rate=1e-2, total_steps=40)
    # The loss is each text's cross-entropy (its windows' combined logits), weighted per text
    # and averaged over the texts (Keras's sum_over_batch_size), not over their windows.
    logits = model.predict(texts, verbose=0)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(weights * log_p[np.arange(4), labels]).sum() / len(texts)
    loss = model.evaluate(texts, labels, sample_weight=weights, batch_size=4, verbose=0)[0]
    assert loss == pytest.approx(expected, rel=1e-4)
    # 20 passes as one epoch: Keras's cost of an epoch was most of the time.
    model.fit(texts * 20, np.tile(labels, 20), sample_weight=np.tile(weights, 20), batch_size=2,
              shuffle=False, verbose=0)  # fmt: skip
    assert model.evaluate(texts, labels, sample_weight=weights, batch_size=4, verbose=0)[0] < loss
    after = model.predict(texts, verbose=0)
    # Saved and loaded, and exported: the same scores, and `cut` says which text was cut.
    path = str(tmp_path / "long.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), after, atol=1e-5)
    exported = model.export(str(tmp_path / "exported"))
    served = tf.saved_model.load(exported)
    answer = served.signatures["serving_default"](sentence=tf.constant(texts))
    np.testing.assert_allclose(answer["probabilities"].numpy(), tf.nn.softmax(after).numpy(),
                               atol=1e-5)  # fmt: skip
    assert answer["cut"].numpy().tolist() == [False, False, False, True]
    classified = model.classify(texts, batch_size=3, verbose=0)  # the library answers the same
    assert classified["cut"].tolist() == [False, False, False, True]
    np.testing.assert_allclose(classified["probabilities"], answer["probabilities"].numpy(),
                               atol=1e-5)  # fmt: skip
    assert classified["label_id"].tolist() == answer["label_id"].numpy().tolist()
    ids = served.signatures["serve_token_ids"](
        **{n: v for n, v in model.preprocessor.windows(texts)[0].items()})  # fmt: skip
    np.testing.assert_allclose(ids["probabilities"].numpy(), tf.nn.softmax(after).numpy(),
                               atol=1e-5)  # fmt: skip
    # As TF Serving runs it, in a process with only TensorFlow and tensorflow-text.
    body = ("texts = json.loads(sys.stdin.read())\n"
            "out = f(sentence=tf.constant(texts))\n"
            "print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))\n")  # fmt: skip
    assert served_in_clean_process(exported, body, json.dumps(texts))["cut"] == [
        False, False, False, True]  # fmt: skip
    warmup = os.path.join(exported, "assets.extra", "tf_serving_warmup_requests")
    with open(warmup, "rb") as f:  # a request of a text past every window (4 of 16 tokens)
        assert b" ".join([b"word"] * 64) in f.read()


def test_bad_window_settings_are_refused_in_one_line(tiny_checkpoint):
    cases = [
        ({"max_windows": 0}, "max_windows must be a whole number of at least 1, got 0"),
        ({"max_windows": 4, "stride": 15},
         ("stride=15 skips text: a window of sequence_length=16 holds 14 tokens of it; pass a "
          "stride of at most 14")),
        ({"stride": 4}, "stride is the step between windows: pass max_windows too"),
        ({"max_windows": 2, "window_pooling": "sum"},
         "window_pooling must be 'mean', 'max' or 'attention', got 'sum'"),
    ]  # fmt: skip
    for kwargs, message in cases:
        with pytest.raises(ValueError) as error:
            keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, sequence_length=16,
                                                      **kwargs)  # fmt: skip
        assert str(error.value) == message


def test_the_glue_binary_reads_whole_texts_in_windows(tmp_path, tiny_checkpoint, flags_parsed,
                                                      caplog):  # fmt: skip
    flags_parsed.task_name = "SST-2"
    flags_parsed.data_dir = os.path.join(DATA, "glue", "SST-2")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.max_seq_length = 8  # SST-2's sentences then take several windows
    flags_parsed.max_windows = 3
    flags_parsed.num_train_epochs = 1
    flags_parsed.train_batch_size = 16
    with caplog.at_level("INFO", logger="absl"):
        results = glue.run(glue.get_task("SST-2"))
    assert 0 <= results["dev"]["accuracy"] <= 1
    logged = [r.getMessage() for r in caplog.records if "--max_windows=3" in r.getMessage()]
    assert len(logged) == 2 and all(" windows of --max_seq_length=8 tokens" in m for m in logged)
    model = trainer.load_run(str(tmp_path / "run"))
    assert model.preprocessor.max_windows == 3 and model.windowed
    # The dev score is that of the saved model reading whole texts.
    dev = glue.read_tsv(os.path.join(DATA, "glue", "SST-2", "dev.tsv"), glue.get_task("SST-2"),
                        True)  # fmt: skip
    logits = model.predict(dev.texts["sentence"], verbose=0)
    assert results["dev"]["accuracy"] == np.mean(logits.argmax(-1) == dev.labels)
    flags_parsed.max_windows = None
    flags_parsed.window_stride = 2
    with pytest.raises(app.UsageError, match="--window_stride is the step between windows: "
                       "pass --max_windows too"):  # fmt: skip
        glue.run(glue.get_task("SST-2"))


@pytest.fixture(scope="module")
def taggers(tiny_checkpoint):
    """A token classifier reading up to 5 windows of 16 tokens (a stride of 5), and a plain one
    with the same weights."""
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    windowed = keras_bert.BertTokenClassifier.from_checkpoint(
        tiny_checkpoint, tags, sequence_length=16, max_windows=5, stride=5)  # fmt: skip
    plain = keras_bert.BertTokenClassifier(windowed.encoder, keras_bert.WordTagger.from_tokenizer(
        windowed.preprocessor.tokenizer, 16, tags=tags))  # fmt: skip
    plain.head.set_weights(windowed.head.get_weights())
    return windowed, plain


def test_each_word_is_tagged_from_the_window_of_its_most_context(taggers):
    windowed, plain = taggers
    texts = [LONG, "a cat", f"unaffable {LONG} hello world"]
    got = windowed.tag(tf.constant(texts))
    tokenizer = windowed.preprocessor.tokenizer
    for row, text in enumerate(texts):
        pieces = tokenizer([text]).flat_values.numpy()
        spans = reference_windows(len(pieces), 14, 5)[:5]
        # Each piece's tag from the plain model on the window of its most context.
        piece_tags = np.zeros(len(pieces), int)  # "O" past the last window
        for k, (start, size) in enumerate(spans):
            ids = np.array([[tokenizer.cls_id, *pieces[start:start + size], tokenizer.sep_id]])
            inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                      "input_type_ids": np.zeros_like(ids)}  # fmt: skip
            tags = plain(inputs, training=False).numpy()[0, 1:-1].argmax(-1)
            for j in range(size):
                if reference_max_context(spans, k, start + j):
                    piece_tags[start + j] = tags[j]
        words = windowed.preprocessor._words(tf.constant([text]))
        first = words["first_piece"].flat_values.numpy()
        assert got["word_tags"][row].numpy().tolist() == piece_tags[first].tolist()
    assert len(tokenizer([texts[2]]).flat_values) > 14 + 4 * 5  # past the 5 windows: "O"
    # A text of one window is tagged as the plain model tags it.
    assert got["word_tags"][1].numpy().tolist() == plain.tag(tf.constant(["a cat"]))[
        "word_tags"][0].numpy().tolist()  # fmt: skip


def test_each_words_tag_is_trained_once_and_the_export_tags_long_texts(taggers, tmp_path):
    windowed, _ = taggers
    tagger = windowed.preprocessor
    text = f"{LONG} in paris"
    words = text.split()
    tags = tf.ragged.constant([[0] * (len(words) - 1) + [3]], tf.int32, row_splits_dtype=tf.int64)
    inputs, labels = tagger.encode(tf.constant([text]), tags)
    labels = labels.numpy()
    assert inputs["input_word_ids"].shape[0] == len(tagger.windows_of(tf.constant([text]))) > 1
    assert (labels != -1).sum() == len(words)  # each word's first piece once, over all windows
    assert (labels == 3).sum() == 1
    served = tf.saved_model.load(windowed.export(str(tmp_path / "ner"),
                                                 allow_untrained_head=True))  # fmt: skip
    answer = served.signatures["serving_default"](sentence=tf.constant([text, "a cat"]))
    predicted = windowed.predict([text, "a cat"], verbose=0)["entities"]
    for row, entities in enumerate(predicted):
        assert int(answer["num_entities"][row]) == len(entities)
        assert [int(s) for s in answer["entity_start"][row][: len(entities)]] == [
            e["start"] for e in entities]  # fmt: skip


def test_conll_documents_join_their_sentences_and_predictions_split_back():
    split = ner.read_conll(os.path.join(DATA, "conll", "train.txt"))
    documents = ner.as_documents(split)
    assert 1 < len(documents) < len(split)
    assert " ".join(documents.texts["sentence"]) == " ".join(split.texts["sentence"])
    assert [t for d in documents.labels for t in d] == [t for s in split.labels for t in s]
    assert ner.by_sentence(split, documents.labels) == split.labels
    # -DOCSTART- lines at the end of each document (the IOB1 originals) count the same way.
    iob1 = ner.read_conll(os.path.join(DATA, "conll", "eng.train"))
    assert iob1.texts["document"] == split.texts["document"][: len(iob1)]


def test_the_ner_binary_tags_documents_in_windows(tmp_path, tiny_checkpoint):
    conll = os.path.join(DATA, "conll", "eng.train")
    scores = run_with_flags(ner.run, train_file=conll, dev_file=conll, documents=True,
                            max_windows=8, max_seq_length=32, output_dir=str(tmp_path / "run"),
                            init_checkpoint=tiny_checkpoint, num_train_epochs=2.0,
                            learning_rate=1e-2, train_batch_size=2)  # fmt: skip
    model = keras.saving.load_model(str(tmp_path / "run" / "model.keras"))
    assert model.preprocessor.max_windows == 8
    # Scored and written by sentence, from the documents' tags.
    split = ner.read_conll(conll)
    with open(tmp_path / "run" / "dev_predictions.txt", encoding="utf-8") as f:
        blocks = [b.splitlines() for b in f.read().strip("\n").split("\n\n")]
    assert [" ".join(line.split()[0] for line in b) for b in blocks] == split.texts["sentence"]
    predicted = [[line.split()[2] for line in b] for b in blocks]
    assert ner.conll_scores(split.labels, predicted) == scores["dev"]
    documents = ner.as_documents(split)
    tags = model.predict(documents.texts["sentence"], verbose=0)["word_tags"]
    assert ner.by_sentence(split, tags) == predicted
