"""The pre-training binary on real text: it learns, it resumes, its output loads everywhere."""

import json
import os
import re
import signal
import sys

import numpy as np
import pytest
from conftest import DATA, run_binary, run_signalled, run_together
from safetensors.numpy import load_file
from test_distribute import free_ports

from keras_bert import BertTokenizer, checkpoints
from keras_bert.text.vocabulary import SPECIAL_TOKENS
from tasks import pretrain, pretraining_records, pretraining_text

CONFIG = {"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64,
          "type_vocab_size": 2, "initializer_range": 0.02}  # fmt: skip


def vocabulary_of(text_files, minilm_dir):
    """MiniLM's vocabulary cut to the special tokens and the wordpieces that `text_files`
    tokenize into. They tokenize the same with the cut (ids aside): WordPiece takes the longest
    piece in the vocabulary at each step, and each piece it took from the whole is in the cut.
    A small model's step costs half as much with the 2,890 pieces of the two texts below as
    with 30,522, whose output layer was most of it."""
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    used = set()
    for path in text_files:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        used.update(tokenizer(lines).flat_values.numpy().tolist())
    return [t for i, t in enumerate(tokenizer.vocabulary) if i in used or t in SPECIAL_TOKENS]


@pytest.fixture(scope="module")
def pretraining_data(tmp_path_factory, minilm_dir):
    """Pre-training records of two texts, a vocabulary of their wordpieces (vocabulary_of) and a
    small model's bert_config.json with that vocabulary's size."""
    folder = tmp_path_factory.mktemp("pretraining_data")
    texts = [os.path.join(DATA, "pretrain", name)
             for name in ("bert_sample_text.txt", "persuasion_part.txt")]  # fmt: skip
    vocabulary = vocabulary_of(texts, minilm_dir)
    (folder / "vocab.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    # fresh: the binary's one run in a process of its own (conftest.run_binary says why).
    result = run_binary(
        ["-m", "tasks.create_pretraining_data", f"--input_file={','.join(texts)}",
         f"--output_file={folder / 'data'}", f"--vocab_file={folder / 'vocab.txt'}",
         "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=5"],
        fresh=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    config = {**CONFIG, "vocab_size": len(vocabulary)}
    (folder / "bert_config.json").write_text(json.dumps(config))
    return folder


def pretrain_command(data, output_dir, *extra):
    return [sys.executable, "-m", "tasks.pretrain", f"--input_file={data / 'data-*'}",
            f"--bert_config_file={data / 'bert_config.json'}",
            f"--vocab_file={data / 'vocab.txt'}", f"--output_dir={output_dir}",
            "--train_batch_size=32", "--learning_rate=2e-3", "--num_warmup_steps=50", *extra]  # fmt: skip


def run(command):
    result = run_binary(command[1:], 900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_small_model_learns_and_its_checkpoints_load(tmp_path, pretraining_data):
    run(pretrain_command(pretraining_data, tmp_path, "--num_train_steps=500",
                         "--steps_per_loop=100", "--mixed_precision=auto"))  # fmt: skip
    history = json.loads((tmp_path / "history.json").read_text())
    mlm, nsp = history["masked_lm_accuracy"], history["next_sentence_accuracy"]
    # Measured: MLM accuracy 0.063 -> 0.139 over the five loops (0.065 -> 0.135 with MiniLM's
    # whole vocabulary). NSP ended at 0.532, 0.506 and 0.511 in three measurements (chance 0.5,
    # standard error 0.009 on 3,200 pairs): at this size and length its learning is within
    # noise, so it is not asserted here.
    assert len(mlm) == len(nsp) == 5
    assert mlm[-1] > 0.1 and mlm[-1] > 1.5 * mlm[0]  # predicts far more than at the start
    for fmt in ("google", "huggingface"):
        loaded = checkpoints.load_checkpoint(str(tmp_path / fmt))
        assert loaded.masked_lm is not None and loaded.next_sentence is not None
        assert loaded.encoder.config.hidden_size == 64
    # The result fine-tunes like any checkpoint.
    run(
        [
            sys.executable,
            "-m",
            "tasks.glue",
            "--task_name=SST-2",
            f"--data_dir={os.path.join(DATA, 'glue', 'SST-2')}",
            f"--output_dir={tmp_path / 'sst2'}",
            f"--init_checkpoint={tmp_path / 'google'}",
            "--num_train_epochs=1",
            "--max_seq_length=64",
        ]
    )
    assert json.loads((tmp_path / "sst2" / "metrics.json").read_text())[0]["epoch"] == 1
    a = checkpoints.load_checkpoint(str(tmp_path / "google")).encoder.weights
    b = checkpoints.load_checkpoint(str(tmp_path / "huggingface")).encoder.weights
    for wa, wb in zip(a, b):
        np.testing.assert_array_equal(wa.numpy(), wb.numpy())


def test_training_batches_run_without_tf_data_autotuning(pretraining_data, flags_parsed):
    """See keras_bert.training.batching.without_autotuning: with the autotuning thread, destroying the
    iterator at the end of each fit call waited out its sleep, 40 to 55 s on 2 AVX2 cores."""
    files = pretraining_text.input_files(str(pretraining_data / "data-*"))
    flags_parsed.train_batch_size = 4
    dataset = pretrain.training_dataset(
        pretraining_records.record_dataset(files, *pretraining_records.record_shape(files)))  # fmt: skip
    assert dataset.options().autotune.enabled is False
    x, y, weights = next(iter(dataset))
    assert x["input_word_ids"].shape[0] == 4 and x["masked_lm_positions"].shape == (4, 10)
    assert y["next_sentence"].shape == weights["next_sentence"].shape == (4,)


def test_records_set_the_sequence_length_and_must_fit_the_model(tmp_path, pretraining_data):
    # The records' 64 tokens are the run's length: a --max_seq_length that differs, or a model
    # with fewer positions, is refused before anything trains, naming where the length came from.
    config = json.loads((pretraining_data / "bert_config.json").read_text())
    (tmp_path / "short.json").write_text(json.dumps({**config, "max_position_embeddings": 32}))
    for extra, message in [
        (["--max_seq_length=32"],
         "error: --input_file holds instances of 64 tokens, but --max_seq_length is 32: pass "
         "--max_seq_length=64, or leave it out"),
        ([f"--bert_config_file={tmp_path / 'short.json'}"],
         "error: --input_file holds instances of 64 tokens, more than --bert_config_file's "
         "max_position_embeddings=32: make them with tasks.create_pretraining_data "
         "--max_seq_length=32 or less"),
    ]:  # fmt: skip
        result = run_binary(pretrain_command(pretraining_data, tmp_path / "run",
                                             *extra)[1:], 300)  # fmt: skip
        assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == message


def test_record_files_that_do_not_fit_are_refused_before_training(tmp_path, pretraining_data):
    import tensorflow as tf

    good = pretraining_text.input_files(str(pretraining_data / "data-*"))
    assert pretraining_records.record_shape(good) == (64, 10)  # the fixture's settings

    def write(name, **lengths):
        features = {feature: tf.train.Feature(int64_list=tf.train.Int64List(value=[0] * n))
                    for feature, n in lengths.items()}  # fmt: skip
        with tf.io.TFRecordWriter(str(tmp_path / name)) as writer:
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=features)).SerializeToString())  # fmt: skip
        return str(tmp_path / name)

    full = dict(input_ids=16, input_mask=16, segment_ids=16, masked_lm_positions=3,
                masked_lm_ids=3, masked_lm_weights=3, next_sentence_labels=1)  # fmt: skip
    shorter = write("shorter.tfrecord", **full)
    with pytest.raises(ValueError, match=r"holds instances of 64 tokens and 10 predictions, "
                                         r".*shorter.tfrecord of 16 and 3: pass the files of one"):
        pretraining_records.record_shape([good[0], shorter])
    no_labels = write("no_labels.tfrecord", **{k: v for k, v in full.items()
                                               if k != "next_sentence_labels"})  # fmt: skip
    with pytest.raises(ValueError, match=r"no_labels.tfrecord holds records without "
                                         r"next_sentence_labels: not pre-training instances"):
        pretraining_records.record_shape([no_labels])
    text = tmp_path / "text.tfrecord"
    text.write_text("Just some text, not records.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"text.tfrecord is not a TFRecord file"):
        pretraining_records.record_shape([good[0], str(text)])


def test_shards_of_two_runs_are_refused_and_a_set_read_in_part_is_named(caplog):
    """The names alone decide (no file is read): a glob over one prefix that matched an earlier
    run's shards of another count read both runs as one data set, without a word."""
    with pytest.raises(ValueError, match=r"^d/t-00000-of-00001.tfrecord and d/t-00001-of-00002."
                                         r"tfrecord are shards of two runs"):  # fmt: skip
        pretraining_records.check_shard_sets(["d/t-00000-of-00001.tfrecord",
                                              "d/t-00001-of-00002.tfrecord"])  # fmt: skip
    pretraining_records.check_shard_sets([f"d/t-{i:05d}-of-00003.tfrecord" for i in range(3)]
                                         + ["e/t-00000-of-00001.tfrecord", "other.tfrecord"])
    assert "of the" not in caplog.text
    pretraining_records.check_shard_sets(["d/t-00000-of-00004.tfrecord"])
    assert "reading 1 of the 4 shards of d/t" in caplog.text


@pytest.mark.slow
def test_killed_pretraining_resumes(tmp_path, pretraining_data):
    command = pretrain_command(pretraining_data, tmp_path, "--num_train_steps=60",
                               "--save_checkpoints_steps=10")  # fmt: skip
    first = run_signalled(command[1:], tmp_path / "backup" / "latest.weights.h5", signal.SIGKILL)
    assert first.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    result = run(command)
    resumed = re.search(r"resuming from the backup at step (\d+) of 60\n", result.stderr)
    assert resumed and int(resumed.group(1)) >= 10  # from its backup, not from the first step
    assert re.findall(r"training steps \d+ to (\d+)\n", result.stderr)[-1] == "60"
    uninterrupted = tmp_path.parent / "uninterrupted"
    run(pretrain_command(pretraining_data, uninterrupted, "--num_train_steps=60",
                         "--save_checkpoints_steps=10"))  # fmt: skip
    resumed_weights, uninterrupted_weights = (
        load_file(os.path.join(run_dir, checkpoints.HUGGING_FACE, "model.safetensors"))
        for run_dir in (tmp_path, uninterrupted))  # fmt: skip
    assert resumed_weights.keys() == uninterrupted_weights.keys()
    for name, value in resumed_weights.items():
        assert value.tobytes() == uninterrupted_weights[name].tobytes(), name
    # Every loop's training metrics, the killed run's too (its backup comes after them).
    resumed_history, uninterrupted_history = (json.loads((run_dir / "history.json").read_text())
                                              for run_dir in (tmp_path, uninterrupted))  # fmt: skip
    assert len(resumed_history["loss"]) == 6 and resumed_history == uninterrupted_history


@pytest.mark.slow
def test_two_workers_pretrain_to_identical_weights(tmp_path, pretraining_data):
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    command = pretrain_command(pretraining_data, tmp_path, "--strategy=multi_worker",
                               "--num_train_steps=20", "--steps_per_loop=10",
                               "--num_warmup_steps=2")  # fmt: skip
    for worker in run_together([(command[1:], {**os.environ, "TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}})}) for i in range(2)]):
        assert worker.returncode == 0, worker.stderr[-3000:]
    chief = checkpoints.load_checkpoint(str(tmp_path / "huggingface"))
    other = checkpoints.load_checkpoint(str(tmp_path / "worker_1" / "huggingface"))
    for a, b in zip(chief.encoder.weights + chief.masked_lm.weights,
                    other.encoder.weights + other.masked_lm.weights):  # fmt: skip
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # ... and they learnt together. Both report the metrics of the whole cluster; from a random
    # start (masked-LM loss ln(2,890) = 7.97 with the fixture's vocabulary) the second loop's
    # mean loss is far below the first's. Measured (deterministic here): masked-LM loss 7.72 ->
    # 7.14, accuracy 0.049 -> 0.075 (with MiniLM's 30,522 pieces, 10.05 -> 9.34, and with the
    # heads cut off from the loss it stayed at 10.3, ln(30,522)). (20 steps learn word
    # frequencies only, so shuffled labels would pass here; the test above catches those.)
    chief_history = json.loads((tmp_path / "history.json").read_text())
    assert json.loads((tmp_path / "worker_1" / "history.json").read_text()) == chief_history
    loss, accuracy = chief_history["masked_lm_loss"], chief_history["masked_lm_accuracy"]
    uniform = np.log(json.loads((pretraining_data / "bert_config.json").read_text())["vocab_size"])
    assert len(loss) == 2 and loss[1] < min(loss[0] - 0.4, uniform - 0.5)
    assert accuracy[1] > accuracy[0] > 0.02


@pytest.mark.slow
def test_streaming_pretraining_from_raw_text(tmp_path, minilm_dir):
    text = tmp_path / "moby.txt"
    text.write_bytes(open(os.path.join(DATA, "pretrain", "moby_crlf_part.txt"), "rb").read())
    command = [sys.executable, "-m", "tasks.pretrain", f"--text_file={text}",
               "--text_format=text", f"--bert_config_file={tmp_path / 'bert_config.json'}",
               f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
               f"--output_dir={tmp_path / 'run'}",
               "--max_seq_length=64", "--max_predictions_per_seq=10", "--train_batch_size=8",
               "--num_train_steps=20", "--steps_per_loop=10", "--num_warmup_steps=2",
               "--optimizer=lamb", "--gradient_accumulation_steps=2"]  # fmt: skip
    (tmp_path / "bert_config.json").write_text(json.dumps(CONFIG))
    run(command)
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert len(history["loss"]) == 2 and all(np.isfinite(history["loss"]))
    assert checkpoints.load_checkpoint(str(tmp_path / "run" / "google")).masked_lm is not None
    # The run records its text's SHA-256: edited since, the text is not trained on as if the
    # finished run had seen it.
    with open(text, "ab") as f:
        f.write(b"Call me Ishmael, once more.\r\n")
    result = run_binary(command[1:], 300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert re.search(r"^error: --output_dir=.* holds a run with other settings \(training data "
                     r"SHA-256 \w{12}\.\.\. there, \w{12}\.\.\. now \(edited since\)\)",
                     result.stderr.strip().splitlines()[-1])  # fmt: skip


@pytest.mark.slow
def test_too_little_text_and_too_much_warmup_are_one_line_errors(tmp_path, minilm_dir):
    (tmp_path / "bert_config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "one.txt").write_text("Only one sentence here.\n")
    base = [sys.executable, "-m", "tasks.pretrain", f"--text_file={tmp_path / 'one.txt'}",
            f"--bert_config_file={tmp_path / 'bert_config.json'}",
            f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
            f"--output_dir={tmp_path / 'out'}", "--num_train_steps=20",
            "--max_seq_length=64"]  # fmt: skip
    for extra, message in (
        ([], f"error: --text_file={tmp_path / 'one.txt'} makes no pre-training pair"),
        (["--num_warmup_steps=50"], "error: --num_warmup_steps gives 50 warmup steps, but the "
                                    "run has 20 steps in all"),
    ):  # fmt: skip
        result = run_binary(base[1:] + extra, 300)
        assert result.returncode == 1, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1].startswith(message)
        assert "Traceback" not in result.stderr


def test_lamb_decays_weights_as_adamw_does(flags_parsed):
    import keras

    flags_parsed.optimizer, flags_parsed.weight_decay = "lamb", 0.1
    flags_parsed.learning_rate, flags_parsed.num_train_steps = 0.01, 10
    flags_parsed.num_warmup_steps, flags_parsed.mixed_precision = 0, "none"
    kernel, gamma, bias = (keras.Variable(np.ones(2), name=n) for n in ("kernel", "gamma", "bias"))
    # Zero gradients: LAMB's own step is zero, so what moves is the weight decay alone.
    pretrain.create_optimizer().apply([np.zeros(2)] * 3, [kernel, gamma, bias])
    np.testing.assert_allclose(kernel.numpy(), 1 - 0.1 * 0.01, rtol=1e-6)
    assert gamma.numpy().tolist() == bias.numpy().tolist() == [1.0, 1.0]
