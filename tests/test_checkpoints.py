import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, TINY_VOCAB, random_inputs, run_binary, write_vocab
from safetensors.numpy import load_file, save_file

from keras_bert import BertEncoder, checkpoints
from keras_bert.model.heads import MaskedLMHead, NextSentenceHead
from keras_bert.text import textfiles
from keras_bert.text.tokenizer import BertTokenizer

TINY_GOOGLE_CONFIG = {**TINY, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                      "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02}  # fmt: skip


def google_variables(encoder, masked_lm=None, next_sentence=None):
    """The original release's variable names, spelled out here independently of the library."""
    v = {}
    e = encoder.embeddings
    v["bert/embeddings/word_embeddings"] = e.word_embeddings.embeddings
    v["bert/embeddings/token_type_embeddings"] = e.token_type_embeddings.embeddings
    v["bert/embeddings/position_embeddings"] = e.position_embeddings
    v["bert/embeddings/LayerNorm/gamma"] = e.layer_norm.gamma
    v["bert/embeddings/LayerNorm/beta"] = e.layer_norm.beta
    for i, b in enumerate(encoder.transformer_layers):
        p = f"bert/encoder/layer_{i}/"
        for name, dense in [("attention/self/query", b.attention.query),
                            ("attention/self/key", b.attention.key),
                            ("attention/self/value", b.attention.value),
                            ("attention/output/dense", b.attention.output_dense),
                            ("intermediate/dense", b.intermediate),
                            ("output/dense", b.output_dense)]:  # fmt: skip
            v[p + name + "/kernel"], v[p + name + "/bias"] = dense.kernel, dense.bias
        for name, norm in [("attention/output/LayerNorm", b.attention_layer_norm),
                           ("output/LayerNorm", b.output_layer_norm)]:  # fmt: skip
            v[p + name + "/gamma"], v[p + name + "/beta"] = norm.gamma, norm.beta
    v["bert/pooler/dense/kernel"] = encoder.pooler.dense.kernel
    v["bert/pooler/dense/bias"] = encoder.pooler.dense.bias
    values = {name: var.numpy() for name, var in v.items()}
    if masked_lm is not None:
        values["cls/predictions/transform/dense/kernel"] = masked_lm.dense.kernel.numpy()
        values["cls/predictions/transform/dense/bias"] = masked_lm.dense.bias.numpy()
        values["cls/predictions/transform/LayerNorm/gamma"] = masked_lm.layer_norm.gamma.numpy()
        values["cls/predictions/transform/LayerNorm/beta"] = masked_lm.layer_norm.beta.numpy()
        values["cls/predictions/output_bias"] = masked_lm.output_bias.numpy()
    if next_sentence is not None:
        values["cls/seq_relationship/output_weights"] = next_sentence.dense.kernel.numpy().T
        values["cls/seq_relationship/output_bias"] = next_sentence.dense.bias.numpy()
    return values


def write_tf1_checkpoint(prefix, values):
    """Writes variables the way TF1 code (the original BERT) did: graph, Session, Saver."""
    with tf.Graph().as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=tf.constant(value))
                     for name, value in values.items()]  # fmt: skip
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix)


def random_heads(encoder):
    masked_lm = MaskedLMHead(encoder.embeddings.word_embeddings, "gelu_new", 0.02)
    masked_lm.build((None, None, 12))
    masked_lm.output_bias.assign(np.random.default_rng(5).normal(size=99))
    next_sentence = NextSentenceHead(0.02)
    next_sentence.build((None, 12))
    return masked_lm, next_sentence


def google_folder(path, encoder, masked_lm=None, next_sentence=None, config=TINY_GOOGLE_CONFIG,
                  extra=None):  # fmt: skip
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "bert_config.json"), "w") as f:
        json.dump(config, f)
    write_vocab(os.path.join(path, "vocab.txt"), TINY_VOCAB)
    values = google_variables(encoder, masked_lm, next_sentence)
    write_tf1_checkpoint(os.path.join(path, "bert_model.ckpt"), {**values, **(extra or {})})
    return str(path)


