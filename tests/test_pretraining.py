import collections
import fcntl
import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, run_binary

from keras_bert.training import pretraining
from tasks import pretraining_records

PRETRAIN = os.path.join(DATA, "pretrain")
SPECIAL = pretraining.SpecialIds(cls=2, sep=3, mask=4, vocab_size=1000,
                                 replacement_ids=tuple(range(5, 1000)))  # fmt: skip
CONTINUATION = 500  # in the synthetic documents, ids >= 500 are "##" pieces


def synthetic_documents(seed=0, count=200):
    """Documents of sentences of (id, starts_word); ids >= 500 continue the previous word."""
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(count):
        document = []
        for _ in range(rng.integers(1, 12)):
            ids = [int(rng.integers(5, CONTINUATION))]
            for _ in range(rng.integers(4, 30)):
                ids.append(int(rng.integers(CONTINUATION, 1000) if rng.random() < 0.3
                               else rng.integers(5, CONTINUATION)))  # fmt: skip
            document.append([(t, t < CONTINUATION) for t in ids])
        documents.append(document)
    return documents


def build(documents, seed=1, **kwargs):
    rng = np.random.default_rng(seed)
    settings = {"max_seq_length": 64, "max_predictions": 40, **kwargs}
    return [i for d in range(len(documents))
            for i in pretraining.instances_from_document(documents, d, SPECIAL, rng, **settings)]  # fmt: skip


def originals(instance):
    ids = list(instance.input_ids)
    for position, label in zip(instance.masked_lm_positions, instance.masked_lm_ids):
        ids[position] = label
    return ids


@pytest.fixture(scope="module")
def instances():
    return build(synthetic_documents(count=800))


def test_fifteen_percent_selected_and_split_80_10_10(instances):
    counts = collections.Counter()
    tokens = sum(len(i.input_ids) for i in instances)
    for instance in instances:
        for position, label in zip(instance.masked_lm_positions, instance.masked_lm_ids):
            token = instance.input_ids[position]
            counts["mask" if token == SPECIAL.mask else "kept" if token == label else "random"] += 1
    chosen = sum(counts.values())
    assert chosen > 10_000
    assert chosen / tokens == pytest.approx(0.15, abs=0.01)
    assert counts["mask"] / chosen == pytest.approx(0.8, abs=0.02)
    assert counts["random"] / chosen == pytest.approx(0.1, abs=0.015)
    assert counts["kept"] / chosen == pytest.approx(0.1, abs=0.015)


def test_next_sentence_is_balanced(instances):
    assert np.mean([i.is_random_next for i in instances]) == pytest.approx(0.5, abs=0.05)


def test_structure_of_every_instance(instances):
    for instance in instances:
        ids, segments = instance.input_ids, instance.segment_ids
        assert len(ids) == len(segments) <= 64
        assert ids[0] == SPECIAL.cls and ids[-1] == SPECIAL.sep and ids.count(SPECIAL.sep) == 2
        first_sep = ids.index(SPECIAL.sep)
        assert segments == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        positions = instance.masked_lm_positions
        assert positions == sorted(set(positions)) and 1 <= len(positions) <= 40
        # [CLS] and [SEP] are never chosen; labels are the original tokens at the chosen
        # positions; every position not chosen holds its original token.
        assert all(ids[p] not in (SPECIAL.cls, SPECIAL.sep) for p in positions)
        assert all(5 <= label < 1000 for label in instance.masked_lm_ids)
        assert all(t != SPECIAL.mask for p, t in enumerate(ids) if p not in positions)


def test_predictions_are_capped():
    for instance in build(synthetic_documents(seed=3, count=30), max_predictions=3):
        assert len(instance.masked_lm_positions) <= 3


def test_deterministic_for_a_seed():
    documents = synthetic_documents(seed=4, count=30)
    assert build(documents, seed=9) == build(documents, seed=9)
    assert build(documents, seed=9) != build(documents, seed=10)


def word_groups(ids):
    groups = []
    for position, token in enumerate(ids):
        if token in (SPECIAL.cls, SPECIAL.sep):
            continue
        if token >= CONTINUATION and groups and groups[-1][-1] == position - 1:
            groups[-1].append(position)
        else:
            groups.append([position])
    return groups


def test_whole_word_masking_takes_every_piece_of_a_word():
    instances = build(synthetic_documents(seed=6, count=100), seed=2, whole_word=True)
    split_words = whole = 0
    for instance in instances:
        chosen = set(instance.masked_lm_positions)
        for group in word_groups(originals(instance)):
            taken = [p in chosen for p in group]
            split_words += any(taken) and not all(taken)
            whole += len(group) > 1 and all(taken)
    assert split_words == 0 and whole > 100
    # Without whole-word masking, words are split.
    plain = build(synthetic_documents(seed=6, count=100), seed=2)
    assert sum(any(p in set(i.masked_lm_positions) for p in g) and
               not all(p in set(i.masked_lm_positions) for p in g)
               for i in plain for g in word_groups(originals(i))) > 100  # fmt: skip


