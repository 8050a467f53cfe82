"""BertTextEmbedder: sentence vectors as sentence-transformers makes them, its two losses,
training, saving and the export."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, served_in_clean_process

import keras_bert
from keras_bert.checkpoints.sentence_transformers import sentence_settings
from keras_bert.model.pooling import SentenceVectors


def write_sentence_folder(folder, weights, modules=("Transformer", "Pooling", "Normalize"),
                          pooling=None, max_seq_length=None):  # fmt: skip
    """A sentence-transformers folder around the checkpoint `weights` (in 0_Transformer)."""
    os.makedirs(folder, exist_ok=True)
    paths = {"Transformer": "0_Transformer", "Pooling": "1_Pooling", "Normalize": "2_Normalize",
             "Dense": "2_Dense"}  # fmt: skip
    listed = [{"idx": i, "name": str(i), "path": paths[m],
               "type": f"sentence_transformers.models.{m}"} for i, m in enumerate(modules)]
    with open(os.path.join(folder, "modules.json"), "w") as f:
        json.dump(listed, f)
    shutil.copytree(weights, os.path.join(folder, "0_Transformer"))
    if max_seq_length is not None:
        with open(os.path.join(folder, "0_Transformer", "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": max_seq_length, "do_lower_case": False}, f)
    os.makedirs(os.path.join(folder, "1_Pooling"))
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling or {"pooling_mode_mean_tokens": True}, f)
    return folder


@pytest.mark.slow
def test_minilm_vectors_equal_sentence_transformers(minilm_dir):
    golden = np.load(os.path.join(DATA, "minilm_sentence_golden.npz"))
    texts, expected = golden["texts"].tolist(), golden["vectors"]
    model = keras_bert.BertTextEmbedder.from_checkpoint(minilm_dir)
    # Read from the package's sentence-transformers files, not passed here.
    assert (model.pooling, model.normalize, model.preprocessor.sequence_length) == (
        "mean", True, 256)  # fmt: skip
    got = model.predict(texts, batch_size=16, verbose=0)
    assert got.shape == (53, 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    cosines = (got * expected).sum(1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 0.99999, texts[int(np.argmin(cosines))]
    similarity = model.similarity(texts[:4], got[4:10])
    np.testing.assert_allclose(similarity, expected[:4] @ expected[4:10].T, atol=2e-5)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls", "mean_sqrt_len"])
def test_token_vectors_pool_as_sentence_transformers_pools_them(pooling):
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(6, 5, 4)).astype("float32")  # 3 examples x 2 texts
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0],
                     [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], "int32")  # fmt: skip
    got = SentenceVectors(pooling)(tokens, mask.reshape(3, 2, 5)).numpy()
    assert got.shape == (3, 2, 4)
    for row, (vectors, real) in enumerate(zip(tokens, mask)):
        kept = vectors[real > 0]
        want = {"mean": kept.mean(0), "max": kept.max(0), "cls": vectors[0],
                "mean_sqrt_len": kept.sum(0) / np.sqrt(len(kept))}[pooling]  # fmt: skip
        np.testing.assert_allclose(got[row // 2, row % 2], want / np.linalg.norm(want),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip


def test_in_batch_negatives_are_the_cross_entropy_of_scaled_cosines():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(4, 3, 8)).astype("float32")  # anchor, positive, hard negative
    got = keras_bert.MultipleNegativesRankingLoss(scale=20.0).call(None, vectors).numpy()
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    candidates = np.concatenate([unit[:, 1], unit[:, 2]])  # every positive, then negatives
    scores = 20.0 * unit[:, 0] @ candidates.T
    log_p = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - scores.max(1, keepdims=True)
    np.testing.assert_allclose(got, -log_p[np.arange(4), np.arange(4)], rtol=1e-5)


def test_cosent_penalises_pairs_ranked_against_their_scores():
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(5, 2, 8)).astype("float32")
    scores = np.array([0.5, 4.0, 2.5, 2.5, 1.0], "float32")
    got = float(keras_bert.CoSENTLoss(scale=20.0).call(scores, vectors))
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    cos = 20.0 * (unit[:, 0] * unit[:, 1]).sum(-1)
    terms = [cos[i] - cos[j] for i in range(5) for j in range(5) if scores[i] < scores[j]]
    assert len(terms) == 9  # the tie (2.5, 2.5) counts neither way
    assert got == pytest.approx(np.log(1.0 + np.exp(terms).sum()), rel=1e-5)


def test_sentence_transformers_files_set_pooling_normalisation_and_length(tmp_path,
                                                                          tiny_checkpoint):
    folder = write_sentence_folder(str(tmp_path / "cls"), tiny_checkpoint,
                                   modules=("Transformer", "Pooling"),
                                   pooling={"pooling_mode_cls_token": True}, max_seq_length=40)
    assert sentence_settings(folder) == {"transformer": os.path.join(folder, "0_Transformer"),
                                         "pooling": "cls", "normalize": False,
                                         "max_seq_length": 40}  # fmt: skip
    model = keras_bert.BertTextEmbedder.from_checkpoint(folder)
    assert (model.pooling, model.normalize, model.preprocessor.sequence_length) == (
        "cls", False, 40)  # fmt: skip
    vectors = model.predict(["the cat sat", "a dog"], verbose=0)
    inputs = {k: v[:, 0] for k, v in model.preprocessor(["the cat sat", "a dog"]).items()}
    first = model.encoder(inputs, training=False)
    np.testing.assert_allclose(vectors, first["sequence_output"][:, 0].numpy(), atol=1e-6)
    overridden = keras_bert.BertTextEmbedder.from_checkpoint(folder, pooling="max",
                                                             normalize=True, sequence_length=16)
    assert (overridden.pooling, overridden.normalize,
            overridden.preprocessor.sequence_length) == ("max", True, 16)  # fmt: skip
    run = tmp_path / "run"  # a finished run's folder: its model.keras
    run.mkdir()
    overridden.save(str(run / "model.keras"))
    again = keras_bert.BertTextEmbedder.from_checkpoint(str(run), sequence_length=16)
    assert (again.pooling, again.normalize) == ("max", True)
    np.testing.assert_allclose(again.predict(["the cat sat"], verbose=0),
                               overridden.predict(["the cat sat"], verbose=0), atol=1e-6)
    plain = keras_bert.BertTextEmbedder.from_checkpoint(tiny_checkpoint)  # no such files
    assert (plain.pooling, plain.normalize, plain.preprocessor.sequence_length) == (
        "mean", True, 128)  # fmt: skip


@pytest.mark.parametrize("case, message", [
    ("dense", ("module '2' is a sentence_transformers.models.Dense, which BertTextEmbedder "
               "does not build (it builds Transformer, Pooling and Normalize)")),
    ("two poolings", ("pooling mean + max is not one of mean, cls, max, mean_sqrt_len; pass "
                      "pooling= to choose one")),
    ("bad json", "not valid JSON"),
])  # fmt: skip
def test_sentence_transformers_files_it_cannot_follow_are_refused(tmp_path, tiny_checkpoint,
                                                                  case, message):
    modules = ("Transformer", "Pooling", "Dense") if case == "dense" else (
        "Transformer", "Pooling")  # fmt: skip
    pooling = {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True} if (
        case == "two poolings") else None  # fmt: skip
    folder = write_sentence_folder(str(tmp_path / "st"), tiny_checkpoint, modules, pooling)
    if case == "bad json":
        with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
            f.write('{"pooling_mode_mean_tokens": true,\n')
    with pytest.raises(ValueError, match="^" + folder) as error:
        keras_bert.BertTextEmbedder.from_checkpoint(folder)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.fixture(scope="module")
def embedder(tiny_checkpoint):
    return keras_bert.BertTextEmbedder.from_checkpoint(tiny_checkpoint, sequence_length=32)


ANCHORS = ["the cat sat on the mat", "a dog ran in the park", "stocks fell on monday",
           "rain is expected tomorrow", "she plays the violin", "the train was late"]  # fmt: skip
POSITIVES = ["a cat was sitting on a mat", "the dog runs through the park",
             "the market dropped on monday", "tomorrow it will rain",
             "the violin is her instrument", "the train came late"]  # fmt: skip


def test_in_batch_negatives_train_without_targets(tiny_checkpoint):
    model = keras_bert.BertTextEmbedder.from_checkpoint(tiny_checkpoint, sequence_length=32)
    model.compile(learning_rate=2e-3)
    before = model.evaluate((ANCHORS, POSITIVES), batch_size=6, verbose=0)
    model.fit((ANCHORS * 8, POSITIVES * 8), batch_size=6, shuffle=False, verbose=0)  # 8 passes
    after = model.evaluate((ANCHORS, POSITIVES), batch_size=6, verbose=0)
    assert after < before * 0.5
    similarity = model.similarity(ANCHORS, POSITIVES)
    assert (similarity.argmax(1) == np.arange(6)).all()  # each anchor finds its positive


def test_scored_pairs_train_with_cosent_and_need_their_scores(tiny_checkpoint):
    model = keras_bert.BertTextEmbedder.from_checkpoint(tiny_checkpoint, sequence_length=32)
    model.compile(loss=keras_bert.CoSENTLoss(), learning_rate=2e-3)
    with pytest.raises(ValueError, match="^fit needs targets"):
        model.fit((ANCHORS, POSITIVES), verbose=0)
    # One list of texts failed mid-step with TensorFlow's "Must have at least one class".
    for loss in (keras_bert.CoSENTLoss(), "auto"):
        model.compile(loss=loss)
        with pytest.raises(ValueError, match=r"^fit takes texts that go together: x as a tuple "
                                             r"of lists .*; got one list of texts$"):  # fmt: skip
            model.fit(ANCHORS, verbose=0)
    model.compile(loss=keras_bert.CoSENTLoss(), learning_rate=2e-3)
    with pytest.raises(ValueError, match=r"^y must be finite numbers \(each pair's similarity"):
        model.fit((ANCHORS, POSITIVES), [1.0, np.nan, 0, 0, 0, 0], verbose=0)
    first, second = ANCHORS + ANCHORS, POSITIVES + POSITIVES[1:] + POSITIVES[:1]
    scores = np.array([5.0] * 6 + [0.0] * 6)
    before = model.evaluate((first, second), scores, batch_size=12, verbose=0)
    # 8 passes as one epoch: Keras's cost of an epoch was most of the time.
    model.fit((first * 8, second * 8), np.tile(scores, 8), batch_size=12, shuffle=False,
              verbose=0)  # fmt: skip
    assert model.evaluate((first, second), scores, batch_size=12, verbose=0) < before
    cosines = (model.predict((first, second), verbose=0).prod(axis=1)).sum(-1)
    assert cosines[:6].min() > cosines[6:].max()  # the scored order, learnt


def test_normalize_is_true_or_false(tiny_checkpoint):
    # "no" was taken as True: the vectors came out normalised.
    with pytest.raises(TypeError, match=r"^normalize must be True or False, got 'no'$"):
        keras_bert.BertTextEmbedder.from_checkpoint(tiny_checkpoint, normalize="no")


def test_texts_of_an_example_come_in_lists_of_one_length(embedder):
    with pytest.raises(ValueError, match=r"^the example's texts come in lists of \[2, 3\]"):
        embedder.preprocessor((["a", "b"], ["c", "d", "e"]))
    for call in (embedder.predict, embedder.fit):  # checked as every model's data
        with pytest.raises(ValueError, match=r"^the parts of x differ in length \(2, 3\)"):
            call((["a", "b"], ["c", "d", "e"]), verbose=0)


def test_saved_and_exported_embedders_answer_as_predict(embedder, tmp_path):
    texts = ANCHORS[:3] + [""]
    vectors = embedder.predict(texts, verbose=0)
    assert vectors.shape == (4, embedder.encoder.config.hidden_size)
    path = str(tmp_path / "embedder.keras")
    embedder.save(path)
    loaded = keras.saving.load_model(path)
    assert (loaded.pooling, loaded.normalize) == (embedder.pooling, embedder.normalize)
    np.testing.assert_allclose(loaded.predict(texts, verbose=0), vectors, atol=1e-6)
    exported = embedder.export(str(tmp_path / "exported"))
    served = tf.saved_model.load(exported)
    answer = served.signatures["serving_default"](sentence=tf.constant(texts))
    np.testing.assert_allclose(answer["embedding"].numpy(), vectors, atol=1e-5)
    ids = embedder.preprocessor(texts)
    by_ids = served.signatures["serve_token_ids"](**ids)
    np.testing.assert_allclose(by_ids["embedding"].numpy(), vectors, atol=1e-5)
    # As TF Serving runs it, in a process with only TensorFlow and tensorflow-text.
    body = ("texts = json.loads(sys.stdin.read())\n"
            "print(json.dumps(f(sentence=tf.constant(texts))['embedding'].numpy().tolist()))\n")
    np.testing.assert_allclose(served_in_clean_process(exported, body, json.dumps(texts)),
                               vectors, atol=1e-5)  # fmt: skip
    assert os.path.isfile(os.path.join(exported, "assets.extra", "tf_serving_warmup_requests"))
