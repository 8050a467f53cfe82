import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, run_with_flags, served_in_clean_process

from exports import export
from keras_bert.models.tagging import IGNORE, WordTagger
from keras_bert.text.tokenizer import BertTokenizer
from tasks import ner

CONLL = os.path.join(DATA, "conll")
TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))


def test_iob1_and_iob2_files_read_as_the_same_iob2_tags():
    iob1 = ner.read_conll(os.path.join(CONLL, "eng.train"))
    iob2 = ner.read_conll(os.path.join(CONLL, "train.txt"))
    count = len(iob1)
    assert count == 40
    assert iob1.texts["sentence"] == iob2.texts["sentence"][:count]
    assert iob1.labels == iob2.labels[:count]
    assert iob1.texts["sentence"][0] == "EU rejects German call to boycott British lamb ."
    assert iob1.labels[0] == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]
    assert not any(s.startswith("-DOCSTART-") for s in iob1.texts["sentence"])


def test_to_iob2_starts_entities_where_iob1_continues_nothing():
    assert ner.to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == [
        "B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]  # fmt: skip


def test_bad_conll_files_are_refused_with_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.txt"):
        ner.read_conll(str(tmp_path / "nothing.txt"))
    cases = {
        "columns.txt": ("EU NNP B-ORG\nrejects O\n", r"columns.txt:2: 2 columns"),
        "scheme.txt": ("EU NNP S-ORG\n", r"scheme.txt:1: tag 'S-ORG' is neither IOB1 nor IOB2"),
        "bare.txt": ("EU NNP ORG\n", r"bare.txt:1: tag 'ORG'"),
        "empty.txt": ("-DOCSTART- -X- O\n\n", "has no sentences"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            ner.read_conll(str(tmp_path / name))
    (tmp_path / "latin1.txt").write_bytes("EU O\nCafé O\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt:2: byte 4 of the line \(0xe9\) is not valid utf-8"):
        ner.read_conll(str(tmp_path / "latin1.txt"))


def test_entity_scores_count_exact_span_and_type_only():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-MISC"]]
    predicted = [
        ["B-PER", "I-PER", "O", "B-ORG"],  # PER right; LOC predicted as ORG
        ["B-ORG", "O", "B-MISC", "O"],  # ORG right; MISC span too short
    ]
    scores = ner.conll_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(50.0)  # 2 of 4 predicted
    assert scores["recall"] == pytest.approx(50.0)  # 2 of 4 gold
    assert scores["f1"] == pytest.approx(50.0)
    assert scores["PER_f1"] == 100.0 and scores["LOC_recall"] == 0.0
    assert scores["ORG_precision"] == pytest.approx(50.0) and scores["ORG_recall"] == 100.0
    assert scores["MISC_f1"] == 0.0
    # An I- after O starts an entity, as the CoNLL script reads it.
    assert ner.entities(["O", "I-PER", "I-PER", "I-LOC"]) == {(1, 2, "PER"), (3, 3, "LOC")}


def test_labels_go_on_the_first_piece_of_each_word(tokenizer):
    tagger = WordTagger.from_tokenizer(tokenizer, 10, tags=TAGS)
    sentence = "Blackburn visits Strasbourg-Ouest today again and again"
    tags = tf.ragged.constant([[2, 0, 1, 0, 0, 0, 0]])
    inputs, labels = tagger.encode(tf.constant([sentence]), tags)
    pieces = [tokenizer.vocabulary[i] for i in inputs["input_word_ids"][0].numpy()]
    assert pieces[:5] == ["[CLS]", "blackburn", "visits", "strasbourg", "-"]
    assert labels[0].numpy().tolist() == [IGNORE, 2, 0, 1, IGNORE, IGNORE, IGNORE, 0, 0, IGNORE]
    assert len(pieces) == 10 and pieces[-1] == "[SEP]"  # cut at max_seq_length


class FixedTags(keras.Model):
    """Tags every word piece with the tag id at its position of a table (ids mod 5)."""

    def call(self, inputs, training=None):
        return tf.one_hot(inputs["input_word_ids"] % len(TAGS), len(TAGS))


def test_in_graph_entities_match_the_conll_reading_of_the_word_tags(tokenizer):
    tagger = WordTagger.from_tokenizer(tokenizer, 24, tags=TAGS)
    rng = np.random.default_rng(0)
    words = ["Paris", "New", "York", "Lyon-Sud", "Anne", "Marie", "et", "le", "Rhône", "!"]
    sentences = [" ".join(rng.choice(words, size=rng.integers(0, 14))) for _ in range(40)]
    sentences[0] = "  spaced \t out  words "
    result = tagger.tag(FixedTags(), tf.constant(sentences))
    for i, sentence in enumerate(sentences):
        word_tags = [TAGS[t] for t in result["word_tags"][i].numpy()]
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", sentence)]
        assert len(word_tags) == len(spans)
        expected = sorted((spans[a][0], spans[b][1], kind)
                          for a, b, kind in ner.entities(word_tags))  # fmt: skip
        count = result["num_entities"][i].numpy()
        kinds = [t.decode() for t in result["entity_type"][i].numpy()[:count]]
        got = sorted(zip(result["entity_start"][i].numpy()[:count].tolist(),
                         result["entity_end"][i].numpy()[:count].tolist(), kinds))  # fmt: skip
        assert got == expected
        texts = [t.decode() for t in result["entity_text"][i].numpy()[:count]]
        assert sorted(texts) == sorted(sentence[s:e] for s, e, _ in expected)


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory, tiny_checkpoint):
    run_dir = str(tmp_path_factory.mktemp("ner"))
    # Scored on its own training sentences (in IOB2): the tiny model learns to tag some of them,
    # so that the export is compared with the Python path on real entities.
    scores = run_with_flags(ner.run, train_file=os.path.join(CONLL, "eng.train"),
                            dev_file=os.path.join(CONLL, "train.txt"), output_dir=run_dir,
                            init_checkpoint=tiny_checkpoint, num_train_epochs=8.0,
                            max_eval_examples=40, learning_rate=1e-2, train_batch_size=4,
                            max_seq_length=64)  # fmt: skip
    return run_dir, scores


def read_predictions(path):
    sentences, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                current.append(line.split())
            else:
                sentences.append(current)
                current = []
    return sentences


def test_ner_predictions_file_reproduces_its_scores(ner_run):
    run_dir, scores = ner_run
    sentences = read_predictions(os.path.join(run_dir, "dev_predictions.txt"))
    dev = ner.read_conll(os.path.join(CONLL, "train.txt")).head(40)
    assert [" ".join(w for w, _, _ in s) for s in sentences] == dev.texts["sentence"]
    assert [[g for _, g, _ in s] for s in sentences] == dev.labels
    assert scores["dev"]["f1"] > 30  # measured 54.1; an untrained head scores above 0, by chance
    recomputed = ner.conll_scores([[g for _, g, _ in s] for s in sentences],
                                  [[p for _, _, p in s] for s in sentences])  # fmt: skip
    assert recomputed == scores["dev"]
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        assert [m["epoch"] for m in json.load(f)] == list(range(1, 9))


def test_ner_export_serves_the_python_entities(ner_run, tmp_path):
    run_dir, _ = ner_run
    path = export.export_run(run_dir, str(tmp_path / "exported"))
    sentences = read_predictions(os.path.join(run_dir, "dev_predictions.txt"))
    texts = [" ".join(w for w, _, _ in s) for s in sentences]
    body = (
        "out = f(sentence=tf.constant(json.loads(sys.stdin.read())))\n"
        "print(json.dumps({k: v.numpy().tolist() for k, v in out.items() if v.dtype != tf.string}"
        " | {k: [[x.decode() for x in row] for row in v.numpy()] for k, v in out.items()"
        " if v.dtype == tf.string}))\n"
    )
    served = served_in_clean_process(path, body, json.dumps(texts))
    empty = served_in_clean_process(path, "out = f(sentence=tf.constant([], tf.string))\n"
                                    "print(json.dumps({k: v.shape.as_list() for k, v in out.items()}))\n")
    assert empty and all(shape[0] == 0 for shape in empty.values())  # an empty batch: no answers
    found = 0
    for i, (text, sentence) in enumerate(zip(texts, sentences)):
        starts = np.cumsum([0] + [len(w) + 1 for w, _, _ in sentence])
        expected = sorted((int(starts[a]), int(starts[b] + len(sentence[b][0])), kind)
                          for a, b, kind in ner.entities([p for _, _, p in sentence]))  # fmt: skip
        count = served["num_entities"][i]
        got = sorted(zip(served["entity_start"][i][:count], served["entity_end"][i][:count],
                         served["entity_type"][i][:count]))  # fmt: skip
        assert got == expected
        starts_ends = zip(served["entity_start"][i][:count], served["entity_end"][i][:count])
        assert served["entity_text"][i][:count] == [text[s:e] for s, e in starts_ends]
        found += count
    assert found > 0  # the tiny model does predict entities, so the comparison means something