def create_data(tmp_path, minilm_dir, *flags):
    command = ["-m", "tasks.create_pretraining_data",
               f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
               f"--output_file={tmp_path / 'out' / 'data'}", *flags]  # fmt: skip
    return run_binary(command)


def shards_in(folder):
    """The files in `folder` but the hidden lock of their prefix (`.<prefix>.lock`)."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*")))


def read_records(pattern):
    examples = []
    for path in sorted(glob.glob(pattern)):
        for record in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(record.numpy()).features.feature
            examples.append({k: list(v.int64_list.value or v.float_list.value)
                             for k, v in example.items()})  # fmt: skip
    return examples


@pytest.mark.slow
def test_binary_writes_the_documented_schema(tmp_path, minilm_dir):
    result = create_data(tmp_path, minilm_dir, f"--input_file={PRETRAIN}/bert_sample_text.txt",
                         "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=3",
                         "--num_output_shards=2")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shards = shards_in(tmp_path / "out")
    assert shards == ["data-00000-of-00002.tfrecord", "data-00001-of-00002.tfrecord"]
    examples = read_records(str(tmp_path / "out" / "*.tfrecord"))
    assert len(examples) > 20
    for e in examples:
        assert len(e["input_ids"]) == len(e["input_mask"]) == len(e["segment_ids"]) == 64
        n = int(sum(e["masked_lm_weights"]))
        assert len(e["masked_lm_positions"]) == len(e["masked_lm_ids"]) == 10 and 1 <= n <= 10
        length = sum(e["input_mask"])
        assert e["input_ids"][0] == 101 and e["input_ids"][length - 1] == 102
        assert all(p < length for p in e["masked_lm_positions"][:n])
        assert e["next_sentence_labels"][0] in (0, 1)


@pytest.mark.slow
def test_binary_is_deterministic_whatever_the_worker_count(tmp_path, minilm_dir):
    outputs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        result = create_data(out, minilm_dir, f"--input_file={PRETRAIN}/persuasion_part.txt",
                             "--input_format=text", "--dupe_factor=2", f"--num_workers={workers}")  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append((out / "out" / "data-00000-of-00001.tfrecord").read_bytes())
    assert outputs[0] == outputs[1]


@pytest.mark.slow
def test_encodings_line_endings_and_bad_input(tmp_path, minilm_dir):
    latin1 = f"--input_file={PRETRAIN}/caesar_latin1_part.txt"
    result = create_data(tmp_path, minilm_dir, latin1, "--input_format=text")
    assert result.returncode == 1 and re.search(
        r"caesar_latin1_part.txt:\d+: byte \d+ of the line \(0xe6\) is not valid utf-8", result.stderr)
    assert not shards_in(tmp_path / "out")
    result = create_data(tmp_path, minilm_dir, latin1, "--input_format=text",
                         "--input_encoding=latin-1")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    result = create_data(tmp_path / "e", minilm_dir, f"--input_file={empty}")
    assert result.returncode != 0 and "no text in" in result.stderr
    (tmp_path / "one.txt").write_text("A single sentence.\n\nAnd one more document.\n")
    result = create_data(tmp_path / "o", minilm_dir, f"--input_file={tmp_path / 'one.txt'}")
    assert result.returncode == 1 and "makes no pre-training pair" in result.stderr
    assert not shards_in(tmp_path / "o" / "out")
    result = create_data(tmp_path / "m", minilm_dir, f"--input_file={tmp_path}/nothing*.txt")
    assert result.returncode != 0 and "matches no file" in result.stderr


# The binary with tf.io.TFRecordWriter wrapped: at the second record of the second shard the
# process sends itself the signal its first argument names.
SIGNAL_WHILE_WRITING = """
import os, runpy, sys
import tensorflow as tf
signal_number, shards = int(sys.argv[1]), []
class Writer(tf.io.TFRecordWriter):
    def __init__(self, path):
        super().__init__(path)
        shards.append(0)
    def write(self, record):
        super().write(record)
        shards[-1] += 1
        if shards == [shards[0], 2]:
            os.kill(os.getpid(), signal_number)
