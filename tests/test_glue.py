import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from absl import app
from conftest import DATA

import keras_bert
from tasks import common, glue, glue_metrics, trainer

GLUE = os.path.join(DATA, "glue")


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", ["CoLA", "SST-2", "MRPC", "STS-B", "RTE", "WNLI"])
def test_reads_the_real_glue_files(name):
    task = glue.get_task(name)
    train = glue.read_tsv(os.path.join(GLUE, name, "train.tsv"), task, True)
    test = glue.read_tsv(os.path.join(GLUE, name, "test.tsv"), task, False)
    assert set(train.texts) == set(task.text_columns)
    assert len(train) == len(train.labels) > 10 and test.labels is None
    assert all(text.strip() for text in train.texts[task.text_columns[0]])
    if task.labels is None:
        assert train.labels.dtype == np.float32 and 0 <= train.labels.min() <= 5
    else:
        assert set(np.unique(train.labels)) <= set(range(len(task.labels)))
    assert test.ids[:3] == ["0", "1", "2"]


def test_mrpc_row_content():
    task = glue.get_task("mrpc")
    dev = glue.read_tsv(os.path.join(GLUE, "MRPC", "dev.tsv"), task, True)  # header has a BOM
    assert dev.texts["#1 String"][0].startswith("He said the foodservice pie business")
    assert dev.labels[0] == 1


