"""tasks.extract_features against the encoder called directly: the original per-token JSON
lines, the compact .npy vectors, and a run killed mid-file that continues where it stopped."""

import json
import os
import signal

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, run_binary

from keras_bert import BertPreprocessor
from keras_bert.models.pretrained import load_pretrained
from tasks.extractors import Extractor

TEXTS = ["The cat sat on the mat.", "A man is playing a guitar. ||| Someone plays an instrument.",
         "Short", "Zürich's café, 1999!", "two ||| parts", "the dog barked at the mailman"]  # fmt: skip

# Runs the binary with runs.write_json replaced: after its second call (two batches written
# and recorded), the process sends itself the signal its first argument names: SIGKILL, as a
# power cut would stop it, or SIGINT, as Ctrl-C does.
SIGNAL_AFTER_TWO_BATCHES = """
import os, runpy, signal, sys
from tasks import runs
calls, signal_number = [], int(sys.argv[1])
write_json = runs.write_json
def dying_write_json(path, value):
    write_json(path, value)
    calls.append(path)
    if len(calls) == 2:
        os.kill(os.getpid(), signal_number)
runs.write_json = dying_write_json
sys.argv = ["extract_features", *sys.argv[2:]]
runpy.run_module("tasks.extract_features", run_name="__main__")
"""


# The binary with runs.write_json wrapped: after the first batch is recorded, a line is added to
# the input file, as another program writing to it would.
GROW_AFTER_ONE_BATCH = """
import runpy, sys
from tasks import runs
write_json = runs.write_json
def growing_write_json(path, value):
    write_json(path, value)
    if value["done"] == 2:
        with open(sys.argv[1].split("=", 1)[1], "a", encoding="utf-8") as f:
            f.write("a text added while the run read the file\\n")
runs.write_json = growing_write_json
sys.argv = ["extract_features", *sys.argv[1:]]
runpy.run_module("tasks.extract_features", run_name="__main__")
"""

@pytest.fixture
def input_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return str(path)


def extract(*args, prefix=("-m", "tasks.extract_features"), expect=0, fresh=False):
    result = run_binary([*prefix, *args], fresh=fresh)
    assert result.returncode == expect, result.stderr[-3000:]
    return result


def direct(checkpoint, texts, sequence_length=32):
    """(ids, encoder_outputs) of each text, from the library's encoder called directly."""
    encoder, tokenizer, _ = load_pretrained(checkpoint)
    preprocess = {n: BertPreprocessor.from_tokenizer(tokenizer, sequence_length, num_segments=n)
                  for n in (1, 2)}  # fmt: skip
    results = []
    for text in texts:
        parts = [p.strip() for p in text.split("|||")]
        inputs = preprocess[len(parts)](
            tf.constant(parts[:1]) if len(parts) == 1 else tuple(tf.constant([p]) for p in parts))
        outputs = encoder(inputs)["encoder_outputs"]
        real = int(inputs["input_mask"].numpy().sum())
        results.append((inputs["input_word_ids"].numpy()[0, :real],
                        [o.numpy()[0, :real] for o in outputs]))  # fmt: skip
    return results, tokenizer.vocabulary


def test_per_token_values_are_the_encoders(tmp_path, input_file, two_block_checkpoint):
    output = str(tmp_path / "features.jsonl")
    # fresh: the binary's one run in a process of its own (conftest.run_binary says why).
    extract(f"--input_file={input_file}", f"--output_file={output}", "--layers=-1,0",
            f"--init_checkpoint={two_block_checkpoint}", "--max_seq_length=32", "--batch_size=4",
            fresh=True)
    records = [json.loads(line) for line in open(output, encoding="utf-8")]
    expected, vocabulary = direct(two_block_checkpoint, TEXTS)
    assert [r["linex_index"] for r in records] == list(range(len(TEXTS)))
    for record, (ids, outputs) in zip(records, expected):
        assert [f["token"] for f in record["features"]] == [vocabulary[i] for i in ids]
        for layer in (-1, 0):
            got = np.array([[v for x in f["layers"] if x["index"] == layer for v in x["values"]]
                            for f in record["features"]])  # fmt: skip
            np.testing.assert_allclose(got, outputs[layer], atol=2e-6)
    assert records[1]["features"][0]["token"] == "[CLS]"
    assert [f["token"] for f in records[4]["features"]] == ["[CLS]", "two", "[SEP]", "parts",
                                                            "[SEP]"]
    assert sorted(os.listdir(tmp_path)) == ["features.jsonl", "texts.txt"]


@pytest.mark.slow
def test_vectors_per_text_in_input_order(tmp_path, input_file, minilm_dir):
    expected, _ = direct(minilm_dir, TEXTS)
    for pooling, vector in [("mean", lambda o: o[-1].mean(0)), ("cls", lambda o: o[-1][0]),
                            ("concat_last4", lambda o: np.concatenate(
                                [o[i].mean(0) for i in (-1, -2, -3, -4)]))]:  # fmt: skip
        output = str(tmp_path / f"{pooling}.npy")
        extract(f"--input_file={input_file}", f"--output_file={output}", "--output_format=npy",
                f"--pooling={pooling}", "--max_seq_length=32", "--batch_size=4")
        vectors = np.load(output)
        assert vectors.dtype == np.float32
        np.testing.assert_allclose(vectors, [vector(o) for _, o in expected], atol=2e-5)
    assert np.load(str(tmp_path / "concat_last4.npy")).shape == (len(TEXTS), 4 * 384)


