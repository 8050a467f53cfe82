import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, run_with_flags, served_in_clean_process
from run_squad_reference import reference_max_context, reference_windows

from exports import export
from keras_bert import BertQuestionAnswerer
from keras_bert.models.spans import SpanWindows
from keras_bert.text.tokenizer import BertTokenizer
from tasks import squad, squad_data, squad_metrics

SQUAD = os.path.join(DATA, "squad")


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))


PASSAGES = [
    "The Normans were the people who in the 10th and 11th centuries gave their name to "
    "Normandy, a region in France. They were descended from Norse raiders and pirates from "
    "Denmark, Iceland and Norway who, under their leader Rollo, agreed to swear fealty to "
    "King Charles III of West Francia.",
    "Short passage.",
    "",
    "word " * 57,
]
QUESTIONS = ["Who were the Normans?", "What? " * 20, "Empty?", "How many words are there here?"]


@pytest.mark.parametrize("stride", [5, 8, 40])
def test_windows_follow_the_original_doc_spans_and_max_context(tokenizer, stride):
    spans = SpanWindows.from_tokenizer(tokenizer, 32, max_query_length=9, doc_stride=stride)
    windows = {k: v.numpy() for k, v in
               spans.windows(tf.constant(QUESTIONS), tf.constant(PASSAGES)).items()}  # fmt: skip
    row = 0
    for example, (question, passage) in enumerate(zip(QUESTIONS, PASSAGES)):
        question_ids = tokenizer(tf.constant([question]))[0].numpy()[:9].tolist()
        doc_ids, starts, ends = (t[0].numpy() for t in tokenizer.tokenize_with_offsets([passage]))
        room = 32 - 3 - len(question_ids)
        expected_spans = reference_windows(len(doc_ids), room, stride)
        for index, (start, length) in enumerate(expected_spans):
            assert windows["example"][row] == example
            expected = (
                [tokenizer.cls_id]
                + question_ids
                + [tokenizer.sep_id]
                + (doc_ids[start : start + length].tolist() + [tokenizer.sep_id])
            )
            ids = windows["input_word_ids"][row]
            assert ids[: len(expected)].tolist() == expected
            assert not ids[len(expected) :].any()
            offset = len(question_ids) + 2
            passage_positions = slice(offset, offset + length)
            assert windows["char_starts"][row][passage_positions].tolist() == (
                starts[start : start + length].tolist()
            )
            assert windows["char_ends"][row][passage_positions].tolist() == (
                ends[start : start + length].tolist()
            )
            assert (windows["char_starts"][row][:offset] == -1).all()
            assert windows["max_context"][row][passage_positions].tolist() == [
                reference_max_context(expected_spans, index, start + j) for j in range(length)
            ]
            assert not windows["max_context"][row][:offset].any()
            row += 1
    assert row == len(windows["example"])


def test_answer_positions_point_at_the_answer_or_at_cls(tokenizer):
    spans = SpanWindows.from_tokenizer(tokenizer, 24, max_query_length=6, doc_stride=6)
    passage = PASSAGES[0]
    answer = "Denmark, Iceland and Norway"
    start = passage.index(answer)
    windows = spans.windows(
        tf.constant(["Where from?"] * 2),
        tf.constant([passage] * 2),
        tf.constant([start, -1]),
        tf.constant([start + len(answer), -1]),
    )
    windows = {k: v.numpy() for k, v in windows.items()}
    inside = 0
    for row in range(len(windows["example"])):
        first, last = windows["start_positions"][row], windows["end_positions"][row]
        if windows["example"][row] == 1 or first == 0:  # no answer, or not in this window
            assert first == last == 0
            continue
        inside += 1
        span = passage[windows["char_starts"][row][first] : windows["char_ends"][row][last]]
        assert span == answer
    assert inside >= 2  # the answer lies in several overlapping windows


def test_decode_picks_the_best_allowed_span(tokenizer):
    spans = SpanWindows.from_tokenizer(tokenizer, 40, max_query_length=8, doc_stride=16,
                        n_best_size=5, max_answer_length=2)  # fmt: skip
    passage = "red blue green black white brown pink gray"
    windows = spans.windows(tf.constant(["which?"]), tf.constant([passage]))
    seq = windows["input_word_ids"].shape[1]
    start, end = np.full((1, seq), -100.0, "float32"), np.full((1, seq), -100.0, "float32")
    word = lambda i: 4 + i  # noqa: E731  ([CLS] which ? [SEP] come first)
    start[0, word(1)], end[0, word(7)] = 9.0, 9.0  # blue .. gray: 7 tokens, too long
    start[0, word(5)], end[0, word(6)] = 5.0, 5.0  # brown pink: 10, the best allowed
    start[0, 0], end[0, 0] = 1.0, 2.0  # [CLS]
    best = {k: v.numpy() for k, v in spans.decode(windows, start, end).items()}
    s, e = best["char_starts"][0, 0], best["char_ends"][0, 0]
    assert passage[s:e] == "brown pink"
    assert best["scores"][0, 0] == 10.0 and best["scores"][0, 1] == -91.0
    assert best["null_score"][0] == pytest.approx(3.0)