def heads_logits(ck, inputs):
    out = ck.encoder(inputs)
    positions = np.array([[1, 3]] * 3, "int32")
    return ck.masked_lm(out["sequence_output"], positions), ck.next_sentence(out["pooled_output"])


def test_google_tf1_checkpoint_with_both_heads_loads_exactly(tmp_path):
    encoder = BertEncoder(**{**TINY, "hidden_act": "gelu_new"})
    masked_lm, next_sentence = random_heads(encoder)
    path = google_folder(tmp_path / "google", encoder, masked_lm, next_sentence,
                         extra={"global_step": np.int64(7)})  # fmt: skip
    ck = checkpoints.load_checkpoint(path)
    # Google's "gelu" is the tanh approximation, recorded as such in the loaded config.
    assert ck.encoder.config.hidden_act == "gelu_new"
    inputs = random_inputs(lengths=[7, 4, 1])
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(ck.encoder(inputs)[key], encoder(inputs)[key])
    expected_mlm = masked_lm(encoder(inputs)["sequence_output"], np.array([[1, 3]] * 3, "int32"))
    mlm, nsp = heads_logits(ck, inputs)
    np.testing.assert_array_equal(mlm, expected_mlm)
    np.testing.assert_array_equal(nsp, next_sentence(encoder(inputs)["pooled_output"]))
    assert ck.masked_lm.word_embeddings is ck.encoder.embeddings.word_embeddings  # still tied


def test_encoder_only_google_checkpoint_has_no_heads(tmp_path):
    encoder = BertEncoder(**{**TINY, "hidden_act": "gelu_new"})
    ck = checkpoints.load_checkpoint(google_folder(tmp_path, encoder))
    assert ck.masked_lm is None and ck.next_sentence is None


@pytest.mark.parametrize("fmt", checkpoints.FORMATS)
def test_write_then_load_gives_identical_weights(tmp_path, fmt):
    encoder = BertEncoder(**TINY)
    heads = random_heads(encoder) if fmt != checkpoints.KERAS else (None, None)
    vocab = write_vocab(tmp_path / "vocab.txt", TINY_VOCAB)
    original = checkpoints.BertCheckpoint(encoder, vocab, True, *heads)
    checkpoints.save_checkpoint(original, str(tmp_path / fmt), fmt)
    assert not [n for n in os.listdir(tmp_path / fmt) if ".tmp-" in n]
    loaded = checkpoints.load_checkpoint(str(tmp_path / fmt))
    assert loaded.encoder.config == encoder.config
    assert loaded.do_lower_case is True
    models = [(original.encoder, loaded.encoder)]
    if fmt != checkpoints.KERAS:
        models += [
            (original.masked_lm, loaded.masked_lm),
            (original.next_sentence, loaded.next_sentence),
        ]
    for a, b in models:
        assert len(a.weights) == len(b.weights)
        for wa, wb in zip(a.weights, b.weights):
            np.testing.assert_array_equal(wa.numpy(), wb.numpy(), err_msg=wa.path)


def test_written_google_checkpoint_reads_with_tf_compat_v1_names(tmp_path):
    encoder = BertEncoder(**TINY)
    vocab = write_vocab(tmp_path / "vocab.txt", TINY_VOCAB)
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(encoder, vocab, True), str(tmp_path / "g"),
                                checkpoints.GOOGLE)  # fmt: skip
    reader = tf.train.load_checkpoint(str(tmp_path / "g" / "bert_model.ckpt"))
    expected = google_variables(encoder)
    assert set(reader.get_variable_to_shape_map()) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    config = json.loads((tmp_path / "g" / "bert_config.json").read_text())
    assert config["hidden_act"] == "gelu_exact"  # Google's "gelu" would mean the tanh form


def test_hugging_face_bert_model_layout(tmp_path, minilm_dir):
    keys = load_file(os.path.join(minilm_dir, "model.safetensors"))
    ck = checkpoints.load_checkpoint(minilm_dir)
    checkpoints.save_checkpoint(ck, str(tmp_path), checkpoints.HUGGING_FACE)
    written = load_file(str(tmp_path / "model.safetensors"))
    # Same names and values as the file we read, minus the position_ids buffer.
    assert set(written) == set(keys) - {"embeddings.position_ids"}
    for name, value in written.items():
        np.testing.assert_array_equal(value, keys[name], err_msg=name)