tf.io.TFRecordWriter = Writer
sys.argv = ["create_pretraining_data", *sys.argv[2:]]
runpy.run_module("tasks.create_pretraining_data", run_name="__main__")
"""


@pytest.mark.slow
def test_a_stopped_binary_leaves_whole_shards_or_none(tmp_path, minilm_dir):
    flags = [f"--input_file={PRETRAIN}/bert_sample_text.txt", "--max_seq_length=64",
             "--dupe_factor=1", "--num_output_shards=4",
             f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
             f"--output_file={tmp_path / 'data'}"]  # fmt: skip
    # SIGTERM (Ctrl-C alike): the shard being written is removed, the message says what to do.
    stopped = run_binary(["-c", SIGNAL_WHILE_WRITING, "15", *flags])
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1] == (
        "terminated: every file written so far is whole; run the same command again to start "
        "over")  # fmt: skip
    assert shards_in(tmp_path) == ["data-00000-of-00004.tfrecord"]
    # SIGKILL leaves the half-written shard, which a glob of the shards matches: pre-training
    # refuses it, and the same command removes it.
    run_binary(["-c", SIGNAL_WHILE_WRITING, "9", *flags])
    unfinished = glob.glob(str(tmp_path / "data-00001-of-00004.tfrecord.tmp-*"))
    assert len(unfinished) == 1
    with pytest.raises(ValueError, match="is a shard that tasks.create_pretraining_data never "
                                         "finished"):  # fmt: skip
        pretraining_records.check_shard_sets(sorted(glob.glob(str(tmp_path / "data-*"))))
    again = run_binary(["-m", "tasks.create_pretraining_data", *flags])
    assert again.returncode == 0 and f"removing {unfinished[0]}" in again.stderr
    assert shards_in(tmp_path) == [f"data-0000{i}-of-00004.tfrecord" for i in range(4)]


def test_a_prefix_another_run_writes_is_refused(tmp_path, minilm_dir):
    (tmp_path / "out").mkdir()
    with open(tmp_path / "out" / ".data.lock", "a") as held:  # as a running binary holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = create_data(tmp_path, minilm_dir, f"--input_file={PRETRAIN}/bert_sample_text.txt")
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == (
        f"error: --output_file={tmp_path / 'out' / 'data'}: another run is writing shards with "
        "this prefix; wait for it to end, or pass another prefix")
    assert shards_in(tmp_path / "out") == []


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_no_partial_shard(tmp_path, minilm_dir):
    code = ("import resource, runpy, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # a write past it fails instead
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"  # below a shard
            "sys.argv = ['create_pretraining_data', *sys.argv[1:]]\n"
            "runpy.run_module('tasks.create_pretraining_data', run_name='__main__')\n")  # fmt: skip
    result = run_binary(["-c", code, f"--input_file={PRETRAIN}/bert_sample_text.txt",
                         "--max_seq_length=64", "--num_output_shards=2",
                         f"--vocab_file={os.path.join(minilm_dir, 'vocab.txt')}",
                         f"--output_file={tmp_path / 'data'}"])  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: could not write {tmp_path / 'data-00000-of-00002.tfrecord'} (the file grew past "
        "the file-size limit (ulimit -f)); make room, then run the same command again")
    assert shards_in(tmp_path) == []


def test_crlf_text_is_split_into_sentences():
    from tasks import pretraining_text

    documents = pretraining_text.read_documents(
        os.path.join(PRETRAIN, "moby_crlf_part.txt"), "text"
    )
    assert len(documents) > 10 and not any("\r" in s for d in documents for s in d)
    assert pretraining_text.split_sentences("Mr. Smith came. He sat down! Did he? Yes.") == [
        "Mr. Smith came.", "He sat down!", "Did he?", "Yes."]  # fmt: skip


def test_streaming_gives_new_masks_every_pass():
    from tasks import pretraining_text

    documents = synthetic_documents(seed=8, count=6)
    stream = pretraining_text.passes(documents, SPECIAL, seed=3, max_seq_length=64,
                                     max_predictions=10)  # fmt: skip
    first, second = next(stream), next(stream)
    assert first and second and first != second
    again = next(pretraining_text.passes(documents, SPECIAL, seed=3, max_seq_length=64,
                                         max_predictions=10))  # fmt: skip
    assert again == first  # deterministic for a seed
    dataset = pretraining_text.streaming_dataset(documents, SPECIAL, 3, 64, 10)
    example = next(dataset.as_numpy_iterator())
    assert example["input_ids"].shape == (64,) and example["masked_lm_ids"].shape == (10,)
    assert example["input_ids"].tolist()[: len(first[0].input_ids)] == first[0].input_ids


def test_one_sentence_documents_make_no_pairs_of_their_own_but_serve_as_random_b():
    lone = [[(7, True), (8, True), (9, True)]]  # a document of one sentence
    longer = [[(10 + i, True) for i in range(6)] for _ in range(4)]
    rng = np.random.default_rng(0)
    assert pretraining.instances_from_document([lone, longer], 0, SPECIAL, rng) == []
    made = [i for _ in range(40)
            for i in pretraining.instances_from_document([lone, longer], 1, SPECIAL, rng)]  # fmt: skip
    random_bs = [originals(i) for i in made if i.is_random_next]
    assert random_bs and all(ids[-4:-1] == [7, 8, 9] for ids in random_bs)