def test_decoding_settings_that_would_answer_nothing_are_refused(tokenizer, tiny_checkpoint):
    for name in ("max_query_length", "doc_stride", "n_best_size", "max_answer_length",
                 "max_windows"):  # fmt: skip
        with pytest.raises(ValueError, match=f"^{name} must be at least 1, got 0$"):
            SpanWindows.from_tokenizer(tokenizer, 40, **{"max_query_length": 8, name: 0})
    with pytest.raises(ValueError, match="^null_score_diff_threshold must be a finite number"):
        BertQuestionAnswerer.from_checkpoint(tiny_checkpoint, sequence_length=32,
                                             max_query_length=8, doc_stride=8,
                                             null_score_diff_threshold=float("nan"))  # fmt: skip


def test_decode_skips_starts_outside_their_window_of_most_context(tokenizer):
    spans = SpanWindows.from_tokenizer(tokenizer, 12, max_query_length=2, doc_stride=3,
                        n_best_size=3, max_answer_length=1)  # fmt: skip
    passage = "one two three four five six seven eight nine ten"
    windows = {k: v.numpy() for k, v in
               spans.windows(tf.constant(["q"]), tf.constant([passage])).items()}  # fmt: skip
    assert len(windows["example"]) > 1
    start = np.zeros(windows["input_word_ids"].shape, "float32")
    end = np.zeros_like(start)
    # In window 0, favour its last passage token, which has more context in window 1.
    assert len(windows["example"]) == 2
    last = int(np.argmax(windows["char_starts"][0]))
    assert not windows["max_context"][0][last]
    start[0, last] = end[0, last] = 50.0
    start[:, 0] = [4.0, -2.0]
    best = spans.decode(windows, start, end)
    assert best["scores"].numpy()[0, 0] < 50.0
    assert best["null_score"].numpy()[0] == pytest.approx(-2.0)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return str(path)


def test_misplaced_answers_and_empty_passages_are_skipped_and_counted(tmp_path, caplog):
    qa = lambda i, start, text: {"id": f"q{i}", "question": "what?",  # noqa: E731
                                 "answers": [{"text": text, "answer_start": start}]}  # fmt: skip
    data = [{"title": "t", "paragraphs": [
        {"context": "The cat sat.", "qas": [qa(1, 4, "cat"), qa(2, 5, "cat"), qa(3, 0, "The")]},
        {"context": "  ", "qas": [qa(4, 0, " ")]},
        {"context": "A dog ran.", "qas": [dict(qa(5, 2, "dog"), question=" ")]}]}]  # fmt: skip
    path = write_json(tmp_path / "train.json", {"data": data})
    with caplog.at_level(logging.WARNING):
        split = squad_data.questions_of(squad_data.read_squad(path), path, training=True)
    assert split.ids == ["q1", "q3"]
    assert split.labels.tolist() == [[4, 7], [0, 3]]
    assert "skipped 1 questions (answer_start does not match the answer text)" in caplog.text
    assert "skipped 1 questions (empty passage)" in caplog.text
    assert "skipped 1 questions (empty question)" in caplog.text
    assert "questions are empty" not in caplog.text
    # At prediction every question is kept; the empty passage gets the empty answer, the empty
    # question an answer from its passage alone, and is counted.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ids = squad_data.questions_of(squad_data.read_squad(path), path).ids
    assert ids == ["q1", "q2", "q3", "q4", "q5"]
    assert "1 questions are empty; each is answered from its passage alone" in caplog.text
    # predictions.json answers by id: a repeated id would score one answer twice.
    data[0]["paragraphs"][1]["qas"].append(qa(1, 0, "x"))
    path = write_json(tmp_path / "dev.json", {"data": data})
    with pytest.raises(ValueError, match=r"dev\.json: question id 'q1' appears more than once"):
        squad_data.questions_of(squad_data.read_squad(path), path)
    training = squad_data.questions_of(squad_data.read_squad(path), path, training=True)
    assert training.ids == ["q1", "q3"]