def _tiny_hf_folder(tmp_path):
    encoder = BertEncoder(**TINY)
    vocab = write_vocab(tmp_path / "vocab.txt", TINY_VOCAB)
    folder = str(tmp_path / "hf")
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(encoder, vocab, True), folder)
    return folder


def test_shape_mismatch_names_the_variable(tmp_path):
    folder = _tiny_hf_folder(tmp_path)
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    config["intermediate_size"] = 40
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(
        ValueError, match=r"encoder\.layer\.0\.intermediate\.dense\.weight has shape"
    ):
        checkpoints.load_checkpoint(folder)


def test_missing_and_unexpected_variables_are_named(tmp_path):
    folder = _tiny_hf_folder(tmp_path)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    save_file({k: v for k, v in tensors.items() if k != "pooler.dense.bias"}, path)
    with pytest.raises(ValueError, match=r"lacks 1 variable.*bert\.pooler\.dense\.bias"):
        checkpoints.load_checkpoint(folder)
    save_file({**tensors, "classifier.weight": np.zeros((2, 12), "float32")}, path)
    with pytest.raises(ValueError, match=r"no place for: classifier\.weight"):
        checkpoints.load_checkpoint(folder)


def test_google_unexpected_variable_is_named(tmp_path):
    encoder = BertEncoder(**{**TINY, "hidden_act": "gelu_new"})
    extra = {"output_weights": np.zeros((2, 12), "float32")}
    with pytest.raises(ValueError, match="no place for: output_weights"):
        checkpoints.load_checkpoint(google_folder(tmp_path, encoder, extra=extra))


def test_truncated_files_are_errors(tmp_path):
    folder = _tiny_hf_folder(tmp_path)
    path = os.path.join(folder, "model.safetensors")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors"):
        checkpoints.load_checkpoint(folder)

    encoder = BertEncoder(**{**TINY, "hidden_act": "gelu_new"})
    google = google_folder(tmp_path / "google", encoder)
    data_file = os.path.join(google, "bert_model.ckpt.data-00000-of-00001")
    data = open(data_file, "rb").read()
    open(data_file, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="could not read variable bert/"):
        checkpoints.load_checkpoint(google)


def test_pickled_pytorch_files_are_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="never unpickles"):
        checkpoints.load_checkpoint(str(tmp_path))


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError):
        checkpoints.load_checkpoint(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="is not a BERT checkpoint"):
        checkpoints.load_checkpoint(str(tmp_path))


def test_save_checkpoint_refuses_what_is_no_checkpoint_or_no_folder(tmp_path):
    checkpoint = checkpoints.load_checkpoint(_tiny_hf_folder(tmp_path))
    with pytest.raises(TypeError, match="takes a BertCheckpoint .*, got BertEncoder"):
        checkpoints.save_checkpoint(checkpoint.encoder, str(tmp_path / "out"))  # AttributeError
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match="a_file is a file; save_checkpoint writes a folder"):
        checkpoints.save_checkpoint(checkpoint, str(tmp_path / "a_file"))  # was Errno 17
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tokens", [len(TINY_VOCAB) + 100, len(TINY_VOCAB) - 3])
def test_a_vocab_of_another_size_than_the_embeddings_is_refused(tmp_path, tokens):
    folder = _tiny_hf_folder(tmp_path)
    vocab = os.path.join(folder, "vocab.txt")
    write_vocab(vocab, (TINY_VOCAB + [f"w{i}" for i in range(100)])[:tokens])
    with pytest.raises(ValueError, match=rf"^{vocab} has {tokens} tokens but the checkpoint has "
                                         r"99 word embeddings: it is not the checkpoint's "):
        checkpoints.load_checkpoint(folder)


def test_embedding_rows_padded_past_the_vocab_are_taken():
    checkpoints.check_vocabulary_fits("vocab.txt", 30522, 30528)  # a multiple of 8
    checkpoints.check_vocabulary_fits("vocab.txt", 30522, 30522)
    with pytest.raises(ValueError, match="30,522 tokens but the checkpoint has 30,523 word"):
        checkpoints.check_vocabulary_fits("vocab.txt", 30522, 30523)
    with pytest.raises(ValueError, match="28,996 tokens but the checkpoint has 30,522 word"):
        checkpoints.check_vocabulary_fits("vocab.txt", 28996, 30522)  # cased BERT's vocabulary


