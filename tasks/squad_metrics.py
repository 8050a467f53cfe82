"""SQuAD evaluation as the official v1.1 and v2.0 scripts define it.

Answers and predictions are lower-cased, stripped of punctuation and of the articles a, an and
the, and their white space collapsed; exact match and token F1 take the best over all gold
answers. v1.1 scores a missing prediction 0. v2.0 scores an unanswerable question 1 only for an
empty prediction, reports HasAns/NoAns breakdowns, and finds the best no-answer threshold.
"""

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text):
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction, gold):
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction, gold):
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:  # unanswerable: 1 only if both are empty
        return float(predicted == expected)
    common = collections.Counter(predicted) & collections.Counter(expected)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def gold_answers(question):
    answers = [a["text"] for a in question["answers"] if normalize_answer(a["text"])]
    return answers or [""]  # v2.0: an unanswerable question's only answer is the empty string


def raw_scores(dataset, predictions):
    """{question id: (exact, f1)} over every question in a SQuAD `data` list."""
    scores = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for question in paragraph["qas"]:
                golds = gold_answers(question)
                prediction = predictions.get(question["id"])
                if prediction is None:
                    scores[question["id"]] = (0.0, 0.0)
                    continue
                scores[question["id"]] = (max(exact_match(prediction, g) for g in golds),
                                          max(f1(prediction, g) for g in golds))  # fmt: skip
    return scores


def _mean(values):
    return 100.0 * sum(values) / len(values) if values else 0.0


def evaluate(dataset, predictions, null_odds=None, threshold=1.0):
    """The official metrics (percentages). With `null_odds` (v2.0), predictions whose odds
    exceed `threshold` count as "no answer", and the best threshold is searched too."""
    scores = raw_scores(dataset, predictions)
    has_answer = {q["id"]: bool(gold_answers(q)[0]) for a in dataset for p in a["paragraphs"]
                  for q in p["qas"]}  # fmt: skip
    if null_odds is not None:
        scores = {qid: (float(not has_answer[qid]),) * 2 if null_odds.get(qid, 0) > threshold
                  else score for qid, score in scores.items()}  # fmt: skip
    result = {"exact": _mean([s[0] for s in scores.values()]),
              "f1": _mean([s[1] for s in scores.values()]), "total": len(scores)}  # fmt: skip
    answerable = [qid for qid in scores if has_answer[qid]]
    unanswerable = [qid for qid in scores if not has_answer[qid]]
    for name, ids in (("HasAns", answerable), ("NoAns", unanswerable)):
        if ids:
            result[f"{name}_exact"] = _mean([scores[q][0] for q in ids])
            result[f"{name}_f1"] = _mean([scores[q][1] for q in ids])
            result[f"{name}_total"] = len(ids)
    if null_odds is not None:
        raw = raw_scores(dataset, predictions)
        for index, key in ((0, "exact"), (1, "f1")):
            best, best_threshold = _best_threshold(raw, null_odds, has_answer, predictions, index)
            result[f"best_{key}"], result[f"best_{key}_thresh"] = best, best_threshold
    return result


def _best_threshold(raw, null_odds, has_answer, predictions, index):
    """The official search: start from predicting "no answer" everywhere, then, in order of
    rising null odds, switch each question to its prediction and keep the best score."""
    score = current = sum(not has_answer[q] for q in raw)
    best_threshold = 0.0
    for qid in sorted(raw, key=lambda q: null_odds.get(q, 0.0)):
        if has_answer[qid]:
            current += raw[qid][index]
        elif predictions.get(qid):
            current -= 1
        if current > score:
            score, best_threshold = current, null_odds.get(qid, 0.0)
    return 100.0 * score / len(raw), best_threshold
