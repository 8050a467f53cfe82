"""Reading SQuAD JSON (v1.1 and v2.0): every part of the file checked, a fault naming the file,
the article and the question id; then its questions as a Split of (question, passage) texts,
with each training answer's character span."""

import json

import numpy as np
from absl import logging

from keras_bert.text import textfiles
from tasks import common


def read_squad(path):
    """Returns the `data` list of a SQuAD JSON file (articles, paragraphs, questions), each part
    checked: a fault names the file, the article and the question id."""
    text = textfiles.read_text(path, "SQuAD JSON file")
    if not text.strip():
        raise ValueError(f"{path} is empty; a SQuAD file is a JSON object with a 'data' list")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict) or "data" not in data:
        raise ValueError(f"{path} is not SQuAD JSON: it has no top-level 'data' list")
    data = data["data"]
    _expect(data, list, f"{path}: 'data'", "a list of articles")
    for number, article in enumerate(data, start=1):
        where = f"{path}: article {number}"
        _expect(article, dict, where, "a JSON object")
        where += f" ({article.get('title')!r})"
        _expect(article.get("paragraphs"), list, f"{where}: 'paragraphs'", "a list")
        for paragraph in article["paragraphs"]:
            _expect(paragraph, dict, f"{where}: a paragraph", "a JSON object")
            _expect(paragraph.get("context"), str, f"{where}: a paragraph's 'context'", "a string")
            _expect(paragraph.get("qas"), list, f"{where}: a paragraph's 'qas'", "a list")
            for question in paragraph["qas"]:
                _check_question(question, where)
    return data


def _check_question(question, where):
    _expect(question, dict, f"{where}: a question", "a JSON object")
    if "id" not in question:
        raise ValueError(f"{where}: a question has no 'id'")
    if isinstance(question["id"], bool) or not isinstance(question["id"], (str, int)):
        raise ValueError(f"{where}: a question's 'id' is {_describe(question['id'])} "
                         f"({question['id']!r}), not a string")  # fmt: skip
    question["id"] = str(question["id"])
    where = f"{where}: question {question['id']}"
    _expect(question.get("question"), str, f"{where}: 'question'", "a string")
    impossible = question.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise ValueError(f"{where}: 'is_impossible' is {_describe(impossible)} ({impossible!r}), "
                         "not true/false")  # fmt: skip
    for key in ("answers", "plausible_answers"):  # SQuAD 2.0 gives unanswerable ones the latter
        answers = question.get(key, [])
        _expect(answers, list, f"{where}: '{key}'", "a list")
        for answer in answers:
            _check_answer(answer, f"{where}: an answer" if key == "answers" else
                          f"{where}: a plausible answer")  # fmt: skip


def _check_answer(answer, where):
    _expect(answer, dict, where, "a JSON object with 'text' and 'answer_start'")
    _expect(answer.get("text"), str, f"{where}'s 'text'", "a string")
    start = answer.get("answer_start")
    if isinstance(start, bool) or not isinstance(start, int):
        raise ValueError(f"{where}'s answer_start {start!r} is not a whole number (the character "
                         "offset of the answer in its context)")  # fmt: skip
    if start < 0:
        raise ValueError(f"{where}'s answer_start {start} is negative: it is the character "
                         "offset of the answer in its context, counted from 0")  # fmt: skip


def _expect(value, kind, where, wanted):
    if not isinstance(value, kind):
        raise ValueError(f"{where} is {_describe(value)}, not {wanted}")


def _describe(value):
    if value is None:
        return "missing"
    names = {dict: "a JSON object", list: "a list", str: "a string", bool: "true/false"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else "invalid")


def questions_of(data, path, training=False, version_2=False):
    """A Split of questions: texts `question` and `context`; for training, labels int64 (n, 2),
    each answer's character span [start, end) in its passage, (-1, -1) for no answer."""
    texts, spans, ids = {"question": [], "context": []}, [], []
    skipped = {"answer_start does not match the answer text": 0, "empty passage": 0,
               "empty question": 0}  # fmt: skip
    seen = set()
    for article in data:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for question in paragraph["qas"]:
                if training:
                    span = _answer_span(question, context, path, version_2)
                    reason = ("empty passage" if not context.strip() else
                              "empty question" if not question["question"].strip() else
                              None if span else "answer_start does not match the answer text")
                    if reason:
                        skipped[reason] += 1
                        logging.warning("%s: skipping question %s: %s", path, question["id"],
                                        reason)  # fmt: skip
                        continue
                    spans.append(span)
                if not training and question["id"] in seen:
                    raise ValueError(f"{path}: question id {question['id']!r} appears more "
                                     "than once; predictions.json answers by id, so each id "
                                     "must be unique")  # fmt: skip
                seen.add(question["id"])
                texts["question"].append(question["question"])
                texts["context"].append(context)
                ids.append(question["id"])
    for reason, count in skipped.items():
        if count:
            logging.warning("%s: skipped %d questions (%s)", path, count, reason)
    empty_questions = 0 if training else sum(not q.strip() for q in texts["question"])
    if empty_questions:
        logging.warning("%s: %d questions are empty; each is answered from its passage "
                        "alone, as the export answers an empty question", path,
                        empty_questions)  # fmt: skip
    if not ids:
        raise ValueError(f"{path} has no usable questions")
    labels = np.array(spans, "int64").reshape(-1, 2) if training else None
    return common.Split(texts, labels, ids)


def _answer_span(question, context, path, version_2):
    """(start, end) of the first answer, (-1, -1) for none, or None if it is misplaced."""
    if version_2 and question.get("is_impossible", False):
        return (-1, -1)
    answers = question.get("answers") or []
    if not answers:
        raise ValueError(f"{path}: question {question['id']} has no answer (training needs "
                         "one; pass --version_2_with_negative for SQuAD 2.0)")  # fmt: skip
    text, start = answers[0]["text"], answers[0]["answer_start"]
    if context[start : start + len(text)] != text or not text.strip():
        return None
    return (start, start + len(text))
