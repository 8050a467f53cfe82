import os

import pytest
import tensorflow as tf
from conftest import DATA, run_with_flags

from keras_bert import BertMultipleChoicePreprocessor
from keras_bert.text.tokenizer import BertTokenizer
from tasks import swag

HEADER = (
    "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
)


def test_reads_jsonl_and_csv(tmp_path):
    jsonl = swag.read_swag(os.path.join(DATA, "swag_sample.jsonl"))
    assert len(jsonl) == 10 and jsonl.labels.tolist()[0] == 0
    assert jsonl.texts["context"][0] == ("Members of the procession walk down the street holding "
                                         "small horn brass instruments.")  # fmt: skip
    assert jsonl.texts["endings"][0] == [  # sent2 + " " + ending<i>
        "A drum line passes by walking down the street playing their instruments.",
        "A drum line has heard approaching them.",
        "A drum line arrives and they're outside dancing and asleep.",
        "A drum line turns the lead singer watches the performance."]
    csv_file = tmp_path / "val.csv"
    csv_file.write_text(
        HEADER + '\nv1,7,x,A man sits.,He,gold,eats.,sleeps.,runs.,"flies, high.",3\n'
    )
    split = swag.read_swag(str(csv_file))
    assert split.texts["context"] == ["A man sits."]
    assert split.texts["endings"] == [["He eats.", "He sleeps.", "He runs.", "He flies, high."]]
    assert split.labels.tolist() == [3] and split.ids == ["7"]


def test_bad_rows_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "\nv1,7,x,A man sits.,He,gold,eats.,sleeps.,runs.,flies.,5\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: label '5' is not 0, 1, 2 or 3"):
        swag.read_swag(str(bad))
    short = tmp_path / "short.jsonl"
    short.write_text('{"sent1": "a", "sent2": "b", "ending0": "c", "label": 0}\n')
    with pytest.raises(ValueError, match=r"short\.jsonl:1: missing ending1, ending2, ending3"):
        swag.read_swag(str(short))
    with pytest.raises(FileNotFoundError):
        swag.read_swag(str(tmp_path / "none.csv"))
    blank = tmp_path / "blank.csv"
    blank.write_text(HEADER + "\nv1,7,x,A man sits.,He,gold,eats.,sleeps.,runs.,flies.,1"
                              "\nv1,8,x, ,He,gold,eats.,sleeps.,runs.,flies.,1\n")  # fmt: skip
    with pytest.raises(ValueError, match=r"blank\.csv:3: sent1, the context, is empty; fix or"):
        swag.read_swag(str(blank))
    blank.write_text(HEADER + "\nv1,7,x,A man sits.,,gold,eats.,sleeps.,,flies.,1\n")
    with pytest.raises(ValueError, match=r"blank\.csv:2: sent2 and ending2 are empty, a choice"):
        swag.read_swag(str(blank))
    blank.write_text(HEADER + "\nv1,7,x,A man sits.,,gold,eats.,sleeps.,runs.,flies.,1\n")
    assert swag.read_swag(str(blank)).texts["endings"] == [["eats.", "sleeps.", "runs.", "flies."]]


def test_each_choice_is_packed_with_the_context(minilm_dir):
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    preprocess = BertMultipleChoicePreprocessor.from_tokenizer(tokenizer, 16, num_choices=4)
    inputs = preprocess({"context": tf.constant(["a cat"]),
                         "endings": tf.constant([["it sat", "it ran", "dogs", "birds fly"]])})  # fmt: skip
    assert inputs["input_word_ids"].shape[:2] == (1, 4)
    words = [tokenizer.vocabulary[i] for i in inputs["input_word_ids"][0, 3].numpy() if i]
    assert words == ["[CLS]", "a", "cat", "[SEP]", "birds", "fly", "[SEP]"]
    assert inputs["input_type_ids"][0, 3].numpy().tolist()[:7] == [0, 0, 0, 0, 1, 1, 1]


def test_swag_binary_learns_its_training_rows(tmp_path, tiny_checkpoint):
    # Ten rows, trained on (eight copies, so that epochs are few) and scored on: a 2-layer
    # random encoder memorises them, which it cannot with its labels shuffled or its head cut
    # off from the loss (chance: 0.25).
    sample = os.path.join(DATA, "swag_sample.jsonl")
    with open(sample, encoding="utf-8") as f:
        rows = f.read()
    (tmp_path / "train.jsonl").write_text(rows * 8, encoding="utf-8")
    scores = run_with_flags(swag.run, train_file=str(tmp_path / "train.jsonl"), dev_file=sample,
                            output_dir=str(tmp_path / "run"), init_checkpoint=tiny_checkpoint,
                            num_train_epochs=3.0, train_batch_size=5, learning_rate=1e-2,
                            max_seq_length=64)  # fmt: skip
    assert scores["dev"]["accuracy"] >= 0.9


def test_an_example_counts_as_truncated_when_any_of_its_choices_is(minilm_dir):
    split = swag.read_swag(os.path.join(DATA, "swag_sample.jsonl"))
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    whole = BertMultipleChoicePreprocessor.from_tokenizer(tokenizer, 128, num_choices=4)
    packed = whole([split.texts["context"], split.texts["endings"]])["input_mask"].numpy()
    longest = packed.sum(-1).max(-1)  # (examples,): the longest choice's tokens
    length = int(sorted(longest)[len(longest) // 2])
    short = BertMultipleChoicePreprocessor.from_tokenizer(tokenizer, length, num_choices=4)
    expected = int((longest > length).sum())
    assert 0 < expected < len(split)
    assert split.count_truncated(short, swag.TEXTS) == expected


def test_split_files_and_their_do_flags_are_checked_together(caplog):
    from absl import app

    from tasks import common

    readers = {"dev_file": ["do_eval"], "test_file": ["do_predict"]}
    check = lambda: common.check_split_files(readers)  # noqa: E731
    caplog.set_level("INFO", logger="absl")
    run_with_flags(check, dev_file=None, do_eval=True, test_file=None, do_predict=False)
    assert [r.getMessage() for r in caplog.records] == [
        "no --dev_file: nothing for --do_eval to read"]  # --do_eval is on by default
    with pytest.raises(app.UsageError, match="^--test_file is read only with --do_predict; pass"):
        run_with_flags(check, dev_file="d", do_eval=True, test_file="t", do_predict=False)