def test_bad_squad_files_are_refused_with_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        squad_data.read_squad(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [\n{"title": }]}')
    with pytest.raises(ValueError, match=r"bad.json:2: not valid JSON"):
        squad_data.read_squad(str(bad))
    with pytest.raises(ValueError, match="no top-level 'data'"):
        squad_data.read_squad(write_json(tmp_path / "other.json", [1, 2]))
    no_answer = {"data": [{"paragraphs": [{"context": "x", "qas": [
        {"id": "q", "question": "?", "answers": []}]}]}]}  # fmt: skip
    path = write_json(tmp_path / "v1.json", no_answer)
    with pytest.raises(ValueError, match="question q has no answer"):
        squad_data.questions_of(squad_data.read_squad(path), path, training=True)
    (tmp_path / "latin1.json").write_bytes('{"data": ["café"]}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.json:1: byte 15 of the line \(0xe9\) is not valid"):
        squad_data.read_squad(str(tmp_path / "latin1.json"))


SMALL = dict(max_seq_length=64, max_query_length=16, doc_stride=24, num_train_epochs=1.0,
             train_batch_size=16, eval_batch_size=8, learning_rate=1e-3)  # fmt: skip


@pytest.fixture(scope="module")
def squad_v2_run(tmp_path_factory, tiny_checkpoint):
    run_dir = str(tmp_path_factory.mktemp("squad_v2"))
    scores = run_with_flags(squad.run, train_file=os.path.join(SQUAD, "train-v2.0.json"),
                            predict_file=os.path.join(SQUAD, "dev-v2.0.json"),
                            version_2_with_negative=True, output_dir=run_dir,
                            init_checkpoint=tiny_checkpoint, **SMALL)  # fmt: skip
    return run_dir, scores


def read(run_dir, name):
    with open(os.path.join(run_dir, name), encoding="utf-8") as f:
        return json.load(f)


def test_squad_v2_writes_prediction_files_that_reproduce_its_scores(squad_v2_run):
    run_dir, scores = squad_v2_run
    predictions, nbest = read(run_dir, "predictions.json"), read(run_dir, "nbest_predictions.json")
    null_odds = read(run_dir, "null_odds.json")
    data = squad_data.read_squad(os.path.join(SQUAD, "dev-v2.0.json"))
    assert (
        set(predictions)
        == set(nbest)
        == set(null_odds)
        == {q["id"] for a in data for p in a["paragraphs"] for q in p["qas"]}
    )
    assert squad_metrics.evaluate(data, predictions, null_odds, 0.0) == scores
    assert scores["total"] == 28 and scores["NoAns_total"] == 14
    for qid, entries in nbest.items():
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0, abs=1e-6)
        assert [e["score"] for e in entries] == sorted((e["score"] for e in entries), reverse=True)
        assert len({e["text"] for e in entries}) == len(entries)
        assert (predictions[qid] == "") == (null_odds[qid] > 0.0)
        if predictions[qid]:
            best = next(e for e in entries if e["text"])
            assert predictions[qid] == best["text"]
    assert {"exact", "f1", "best_f1", "best_f1_thresh"} <= set(read(run_dir, "metrics.json")[-1]
                                                              ["dev"])  # fmt: skip


def test_nodo_train_predicts_with_the_runs_own_settings(squad_v2_run, tmp_path):
    """--nodo_train uses the settings recorded in model.keras, whatever the flags' defaults;
    a flag the command line gives another value is refused, not ignored."""
    from absl import app, flags
    from absl.testing import flagsaver

    run_dir, scores = squad_v2_run
    flag_values = dict(predict_file=os.path.join(SQUAD, "dev-v2.0.json"), output_dir=run_dir,
                       do_train=False, version_2_with_negative=False, max_seq_length=40,
                       doc_stride=5, n_best_size=3, **{k: v for k, v in SMALL.items() if k not in (
                           "max_seq_length", "doc_stride")})  # fmt: skip
    assert run_with_flags(squad.run, **flag_values) == scores
    with flagsaver.flagsaver():
        flags.FLAGS["n_best_size"].parse("3")  # as the command line gives it
        with pytest.raises(app.UsageError, match=r"--nodo_train uses the run in .* with other "
                           r"settings than given \(--n_best_size=\d+ there, 3 now\)"):  # fmt: skip
            run_with_flags(squad.run, **flag_values)