def test_qqp_and_mnli_layouts(tmp_path):
    qqp = write(tmp_path / "qqp.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                                       "7\t1\t2\tHow do I cook?\tHow to cook?\t1"])  # fmt: skip
    split = glue.read_tsv(qqp, glue.get_task("QQP"), True)
    assert split.ids == ["7"] and split.labels.tolist() == [1]
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")  # fmt: skip
    mnli = write(tmp_path / "mnli.tsv", [header, "0\t1\t1e\tfiction\t(x)\t(y)\t(X)\t(Y)\t"
                                         "A man sleeps.\tA person rests.\tentailment\tentailment"])  # fmt: skip
    split = glue.read_tsv(mnli, glue.get_task("MNLI"), True)
    assert split.texts["sentence2"] == ["A person rests."]
    assert split.labels.tolist() == [glue.get_task("MNLI").labels.index("entailment")]


def test_bad_files_name_the_file_line_and_problem(tmp_path):
    task = glue.get_task("SST-2")
    with pytest.raises(FileNotFoundError, match=r"missing.tsv: no such file \(the SST-2 TSV file\)"):
        glue.read_tsv(str(tmp_path / "missing.tsv"), task, True)
    bad = write(tmp_path / "cols.tsv", ["sentence\tlabel", "good film\t1", "bad film"])
    with pytest.raises(ValueError, match=r"cols\.tsv:3: expected 2 tab-separated columns, found 1"):
        glue.read_tsv(bad, task, True)
    bad = write(tmp_path / "label.tsv", ["sentence\tlabel", "good film\t1", "odd\tpositive"])
    with pytest.raises(ValueError, match=r"label\.tsv:3: label 'positive' is not one of SST-2"):
        glue.read_tsv(bad, task, True)
    bad = write(tmp_path / "header.tsv", ["text\ttarget", "good film\t1"])
    with pytest.raises(ValueError, match=r"header\.tsv:1: no column\(s\) sentence, label"):
        glue.read_tsv(bad, task, True)
    bad = write(tmp_path / "score.tsv", ["sentence1\tsentence2\tscore", "a\tb\thigh"])
    with pytest.raises(ValueError, match=r"score\.tsv:2: label 'high' is not a number"):
        glue.read_tsv(bad, glue.get_task("STS-B"), True)
    bad = write(tmp_path / "nan.tsv", ["sentence1\tsentence2\tscore", "a\tb\t1.5", "c\td\tnan"])
    with pytest.raises(ValueError, match=r"nan\.tsv:3: label 'nan' is not a finite number"):
        glue.read_tsv(bad, glue.get_task("STS-B"), True)
    (tmp_path / "latin1.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(ValueError, match=r"latin1.tsv:2: byte 4 of the line \(0xe9\) is not valid"):
        glue.read_tsv(str(tmp_path / "latin1.tsv"), task, True)
    empty = write(tmp_path / "empty.tsv", ["sentence\tlabel"])
    with pytest.raises(ValueError, match="has no examples"):
        glue.read_tsv(empty, task, True)
    bad = write(tmp_path / "blank.tsv", ["sentence\tlabel", "good film\t1", " \t0"])
    with pytest.raises(ValueError, match=r"blank\.tsv:3: empty text \(sentence\); fix or remove"):
        glue.read_tsv(bad, task, False)
    bad = write(tmp_path / "pair.tsv", ["sentence1\tsentence2\tscore", "a\tb\t1.5", "\t\t2"])
    with pytest.raises(ValueError, match=r"pair\.tsv:3: empty text \(sentence1, sentence2\)"):
        glue.read_tsv(bad, glue.get_task("STS-B"), True)


def test_an_empty_side_of_a_pair_is_kept_with_a_warning(tmp_path, caplog):
    # As in the official QQP train.tsv, which has two rows with an empty question2.
    header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"
    qqp = write(tmp_path / "qqp.tsv", [header, "1\t1\t2\tHow do I cook?\tHow to cook?\t1",
                                       "2\t3\t4\tHow can I create an app?\t\t0",
                                       "3\t5\t6\t \tWhy?\t0"])  # fmt: skip
    split = glue.read_tsv(qqp, glue.get_task("QQP"), True)
    assert split.texts["question2"] == ["How to cook?", "", "Why?"]
    assert split.labels.tolist() == [1, 0, 0]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"{qqp}: 2 examples with one side of the pair empty, kept as they are "
                        f"(the first: {qqp}:3 (question2))"]  # fmt: skip


@pytest.mark.parametrize("name,columns", [("SST-2", ("sentence",)),
                                          ("MRPC", ("#1 String", "#2 String"))])
def test_counts_the_examples_the_packer_truncates(minilm_dir, name, columns):
    split = glue.read_tsv(os.path.join(GLUE, name, "dev.tsv"), glue.get_task(name), True)
    tokenizer = keras_bert.BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    texts = [tf.constant(split.texts[c]) for c in columns]
    whole = keras_bert.BertPreprocessor.from_tokenizer(tokenizer, 512, num_segments=len(columns))
    lengths = whole(texts[0] if len(texts) == 1 else tuple(texts))["input_mask"].numpy().sum(1)
    for sequence_length in (int(lengths.min()), int(np.median(lengths)), int(lengths.max()) - 1):
        expected = int(np.sum(lengths > sequence_length))
        assert 0 < expected < len(split)
        short = keras_bert.BertPreprocessor.from_tokenizer(tokenizer, sequence_length,
                                                           num_segments=len(columns))  # fmt: skip
        assert split.count_truncated(short, columns) == expected


def test_metrics_on_hand_worked_examples():
    labels = np.array([1, 1, 1, 0, 0, 0, 0, 1])
    predictions = np.array([1, 1, 0, 0, 0, 1, 0, 1])
    # tp=3 tn=3 fp=1 fn=1
    assert glue_metrics.accuracy(predictions, labels) == 0.75
    assert glue_metrics.f1(predictions, labels) == pytest.approx(0.75)  # precision = recall = 3/4
    assert glue_metrics.matthews(predictions, labels) == pytest.approx((9 - 1) / 16)
    assert glue_metrics.matthews(np.ones(4, int), np.array([1, 0, 1, 0])) == 0.0  # undefined -> 0
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert glue_metrics.pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert glue_metrics.spearman(x, x**3) == pytest.approx(1.0)  # monotone, not linear
    assert glue_metrics.ranks(np.array([10.0, 20.0, 20.0, 5.0])).tolist() == [2.0, 3.5, 3.5, 1.0]
    # Spearman with ties: ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4] -> r = 0.9486833
    assert glue_metrics.spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 2, 3, 4])) == pytest.approx(
        0.9486833, abs=1e-6)  # fmt: skip


