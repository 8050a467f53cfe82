"""The SQuAD metrics on hand-worked examples (the official scripts' rules)."""

import pytest

from tasks import squad_metrics as m


def question(qid, *answers):
    return {"id": qid, "answers": [{"text": a, "answer_start": 0} for a in answers]}


DATA = [{"paragraphs": [{"context": "...", "qas": [
    question("q1", "the Eiffel Tower", "Eiffel Tower"),
    question("q2", "1889"),
    question("q3"),  # unanswerable (v2.0)
    question("q4", "Gustave Eiffel's company"),
]}]}]  # fmt: skip


def test_normalisation_drops_case_punctuation_articles_and_spaces():
    assert m.normalize_answer("  The  Eiffel-Tower, an icon! ") == "eiffeltower icon"


def test_exact_and_f1_take_the_best_gold_answer():
    assert m.exact_match("Eiffel Tower", "the Eiffel Tower") == 1.0
    # "tower in paris" vs "eiffel tower": overlap 1, precision 1/3, recall 1/2 -> F1 0.4
    assert m.f1("tower in Paris", "Eiffel Tower") == pytest.approx(0.4)
    assert m.f1("", "") == 1.0 and m.f1("x", "") == 0.0 and m.f1("", "x") == 0.0


def test_v1_missing_predictions_score_zero():
    scores = m.raw_scores(DATA[:1], {"q1": "Eiffel Tower", "q2": "in 1889"})
    assert scores["q1"] == (1.0, 1.0)
    assert scores["q2"] == (0.0, pytest.approx(2 / 3))  # "in 1889" vs "1889"
    assert scores["q4"] == (0.0, 0.0)  # no prediction


def test_v2_breakdowns_and_no_answer_threshold():
    predictions = {"q1": "Eiffel Tower", "q2": "1889", "q3": "", "q4": "Gustave Eiffel's"}
    result = m.evaluate(DATA, predictions)
    # exact: q1 1, q2 1, q3 1 (empty for unanswerable), q4 0 -> 75. F1 of q4: "gustave
    # eiffels" against "gustave eiffels company": precision 1, recall 2/3 -> 0.8.
    assert result["exact"] == pytest.approx(75.0)
    assert result["f1"] == pytest.approx(100 * (3 + 0.8) / 4)
    assert (result["HasAns_total"], result["NoAns_total"]) == (3, 1)
    assert result["NoAns_exact"] == 100.0
    # With null odds, q4 (odds 0.9 > 0.5) is answered "no answer": wrong, as q4 has an answer.
    odds = {"q1": 0.1, "q2": 0.2, "q3": 0.95, "q4": 0.9}
    thresholded = m.evaluate(DATA, {**predictions, "q3": "Paris"}, odds, threshold=0.5)
    assert thresholded["exact"] == pytest.approx(75.0)  # q1, q2, q3 (no answer) right
    # Best threshold: answering q1, q2 and q4 but not q3 gives (1 + 1 + 1 + 0) / 4 exact.
    assert thresholded["best_exact"] == pytest.approx(75.0)
    assert thresholded["best_exact_thresh"] == pytest.approx(0.2)
    assert thresholded["best_f1"] == pytest.approx(100 * (1 + 1 + 1 + 0.8) / 4)
    assert thresholded["best_f1_thresh"] == pytest.approx(0.9)