def test_squad_export_serves_the_python_answers(squad_v2_run, tmp_path):
    run_dir, _ = squad_v2_run
    path = export.export_run(run_dir, str(tmp_path / "exported"))
    data = squad_data.read_squad(os.path.join(SQUAD, "dev-v2.0.json"))
    questions = [(q["id"], q["question"], p["context"]) for a in data for p in a["paragraphs"]
                 for q in p["qas"]]  # fmt: skip
    body = (
        "qs = json.loads(sys.stdin.read())\n"
        "out = f(question=tf.constant([q[1] for q in qs]),\n"
        "        context=tf.constant([q[2] for q in qs]))\n"
        "empty = f(question=tf.constant([], tf.string), context=tf.constant([], tf.string))\n"
        "assert all(v.shape[0] == 0 for v in empty.values()), empty\n"
        "print(json.dumps({k: [x.decode() if isinstance(x, bytes) else x.item() "
        "for x in v.numpy()] for k, v in out.items()}))\n"
    )
    served = served_in_clean_process(path, body, json.dumps(questions))
    assert not any(served["passage_cut"])
    predictions = read(run_dir, "predictions.json")
    assert served["answer"] == [predictions[q[0]] for q in questions]
    for (_, _, context), answer, start, end, no_answer in zip(
        questions, served["answer"], served["start"], served["end"], served["no_answer"]
    ):
        assert no_answer == (answer == "")
        assert context[start:end] == answer if start >= 0 else answer == ""


def test_a_finished_squad_run_starts_another_with_its_encoder_and_span_head(squad_v2_run,
                                                                            tmp_path):  # fmt: skip
    """--init_checkpoint (from_checkpoint) of a run's folder: SQuAD v2.0 from a v1.1 run, say."""
    import keras

    from keras_bert import BertClassifier, BertQuestionAnswerer, checkpoints

    run_dir, _ = squad_v2_run
    source = keras.saving.load_model(os.path.join(run_dir, "model.keras"))
    assert checkpoints.read_config(run_dir) == source.encoder.config
    model = BertQuestionAnswerer.from_checkpoint(run_dir, sequence_length=48, max_query_length=12,
                                                 doc_stride=16, version_2_with_negative=False)  # fmt: skip
    assert model.preprocessor.sequence_length == 48  # the windows are this call's
    assert model.preprocessor.tokenizer.vocabulary == source.preprocessor.tokenizer.vocabulary
    for ours, theirs in zip(model.encoder.weights + model.head.weights,
                            source.encoder.weights + source.head.weights):  # fmt: skip
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # Another kind of model takes the fine-tuned encoder with a new head.
    classifier = BertClassifier.from_checkpoint(run_dir, num_classes=3, sequence_length=32)
    np.testing.assert_array_equal(classifier.encoder.weights[3].numpy(),
                                  source.encoder.weights[3].numpy())  # fmt: skip
    with pytest.raises(ValueError, match="fine-tuned task model"):
        checkpoints.load_checkpoint(run_dir)
    # The binary: a v2.0 run from the finished run, at a learning rate too small to move the
    # weights, ends with the run's span head (a new head would be a random one).
    next_dir = str(tmp_path / "next")
    run_with_flags(squad.run, train_file=os.path.join(SQUAD, "train-v2.0.json"),
                   predict_file=os.path.join(SQUAD, "dev-v2.0.json"), version_2_with_negative=True,
                   output_dir=next_dir, init_checkpoint=run_dir, max_train_examples=8,
                   **{**SMALL, "learning_rate": 1e-12})  # fmt: skip
    trained = keras.saving.load_model(os.path.join(next_dir, "model.keras"))
    for ours, theirs in zip(trained.head.weights, source.head.weights):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-6)


def test_squad_binary_learns_its_training_questions(tmp_path, tiny_checkpoint):
    # 15 questions trained on (eight copies, so that epochs are few) and scored on: a 2-layer
    # random encoder memorises their spans (measured F1 88.6), which it cannot with its labels
    # shuffled or its head cut off from the loss.
    dev = os.path.join(SQUAD, "dev-v1.1.json")
    data = squad_data.read_squad(dev)
    (tmp_path / "train.json").write_text(json.dumps({"version": "1.1", "data": data * 8}),
                                         encoding="utf-8")  # fmt: skip
    scores = run_with_flags(squad.run, train_file=str(tmp_path / "train.json"), predict_file=dev,
                            output_dir=str(tmp_path / "run"), init_checkpoint=tiny_checkpoint,
                            **{**SMALL, "num_train_epochs": 3.0, "learning_rate": 1e-2})  # fmt: skip
    assert scores["total"] == 15 and scores["f1"] > 60