def test_unknown_task_is_refused():
    from absl import app

    with pytest.raises(app.UsageError, match="unknown GLUE task 'SST-3'"):
        glue.get_task("SST-3")


def test_the_binaries_datasets_run_without_tf_data_autotuning(flags_parsed):
    """See keras_bert.training.batching.without_autotuning: its thread's sleep delays the end of every
    epoch's iterator. Training batches (bucketed or not) and prediction batches, pairs too."""
    split = glue.read_tsv(os.path.join(GLUE, "MRPC", "dev.tsv"), glue.get_task("MRPC"), True)
    for bucket in [False, True]:
        flags_parsed.bucket_by_length = bucket
        for shuffled, with_labels in [(False, True), (False, False)]:
            dataset = common.make_dataset(split, ("#1 String", "#2 String"), 8, shuffled,
                                          with_labels)  # fmt: skip
            assert dataset.options().autotune.enabled is False
            assert sum(len(b[0][0]) for b in dataset) == len(split)
        stream = common.make_dataset(split, ("#1 String", "#2 String"), 8, training=True)
        assert stream.options().autotune.enabled is False


def first_passes(stream, size, passes):
    """The first `passes` passes of an endless training stream: each [(first text, label)],
    and the batches of each."""
    read, counts, batches = [], [], iter(stream)
    for _ in range(passes):
        examples, count = [], 0
        while len(examples) < size:
            (first, _), labels = next(batches)
            examples += zip(first.numpy().tolist(), labels.numpy().tolist())
            count += 1
        read.append(examples)
        counts.append(count)
    return read, counts


@pytest.mark.parametrize("bucket", [False, True])
def test_training_passes_are_shuffled_by_seed_and_pass_alone(flags_parsed, bucket):
    """Each pass holds every example once (batches never straddle passes) in its own order,
    and a pass's order depends on --seed and its number only: not on how many iterators
    were made before (Keras's fit makes one to build the model), nor on the batches a resumed
    run skips."""
    flags_parsed.bucket_by_length = bucket
    split = glue.read_tsv(os.path.join(GLUE, "MRPC", "dev.tsv"), glue.get_task("MRPC"), True)
    keys = ("#1 String", "#2 String")
    stream = common.make_dataset(split, keys, 8, training=True)
    passes, counts = first_passes(stream, len(split), 3)
    everything = sorted(zip([t.encode() for t in split.texts[keys[0]]], split.labels.tolist()))
    for examples in passes:
        assert sorted(examples) == everything
    assert passes[0] != passes[1] and passes[1] != passes[2]
    assert first_passes(stream, len(split), 3)[0] == passes  # a second iterator reads the same
    resumed = common.make_dataset(split, keys, 8, training=True).skip(counts[0] + 2)
    assert first_passes(resumed, len(split) - 16, 1)[0][0] == passes[1][16:]
    flags_parsed.seed += 1
    other = common.make_dataset(split, keys, 8, training=True)
    assert first_passes(other, len(split), 1)[0] != passes[:1]