def test_an_input_file_changed_during_the_run_writes_no_output(tmp_path, input_file,
                                                               tiny_checkpoint):
    output = str(tmp_path / "out.jsonl")
    result = extract(f"--input_file={input_file}", f"--output_file={output}", "--layers=-1",
                     f"--init_checkpoint={tiny_checkpoint}", "--max_seq_length=32",
                     "--batch_size=2", prefix=("-c", GROW_AFTER_ONE_BATCH), expect=1)  # fmt: skip
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: --input_file={input_file} changed while it was read (it is not what was "
        "checked before the run), so no output is written; pass --overwrite to start again")
    assert not os.path.exists(output)


def test_one_pass_checks_counts_and_digests_the_input(input_file):
    # The digest a stopped run is continued under comes from the pass that checks the lines,
    # and is the one every other binary records (runs.data_digest).
    code = ("import sys; from tasks import extract_features as e, runs; n, d = e.scan(sys.argv[1])"
            "; print(n, d == runs.data_digest([sys.argv[1]]))")  # fmt: skip
    assert extract(input_file, prefix=("-c", code)).stdout.split() == [str(len(TEXTS)), "True"]


@pytest.mark.slow
def test_a_killed_run_continues_where_it_stopped(tmp_path, input_file, tiny_checkpoint):
    flags = [f"--input_file={input_file}", "--layers=-1", f"--init_checkpoint={tiny_checkpoint}",
             "--max_seq_length=32", "--batch_size=2"]  # fmt: skip
    whole = str(tmp_path / "whole.jsonl")
    extract(*flags, f"--output_file={whole}")
    output = str(tmp_path / "out.jsonl")
    extract(*flags, f"--output_file={output}", prefix=("-c", SIGNAL_AFTER_TWO_BATCHES, "9"),
            expect=-9)  # fmt: skip
    assert not os.path.exists(output) and os.path.exists(output + ".partial")
    again = extract(*flags, f"--output_file={output}")
    assert "continuing a stopped run: 4 of 6 texts were written" in again.stderr
    assert open(output, encoding="utf-8").read() == open(whole, encoding="utf-8").read()
    assert not os.path.exists(output + ".partial") and not os.path.exists(output + ".progress.json")
    # A finished file is not replaced unless asked; other flags do not reuse a stopped run.
    refused = extract(*flags, f"--output_file={output}", expect=1)
    assert "exists; pass --overwrite" in refused.stderr
    # Ctrl-C says in one line that the same command goes on; a stopped run whose input file
    # was edited since is not continued: its first texts' features would be the old texts'.
    stopped = str(tmp_path / "stopped.jsonl")
    interrupted = extract(*flags, f"--output_file={stopped}", expect=130,
                          prefix=("-c", SIGNAL_AFTER_TWO_BATCHES, str(int(signal.SIGINT))))
    assert "Traceback" not in interrupted.stderr
    assert interrupted.stderr.strip().splitlines()[-1] == (
        f"interrupted: run the same command again to go on after the last batch written to "
        f"{stopped}.partial")
    with open(input_file, "a", encoding="utf-8") as f:
        f.write("one more text\n")
    refused = extract(*flags, f"--output_file={stopped}", expect=1)
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: --input_file={input_file} has changed since the run that "
        f"{stopped}.progress.json records stopped; pass --overwrite to start again")
    extract(*flags, f"--output_file={stopped}", "--overwrite")
    assert len(open(stopped, encoding="utf-8").read().splitlines()) == 7


def test_a_batch_computes_alike_whatever_batches_came_before(tiny_checkpoint):
    """A continued run's first batch is its process's first: it must run the graph the
    uninterrupted run ran it with, to the last bit."""
    encoder, tokenizer, _ = load_pretrained(tiny_checkpoint)
    texts = ["The Normans gave their name to Normandy, a region in France.", "a fine film",
             "what a dull film that goes on and on and on", "yes"]  # fmt: skip
    batch = [(i + 1, text, None) for i, text in enumerate(texts)]
    alone, _ = Extractor(encoder, tokenizer, 64, [-1])(batch)
    extractor = Extractor(encoder, tokenizer, 64, [-1])
    extractor([(9, "something else entirely, and a little longer than the rest of them", None)])
    after, _ = extractor(batch)
    for (ids, [values]), (ids_after, [values_after]) in zip(alone, after):
        np.testing.assert_array_equal(ids, ids_after)
        assert values.tobytes() == values_after.tobytes()  # was 5e-7 apart


@pytest.mark.slow
def test_sentence_vectors_are_sentence_transformers(tmp_path, minilm_dir):
    golden = np.load(os.path.join(DATA, "minilm_sentence_golden.npz"))
    keep = [i for i, t in enumerate(golden["texts"]) if t.strip()]  # a line holds a text
    texts = tmp_path / "corpus.txt"
    texts.write_text("\n".join(golden["texts"][keep]) + "\n", encoding="utf-8")
    output = str(tmp_path / "corpus.npy")
    # The checkpoint's pooling, normalisation and length (256, its sentence_bert_config.json).
    extract(f"--input_file={texts}", f"--output_file={output}", "--output_format=npy",
            "--pooling=sentence", "--batch_size=8")
    vectors, expected = np.load(output), golden["vectors"][keep]
    assert vectors.shape == expected.shape and vectors.dtype == np.float32
    assert ((vectors * expected).sum(1) / np.linalg.norm(expected, axis=1)).min() >= 0.99999
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("one text\nfirst ||| second\n", encoding="utf-8")
    result = extract(f"--input_file={pairs}", f"--output_file={tmp_path / 'p.npy'}",
                     "--output_format=npy", "--pooling=sentence", expect=1)
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {pairs}:2: a pair of texts, but --pooling=sentence embeds one text a line; "
        "remove the '|||'")