def test_a_cased_setting_over_an_uncased_vocab_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    write_vocab(folder / "vocab.txt", TINY_VOCAB)
    settings = folder / "tokenizer_config.json"
    settings.write_text('{"do_lower_case": false}')
    with pytest.raises(ValueError, match=rf"^do_lower_case=False, but .*vocab.txt is uncased .*"
                                         rf"{settings} says do_lower_case=false: set it to true"):
        checkpoints.find_vocabulary(str(folder))
    assert checkpoints.find_vocabulary(str(folder), do_lower_case=True)[1] is True  # the flag
    write_vocab(folder / "vocab.txt", TINY_VOCAB + ["Paris"])
    assert checkpoints.find_vocabulary(str(folder))[1] is False


def test_lower_casing_is_read_or_inferred(tmp_path, minilm_dir):
    assert checkpoints.find_vocabulary(minilm_dir)[1] is True  # tokenizer_config.json says so
    folder = tmp_path / "cased"
    folder.mkdir()
    write_vocab(folder / "vocab.txt", TINY_VOCAB + ["Paris"])
    assert checkpoints.find_vocabulary(str(folder))[1] is False
    write_vocab(folder / "vocab.txt", TINY_VOCAB)
    assert checkpoints.find_vocabulary(str(folder))[1] is True
    with pytest.raises(ValueError, match=r"^do_lower_case=False, but .*vocab.txt is uncased"):
        checkpoints.find_vocabulary(str(folder), do_lower_case=False)  # every "Paris" an [UNK]
    write_vocab(folder / "vocab.txt", TINY_VOCAB[:5] + ["巴", "黎", "。"])  # no cased letter
    assert checkpoints.find_vocabulary(str(folder), do_lower_case=False)[1] is False


def test_from_checkpoint_entry_points(tmp_path):
    folder = _tiny_hf_folder(tmp_path)
    encoder = checkpoints.load_checkpoint(folder).encoder
    tokenizer = BertTokenizer.from_checkpoint(folder)
    assert encoder.config.vocab_size == 99 and tokenizer.vocabulary == TINY_VOCAB


def test_unreadable_weights_are_named_as_unreadable(tmp_path, monkeypatch):
    folder = _tiny_hf_folder(tmp_path)
    weights = os.path.join(folder, "model.safetensors")

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(checkpoints, "open", refused, raising=False)
    with pytest.raises(ValueError, match=rf"^cannot read {weights}: Permission denied; check "
                                         r"that this user may read it$"):  # fmt: skip
        checkpoints.load_checkpoint(folder)
    monkeypatch.undo()
    with open(weights, "r+b") as f:
        f.truncate(64)
    with pytest.raises(ValueError, match=rf"^{weights} is not a whole safetensors file "
                                         r"\(truncated, or another format\)"):  # fmt: skip
        checkpoints.load_checkpoint(folder)