def test_fine_tunes_and_writes_every_output(tmp_path, tiny_checkpoint, flags_parsed):
    flags_parsed.task_name = "SST-2"
    flags_parsed.data_dir = os.path.join(GLUE, "SST-2")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 2
    flags_parsed.train_batch_size = 16
    flags_parsed.learning_rate = 1e-3
    flags_parsed.do_predict = True
    flags_parsed.bucket_by_length = True
    results = glue.run(glue.get_task("SST-2"))
    run = tmp_path / "run"
    assert {"model.keras", "metrics.json", "SST-2.tsv", "logs", "backup"} <= set(os.listdir(run))
    history = json.loads((run / "metrics.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[-1]["dev"] == results["dev"]
    # The reported accuracy is that of the saved model on the dev file, counted here again.
    dev = glue.read_tsv(os.path.join(GLUE, "SST-2", "dev.tsv"), glue.get_task("SST-2"), True)
    logits = trainer.load_run(str(run)).predict(dev.texts["sentence"], verbose=0)
    assert results["dev"]["accuracy"] == np.mean(logits.argmax(-1) == dev.labels)
    lines = (run / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 17
    assert all(line.split("\t")[1] in ("0", "1") for line in lines[1:])
    assert os.listdir(run / "logs" / "dev") and os.listdir(run / "logs" / "train")
    assert trainer.load_run(str(run)).labels == ["0", "1"]  # model.keras describes itself
    # The same command again finds the finished backup, trains no more, and still reports.
    again = glue.run(glue.get_task("SST-2"))
    assert again["dev"] == results["dev"]
    assert [h["epoch"] for h in json.loads((run / "metrics.json").read_text())] == [1, 2]
    # --nodo_train evaluates and predicts with the saved run, not with a fresh head.
    submission = (run / "SST-2.tsv").read_text()
    (run / "SST-2.tsv").unlink()
    flags_parsed.do_train = False
    flags_parsed.init_checkpoint = None
    assert glue.run(glue.get_task("SST-2"))["dev"] == results["dev"]
    assert (run / "SST-2.tsv").read_text() == submission
    # Given on the command line, another copy of the data and another spelling of the task are
    # the same run; another --max_seq_length is not, and is refused rather than ignored.
    shutil.copytree(os.path.join(GLUE, "SST-2"), tmp_path / "copy")
    flags_parsed["data_dir"].parse(str(tmp_path / "copy"))
    flags_parsed["task_name"].parse("sst-2")
    assert glue.run(glue.get_task("sst-2"))["dev"] == results["dev"]
    flags_parsed["max_seq_length"].parse("24")
    with pytest.raises(app.UsageError, match=r"other settings than given "
                       r"\(--max_seq_length=\d+ there, 24 now\)"):  # fmt: skip
        glue.run(glue.get_task("SST-2"))


def test_regression_task_reports_pearson_and_spearman(tmp_path, tiny_checkpoint, flags_parsed):
    flags_parsed.data_dir = os.path.join(GLUE, "STS-B")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 1
    flags_parsed.do_predict = True
    results = glue.run(glue.get_task("STS-B"))
    assert set(results["dev"]) == {"pearson", "spearman"}
    rows = (tmp_path / "run" / "STS-B.tsv").read_text().splitlines()[1:]
    assert len(rows) == 8 and all(float(r.split("\t")[1]) == float(r.split("\t")[1]) for r in rows)


def test_tfds_glue_is_read_with_the_same_columns(tmp_path, flags_parsed):
    import tensorflow_datasets as tfds

    flags_parsed.tfds = True
    task = glue.get_task("MRPC")
    with tfds.testing.mock_data(num_examples=6):
        split = glue.read_tfds(task, "train")
    assert set(split.texts) == {"#1 String", "#2 String"} and len(split) == 6
    assert split.labels.dtype == np.int32


def test_float16_trains_with_loss_scaling(tmp_path, tiny_checkpoint, flags_parsed):
    flags_parsed.data_dir = os.path.join(GLUE, "RTE")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 1
    flags_parsed.mixed_precision = "float16"
    results = glue.run(glue.get_task("RTE"))
    import keras

    model = keras.saving.load_model(str(tmp_path / "run" / "model.keras"))
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    dev = glue.read_tsv(os.path.join(GLUE, "RTE", "dev.tsv"), glue.get_task("RTE"), True)
    logits = model.predict((dev.texts["sentence1"], dev.texts["sentence2"]), verbose=0)
    assert results["dev"]["accuracy"] == np.mean(logits.argmax(-1) == dev.labels)
    # float16 steps with loss scaling moved the encoder (an overflow would skip every step)
    start = keras_bert.load_checkpoint(tiny_checkpoint).encoder
    moved = [np.abs(a.numpy() - b.numpy()).max() for a, b in zip(
        start.weights, model.encoder.weights)]  # fmt: skip
    assert np.mean([m > 0 for m in moved]) > 0.9


def test_mnli_writes_matched_mismatched_and_diagnostic_predictions(tmp_path, tiny_checkpoint,
                                                                     flags_parsed):  # fmt: skip
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")  # fmt: skip
    pairs = [("A man sleeps.", "A person rests."), ("A dog runs.", "A cat sleeps."),
             ("Kids play.", "Children are playing."), ("It rains.", "The sun is out.")]  # fmt: skip
    labels = ["entailment", "contradiction", "entailment", "contradiction"]
    rows = [f"{i}\tp\tq\tg\t(a)\t(b)\t(A)\t(B)\t{a}\t{b}" for i, (a, b) in enumerate(pairs)]
    data = tmp_path / "MNLI"
    data.mkdir()
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write(data / name, [header + "\tlabel1\tgold_label"] + [
            f"{r}\t{l}\t{l}" for r, l in zip(rows, labels)])  # fmt: skip
    for name in ("test_matched.tsv", "test_mismatched.tsv"):
        write(data / name, [header] + rows)
    diagnostic = write(tmp_path / "diagnostic.tsv", ["index\tsentence1\tsentence2", "0\tA\tB"])
    flags_parsed.data_dir = str(data)
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 1
    flags_parsed.do_predict = True
    flags_parsed.diagnostic_file = diagnostic
    results = glue.run(glue.get_task("MNLI"))
    assert set(results) == {"dev_matched", "dev_mismatched"}
    for name, count in (("MNLI-m", 4), ("MNLI-mm", 4), ("AX", 1)):
        lines = (tmp_path / "run" / f"{name}.tsv").read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == count + 1
        assert all(line.split("\t")[1] in glue.get_task("MNLI").labels for line in lines[1:])


def test_auto_precision_is_resolved_recorded_and_kept_on_resume(tmp_path, tiny_checkpoint,
                                                               flags_parsed, monkeypatch):
    """--mixed_precision=auto trains in bfloat16 on a CPU with AMX and records that, so that
    the same run met again where auto means float32 is refused, not silently mixed."""
    from absl import app

    from keras_bert.training import distribute

    amx = tmp_path / "amx"
    amx.write_text("vendor_id\t: GenuineIntel\nflags\t\t: avx2 avx512_bf16 amx_bf16 amx_tile\n")
    avx2 = tmp_path / "avx2"
    avx2.write_text("vendor_id\t: AuthenticAMD\nflags\t\t: avx avx2 fma\n")
    flags_parsed.data_dir = os.path.join(GLUE, "RTE")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 1
    flags_parsed.mixed_precision = "auto"
    monkeypatch.setattr(distribute, "CPU_INFO", str(amx))
    glue.run(glue.get_task("RTE"))
    settings = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert settings["mixed_precision"] == "bfloat16"
    import keras

    model = keras.saving.load_model(str(tmp_path / "run" / "model.keras"))
    assert model.encoder.dtype_policy.name == "mixed_bfloat16"
    flags_parsed.mixed_precision = "auto"
    monkeypatch.setattr(distribute, "CPU_INFO", str(avx2))
    with pytest.raises(app.UsageError, match="--mixed_precision=bfloat16 there, none now"):
        glue.run(glue.get_task("RTE"))


def test_a_run_on_training_data_edited_since_is_refused(tmp_path, tiny_checkpoint, flags_parsed):
    import shutil

    from absl import app

    data = tmp_path / "SST-2"
    shutil.copytree(os.path.join(GLUE, "SST-2"), data)
    flags_parsed.task_name, flags_parsed.data_dir = "SST-2", str(data)
    flags_parsed.output_dir, flags_parsed.init_checkpoint = str(tmp_path / "run"), tiny_checkpoint
    flags_parsed.num_train_epochs, flags_parsed.train_batch_size = 1, 16
    first = glue.run(glue.get_task("SST-2"))
    assert glue.run(glue.get_task("SST-2")) == first  # the finished run, reused
    with open(data / "train.tsv", "a", encoding="utf-8") as f:
        f.write("one more film\t1\n")
    with pytest.raises(app.UsageError, match=r"holds a run with other settings \(training data "
                                             r"SHA-256 \w{12}\.\.\. there, \w{12}\.\.\. now "
                                             r"\(edited since\)\)"):  # fmt: skip
        glue.run(glue.get_task("SST-2"))
