"""BertReranker: (query, candidate) pairs scored together, candidates ranked by the score, in
the library and in its export."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import served_in_clean_process

import keras_bert

QUERIES = ["where did the cat sit", "who ran in the park", "what fell on monday",
           "when will it rain"]  # fmt: skip
ANSWERS = ["the cat sat on the mat", "a dog ran in the park", "stocks fell on monday",
           "rain is expected tomorrow"]  # fmt: skip


RELEVANT = [1.0, 0.0, 1.0, 0.0]  # the tiny random encoder learns what a candidate says alone


@pytest.fixture(scope="module")
def trained(two_block_checkpoint):  # one block learns too little here
    """A re-ranker trained on every (query, answer) pair, the first and third answers relevant
    to every query."""
    keras.utils.set_random_seed(3)
    model = keras_bert.BertReranker.from_checkpoint(two_block_checkpoint, sequence_length=32,
                                                    dropout=0.0)  # fmt: skip
    x = ([q for q in QUERIES for _ in ANSWERS], ANSWERS * len(QUERIES))
    y = RELEVANT * len(QUERIES)
    model.compile(learning_rate=1e-2)
    before = model.evaluate(x, y, verbose=0)
    # 30 passes as one epoch of 30 batches: Keras's cost of an epoch was most of the time.
    model.fit((x[0] * 30, x[1] * 30), y * 30, batch_size=16, shuffle=False, verbose=0)
    assert model.evaluate(x, y, verbose=0) < 0.5 * before
    return model


def test_each_query_ranks_the_relevant_answers_first(trained):
    order = (2, 0, 3, 1)
    shuffled = [ANSWERS[i] for i in order]
    ranked = trained.rank(QUERIES, [shuffled] * 4, batch_size=8)
    assert ranked["scores"].shape == (4, 4) and ranked["order"].dtype == np.int32
    for row in ranked["order"]:
        assert sorted(order[i] for i in row[:2]) == [0, 2]
    # The order sorts the scores, and a score is sigmoid of the pair's logit.
    np.testing.assert_array_equal(ranked["order"], np.argsort(-ranked["scores"], axis=1,
                                                              kind="stable"))  # fmt: skip
    logits = trained.predict(([QUERIES[1]] * 4, shuffled), verbose=0)
    np.testing.assert_allclose(ranked["scores"][1], 1 / (1 + np.exp(-logits[:, 0])), atol=1e-6)


def test_saved_and_exported_rerankers_rank_as_the_model(trained, tmp_path):
    candidates = [ANSWERS[::-1], ANSWERS]
    expected = trained.rank(QUERIES[:2], candidates)
    path = str(tmp_path / "reranker.keras")
    trained.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, keras_bert.BertReranker)
    np.testing.assert_allclose(loaded.rank(QUERIES[:2], candidates)["scores"],
                               expected["scores"], atol=1e-6)  # fmt: skip
    exported = trained.export(str(tmp_path / "exported"))
    served = tf.saved_model.load(exported).signatures["serving_default"]
    answer = served(query=tf.constant(QUERIES[:2]), candidates=tf.constant(candidates))
    np.testing.assert_allclose(answer["scores"].numpy(), expected["scores"], atol=1e-5)
    np.testing.assert_array_equal(answer["order"].numpy(), expected["order"])
    body = ("request = json.loads(sys.stdin.read())\n"
            "out = f(query=tf.constant(request[0]), candidates=tf.constant(request[1]))\n"
            "print(json.dumps(out['order'].numpy().tolist()))\n")  # fmt: skip
    assert served_in_clean_process(exported, body, json.dumps([QUERIES[:2], candidates])) == \
        expected["order"].tolist()


def test_bad_relevances_and_candidate_lists_are_refused_in_one_line(trained, tiny_checkpoint):
    with pytest.raises(ValueError, match=r"^y must be relevances between 0 and 1"):
        trained.fit((QUERIES, ANSWERS), [0, 1, 2, 0], verbose=0)
    with pytest.raises(ValueError, match=r"^the candidate lists hold \[1, 2\] strings"):
        trained.rank(QUERIES[:2], [["a"], ["b", "c"]])
    with pytest.raises(ValueError, match=r"^give one list of candidates a query: 2 queries, 1"):
        trained.rank(QUERIES[:2], [["a"]])
    # They failed with "len() of unsized object" from inside rank.
    with pytest.raises(ValueError, match=r"^queries must be a list of strings \(\[query\] for "
                                         r"one\), got a string$"):  # fmt: skip
        trained.rank(QUERIES[0], [])
    with pytest.raises(ValueError, match=r"^candidates must be a list of lists of strings"):
        trained.rank(QUERIES[:1], ["a", "b"])
    single = keras_bert.BertPreprocessor.from_tokenizer(trained.preprocessor.tokenizer, 32)
    with pytest.raises(ValueError, match=r"^BertReranker reads \(query, candidate\) pairs"):
        keras_bert.BertReranker(trained.encoder, single)