@pytest.mark.parametrize("fmt", ["huggingface", "google", "keras"])
def test_a_save_that_fails_part_way_leaves_the_old_checkpoint(tmp_path, monkeypatch, fmt):
    import errno

    vocab = write_vocab(tmp_path / "vocab.txt", TINY_VOCAB)
    folder = str(tmp_path / "ckpt")
    old = BertEncoder(**TINY)
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(old, vocab, True), folder, fmt)
    (tmp_path / "ckpt" / "NOTES.md").write_text("the user's own")
    before = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)
              if os.path.isfile(os.path.join(folder, n))}  # fmt: skip
    new = BertEncoder(**TINY)
    written = checkpoints._write_layout

    def full_disk(checkpoint, work, format):
        written(checkpoint, work, format)  # every file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "_write_layout", full_disk)
    with pytest.raises(OSError, match=rf"^could not write the checkpoint in {folder} \(the disk is "
                                      r"full\); the one there is as it was: make room, then save "
                                      "again$"):  # fmt: skip
        checkpoints.save_checkpoint(checkpoints.BertCheckpoint(new, vocab, True), folder, fmt)
    after = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)
             if os.path.isfile(os.path.join(folder, n))}  # fmt: skip
    assert after == before and sorted(os.listdir(folder)) == sorted(before)  # no work folder
    monkeypatch.undo()
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(new, vocab, True), folder, fmt)
    loaded = checkpoints.load_checkpoint(folder).encoder
    for a, b in zip(loaded.weights, new.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert (tmp_path / "ckpt" / "NOTES.md").read_text() == "the user's own"


# Each layout's writer reports a write past the file-size limit its own way (TensorFlow's
# OutOfRangeError, safetensors' SafetensorError, an OSError): save_checkpoint says it in one.
SAVE_PAST_A_FILE_SIZE_LIMIT = """
import json, resource, signal, sys
from keras_bert import checkpoints
checkpoint = checkpoints.load_checkpoint(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))  # above the vocabulary's size
for fmt in ("google", "huggingface", "keras"):
    try:
        checkpoints.save_checkpoint(checkpoint, f"{sys.argv[2]}/{fmt}", fmt)
        print(json.dumps([fmt, None, None]))
    except Exception as e:
        print(json.dumps([fmt, type(e).__name__, str(e)]))
"""


@pytest.mark.slow
def test_a_full_disk_is_one_oserror_in_every_layout(tmp_path, tiny_checkpoint):
    result = run_binary(["-c", SAVE_PAST_A_FILE_SIZE_LIMIT, tiny_checkpoint, str(tmp_path)])
    assert result.returncode == 0, result.stderr[-3000:]
    for line in result.stdout.splitlines():
        fmt, error, message = json.loads(line)
        assert error == "OSError" and message == (
            f"could not write the checkpoint in {tmp_path / fmt} (the file grew past the file-size "
            "limit (ulimit -f)); the one there is as it was: make room, then save again"), fmt
        assert os.listdir(tmp_path / fmt) == []  # no work folder left
        # A binary that saves (tasks.pretrain) reads it as a full disk, to say what it does next.
        assert textfiles.out_of_space(OSError(message)) == textfiles.FILE_SIZE_LIMIT
    assert len(result.stdout.splitlines()) == 3


class Killed(BaseException):
    """A kill at a chosen moment: nothing after it runs, no handler catches it."""


@pytest.mark.parametrize("fmt", ["huggingface", "google"])
def test_a_save_killed_at_any_move_leaves_the_old_checkpoint_or_the_new(tmp_path, monkeypatch,
                                                                         fmt):
    # Kill the save at each of its renames in turn; the folder then loads as the old checkpoint
    # (killed before the new config was in place) or the new one (after), never as neither.
    vocab = write_vocab(tmp_path / "vocab.txt", TINY_VOCAB)
    old, new = BertEncoder(**TINY), BertEncoder(**TINY)
    replace = os.replace
    moment = 0
    while True:
        folder = str(tmp_path / f"ckpt{moment}")
        checkpoints.save_checkpoint(checkpoints.BertCheckpoint(old, vocab, True), folder, fmt)
        calls = []

        def killing_replace(*args, calls=calls, moment=moment, **kwargs):
            if len(calls) == moment:
                raise Killed
            calls.append(args)
            return replace(*args, **kwargs)

        monkeypatch.setattr(os, "replace", killing_replace)
        try:
            checkpoints.save_checkpoint(checkpoints.BertCheckpoint(new, vocab, True), folder, fmt)
            finished = True
        except Killed:
            finished = False
        monkeypatch.undo()
        config = "config.json" if fmt == "huggingface" else "bert_config.json"
        new_config_in = any(dst == os.path.join(folder, config) and ".save-tmp-" in src
                            for src, dst in calls)  # fmt: skip
        loaded = checkpoints.load_checkpoint(folder).encoder
        expected = new if new_config_in else old
        for a, b in zip(loaded.weights, expected.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert not [n for n in os.listdir(folder) if n.startswith(".save-")], os.listdir(folder)
        if finished:
            break
        moment += 1
    assert moment > 6  # the plan twice, the old files aside, the new ones in
