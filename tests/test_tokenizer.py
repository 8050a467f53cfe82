import json
import os
import subprocess
import sys
import unicodedata

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, TINY_VOCAB, write_vocab

from keras_bert import serving
from keras_bert.text.packer import BertPacker
from keras_bert.text.tokenizer import BertTokenizer, wordpiece_model


@pytest.fixture(scope="module")
def texts():
    with open(os.path.join(DATA, "tokenizer_texts.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def golden():
    with open(os.path.join(DATA, "tokenizer_golden.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("casing", ["uncased", "cased"])
@pytest.mark.parametrize("group", ["sst2", "squad", "conll", "edge_cases"])
def test_ids_match_the_reference_tokenizer(minilm_dir, texts, golden, casing, group):
    tokenizer = BertTokenizer(
        os.path.join(minilm_dir, "vocab.txt"), do_lower_case=casing == "uncased"
    )
    ids = tokenizer(tf.constant(texts[group])).to_list()
    for text, got, expected in zip(texts[group], ids, golden[casing][group]):
        assert got == expected, text


@pytest.mark.parametrize("casing", ["uncased", "cased"])
def test_a_traced_call_tokenizes_a_batch_in_halves_with_the_reference_ids(
    minilm_dir, texts, golden, casing
):
    """In a graph, a batch of SPLIT_FROM texts or more is tokenized as two halves, each
    checked and cleaned on its own. Batches either side of that size, with halves of printable
    ASCII only, of other texts only, and of both, must give the reference ids in order."""
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"),
                              do_lower_case=casing == "uncased")  # fmt: skip
    traced = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])
    graph = traced.get_concrete_function().graph.as_graph_def()
    wordpieces = [n for f in graph.library.function for n in f.node_def
                  if n.op == "FastWordpieceTokenizeWithOffsets"]  # fmt: skip
    assert len(wordpieces) == 3  # the whole batch, or each of its halves
    printable = [(t, ids) for t, ids in zip(texts["sst2"], golden[casing]["sst2"])
                 if t.isascii() and t.isprintable()][:40]  # fmt: skip
    others = [(t, ids) for t, ids in zip(texts["squad"] + texts["edge_cases"],
                                         golden[casing]["squad"] + golden[casing]["edge_cases"])
              if not (t.isascii() and t.isprintable())]  # fmt: skip
    split = BertTokenizer.SPLIT_FROM
    batches = [printable[:split - 1], printable[:split], others[:split], others[:split + 1],
               printable[:split] + others[:split], others[:9] + printable[:9], printable,
               others[:1], []]  # fmt: skip
    for batch in batches:
        ids = traced(tf.constant([t for t, _ in batch], tf.string)).to_list()
        assert ids == [expected for _, expected in batch], len(batch)


def test_a_call_from_python_runs_one_traced_graph_until_the_vocabulary_changes(
        minilm_dir, monkeypatch):  # fmt: skip
    """Called eagerly on a batch, the tokenizer runs a graph traced on its first such call
    (op by op, a list of texts also went through Keras's Layer.__call__ string by string),
    and traces it again after set_vocabulary, whose ids it then gives."""
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    traced_ids = []  # _ids' Python body: once per eager call op by op, only in tracing now
    ids_of = BertTokenizer._ids
    monkeypatch.setattr(tokenizer, "_ids", lambda t: traced_ids.append(1) or ids_of(tokenizer, t))
    texts = ["a gripping , moving film", "dull"]
    first = tokenizer(texts)
    traced = len(traced_ids)
    assert isinstance(first, tf.RaggedTensor) and traced > 0
    assert tokenizer(np.array(texts * 20)).to_list() == first.to_list() * 20
    assert tokenizer(tf.constant(texts[1:])).to_list() == first.to_list()[1:]
    assert len(traced_ids) == traced  # other batch sizes and types: the same graph

    vocabulary = list(tokenizer.vocabulary)
    a, b = vocabulary.index("gripping"), vocabulary.index("moving")
    assert first.to_list()[0][1:4] == [a, 1010, b]
    vocabulary[a], vocabulary[b] = "moving", "gripping"
    tokenizer.set_vocabulary(vocabulary)
    assert tokenizer(texts).to_list()[0][1:4] == [b, 1010, a]
    assert len(traced_ids) == 2 * traced
    # Texts of other ranks still run op by op.
    assert tokenizer(tf.constant("dull")).numpy().tolist() == first.to_list()[1]


@pytest.mark.parametrize("lower_case", [True, False])
def test_ascii_texts_take_a_whole_text_path_with_the_same_ids(minilm_dir, texts, lower_case):
    """call() cleans pure-ASCII texts whole; tokenize_with_offsets() character by character.
    Random ASCII (controls, tabs, CR/LF, DEL, punctuation) and the reference texts mixed with
    non-ASCII ones in one batch must give the same ids both ways, in the batch's order."""
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lower_case)
    rng = np.random.default_rng(7)
    alphabet = [chr(i) for i in range(128)] + list("aeiou   ") * 8
    noise = ["".join(rng.choice(alphabet, rng.integers(0, 40))) for _ in range(300)]
    batch = tf.constant(noise + texts["sst2"] + texts["edge_cases"] + ["", "Ünï ΣΑΣ", "A\x7fB"])
    assert tokenizer(batch).to_list() == tokenizer.tokenize_with_offsets(batch)[0].to_list()


def _normalise(text):
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


def test_offsets_are_characters_that_spell_each_token(minilm_dir, texts):
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"))
    all_texts = [t for group in texts.values() for t in group]
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(all_texts))
    checked = exact = 0
    for text, row_ids, row_starts, row_ends in zip(all_texts, ids.to_list(), starts.to_list(),
                                                   ends.to_list()):  # fmt: skip
        assert row_starts == sorted(row_starts) and all(e <= len(text) for e in row_ends)
        for i, s, e in zip(row_ids, row_starts, row_ends):
            token = tokenizer.vocabulary[i]
            if token != "[UNK]":
                # Usually equal; NFD can split one character (Hangul) into several tokens.
                assert token.removeprefix("##") in _normalise(text[s:e]), (text, s, e, token)
                exact += _normalise(text[s:e]) == token.removeprefix("##")
                checked += 1
    assert checked > 9_000 and exact > 0.99 * checked


def test_offsets_count_characters_not_bytes():
    tokenizer = BertTokenizer(TINY_VOCAB, do_lower_case=False)
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["中 é the cat"]))
    assert [TINY_VOCAB[i] for i in ids.to_list()[0]] == ["中", "é", "the", "cat"]
    assert starts.to_list()[0] == [0, 2, 4, 8]
    assert ends.to_list()[0] == [1, 3, 7, 11]


def test_bad_strings_give_answers_not_errors():
    tokenizer = BertTokenizer(TINY_VOCAB)
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([b"the \xff\xfe cat", b""]))
    assert [TINY_VOCAB[i] for i in ids.to_list()[0]] == ["the", "cat"]
    assert starts.to_list()[0] == [0, 7]  # each invalid byte became one (removed) character
    assert ids.to_list()[1] == []


def test_long_words_become_unknown():
    tokenizer = BertTokenizer(TINY_VOCAB)
    ids = tokenizer(tf.constant(["the" + "s" * 97, "the" + "s" * 98])).to_list()
    assert [TINY_VOCAB[i] for i in ids[0]][:2] == ["the", "##s"]
    assert ids[1] == [TINY_VOCAB.index("[UNK]")]


def test_tokenizers_of_one_vocabulary_share_one_wordpiece_model(minilm_dir):
    """Building the WordPiece model is most of the work of making a tokenizer: a second one of
    the same vocabulary (a model loaded, an export's copy) takes the first one's."""
    wordpiece_model.cache_clear()
    first, second = (BertTokenizer.from_checkpoint(minilm_dir) for _ in range(2))
    assert wordpiece_model.cache_info()[:2] == (1, 1)  # hits, misses
    texts = tf.constant(["Hello, wonderful world!", "an unaffable " + "x" * 120])
    assert first(texts).to_list() == second(texts).to_list()
    BertTokenizer(TINY_VOCAB)
    assert wordpiece_model.cache_info()[:2] == (1, 2)


def test_a_checkpoint_that_is_not_there_is_named_as_missing(tmp_path):
    # It was "<the folder above> has no vocab.txt".
    with pytest.raises(FileNotFoundError, match=r"^checkpoint not found: .*nowhere$"):
        BertTokenizer.from_checkpoint(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("missing", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
def test_vocab_without_a_special_token_is_refused(tmp_path, missing):
    path = write_vocab(tmp_path / "vocab.txt", [t for t in TINY_VOCAB if t != missing])
    with pytest.raises(ValueError, match=rf"has no \{missing[:-1]}\]"):
        BertTokenizer(path)


def test_bad_vocab_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing.txt: no such file \(the vocabulary"):
        BertTokenizer(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="is a folder, not a file"):
        BertTokenizer(str(tmp_path))
    path = tmp_path / "latin1.txt"
    path.write_bytes("\n".join(TINY_VOCAB[:10] + ["caf\xe9"]).encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt:11: byte 4 of the line \(0xe9\) is not valid"):
        BertTokenizer(str(path))
    with pytest.raises(ValueError, match="lists the token 'cat' twice"):
        BertTokenizer(TINY_VOCAB + ["cat"])


def test_a_lower_casing_setting_that_is_no_bool_is_refused(tmp_path):
    # The string "false" is truthy: taken, it lower-cased every text of a cased vocabulary.
    with pytest.raises(ValueError, match="^do_lower_case must be true or false, got 'false'$"):
        BertTokenizer(TINY_VOCAB, do_lower_case="false")
    with pytest.raises(ValueError, match="^do_lower_case must be true or false, got 0$"):
        BertTokenizer.from_checkpoint(write_vocab(tmp_path / "vocab.txt", TINY_VOCAB), 0)
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": "false"}')
    with pytest.raises(ValueError, match=r"tokenizer_config.json: do_lower_case must be true or "
                                         "false, got 'false'$"):  # fmt: skip
        BertTokenizer.from_checkpoint(str(tmp_path))


def test_a_tokenizer_without_a_vocabulary_says_so(tmp_path):
    """BertTokenizer() (what Keras builds before loading a saved vocabulary) failed with
    AttributeError '_wordpiece' when called, and TypeError when saved."""
    empty = BertTokenizer()
    for use in (lambda: empty(["a text"]), lambda: empty.tokenize_with_offsets(["a text"]),
                lambda: empty.cls_id, lambda: empty.save_assets(str(tmp_path))):  # fmt: skip
        with pytest.raises(ValueError, match="has no vocabulary: pass one .* or call "
                                             "set_vocabulary"):  # fmt: skip
            use()
    empty.set_vocabulary(TINY_VOCAB)
    assert empty(["the cat"]).to_list() == [[TINY_VOCAB.index("the"), TINY_VOCAB.index("cat")]]


def test_a_vocabulary_saved_with_windows_line_ends_reads_the_same(tmp_path):
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(("\r\n".join(TINY_VOCAB) + "\r\n").encode())
    lf = write_vocab(tmp_path / "lf.txt", TINY_VOCAB)
    assert BertTokenizer(str(crlf)).vocabulary == BertTokenizer(lf).vocabulary == TINY_VOCAB
    texts = tf.constant(["the cat sat on the mat!"])
    assert BertTokenizer(str(crlf))(texts).to_list() == BertTokenizer(lf)(texts).to_list()


def test_works_in_tf_data_and_in_a_saved_function(tmp_path):
    tokenizer = BertTokenizer(TINY_VOCAB)
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=6)
    sentences = ["the cat sat on the mat", "hello world!", ""]
    eager = packer(tokenizer(tf.constant(sentences)))
    dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(3).map(
        lambda s: packer(tokenizer(s)))  # fmt: skip
    from_data = next(iter(dataset))

    module = tf.Module()
    module.tokenizer, module.packer = tokenizer, packer
    spec = tf.TensorSpec([None], tf.string)
    module.preprocess = tf.function(lambda s: packer(tokenizer(s)), input_signature=[spec])
    module.pairs = tf.function(lambda a, b: packer(tokenizer(a), tokenizer(b)),
                               input_signature=[spec, spec])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    from_saved = reloaded.preprocess(tf.constant(sentences))
    for key in eager:
        np.testing.assert_array_equal(eager[key], from_data[key])
        np.testing.assert_array_equal(eager[key], from_saved[key])
    seconds = tf.constant(["hello world", "the dog", "a"])
    eager_pairs = packer(tokenizer(tf.constant(sentences)), tokenizer(seconds))
    saved_pairs = reloaded.pairs(tf.constant(sentences), seconds)
    for key in eager_pairs:
        np.testing.assert_array_equal(eager_pairs[key], saved_pairs[key])


def test_graph_uses_only_core_ops_and_two_old_tf_text_ops():
    """TF Serving 2.12+ bundles tensorflow-text 2.12, which has these two ops (and lacks newer
    ones such as RoundRobinTrim); everything else must be core TensorFlow."""
    tokenizer = BertTokenizer(TINY_VOCAB)
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=9)
    spec = tf.TensorSpec([None], tf.string)
    graph = (
        tf.function(
            lambda a, b: (packer(tokenizer(a), tokenizer(b)), tokenizer.tokenize_with_offsets(a))
        )
        .get_concrete_function(spec, spec)
        .graph.as_graph_def()
    )
    ops = {node.op for node in serving.graph_def_nodes(graph)}
    not_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    assert not_core == {"NormalizeUTF8", "FastWordpieceTokenizeWithOffsets"}


def test_keras_config_round_trip_with_the_vocabulary_as_an_asset(tmp_path):
    tokenizer = BertTokenizer(TINY_VOCAB, do_lower_case=False)
    clone = keras.layers.deserialize(keras.layers.serialize(tokenizer))
    assert clone.vocabulary is None and clone.do_lower_case is False  # not in the config
    tokenizer.save_assets(str(tmp_path))
    clone.load_assets(str(tmp_path))
    assert clone.vocabulary == TINY_VOCAB
    text = tf.constant(["the cat sat on the mat"])
    assert clone(text).to_list() == tokenizer(text).to_list()
    packer = BertPacker(2, 3, 0, sequence_length=9, pad_to_sequence_length=True)
    assert (
        keras.layers.deserialize(keras.layers.serialize(packer)).get_config() == packer.get_config()
    )


def test_cased_tokenizer_keeps_case_and_accents():
    vocab = TINY_VOCAB + ["The", "Café", "caf", "##é"]
    cased = BertTokenizer(vocab, do_lower_case=False)
    uncased = BertTokenizer(vocab, do_lower_case=True)
    assert [vocab[i] for i in cased(tf.constant(["The café"])).to_list()[0]] == [
        "The",
        "caf",
        "##é",
    ]
    assert [vocab[i] for i in uncased(tf.constant(["The Café"])).to_list()[0]] == ["the", "[UNK]"]


# --- packer ---


def google_truncate(a, b, budget):
    """The original BERT loop: pop from the longer sequence (the second on ties)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def test_pair_truncation_is_longest_first_like_the_original():
    rng = np.random.default_rng(0)
    packer = BertPacker(cls_id=1, sep_id=2, pad_id=0, sequence_length=11)
    for _ in range(20):
        lengths = rng.integers(0, 14, (8, 2))
        first = tf.ragged.constant([list(range(10, 10 + n)) for n in lengths[:, 0]], tf.int32)
        second = tf.ragged.constant([list(range(50, 50 + n)) for n in lengths[:, 1]], tf.int32)
        packed = packer(first, second)
        for row, (a, b) in enumerate(zip(first.to_list(), second.to_list())):
            a, b = google_truncate(a, b, 8)
            expected = [1, *a, 2, *b, 2]
            n, padding = len(expected), [0] * (packed["input_mask"].shape[1] - len(expected))
            assert packed["input_word_ids"][row].numpy().tolist() == expected + padding
            assert packed["input_type_ids"][row].numpy().tolist() == (
                [0] * (len(a) + 2) + [1] * (len(b) + 1) + padding)
            assert packed["input_mask"][row].numpy().tolist() == [1] * n + padding


def test_dynamic_and_fixed_padding():
    segments = tf.ragged.constant([[5, 6], [7, 8, 9, 10, 11, 12, 13, 14, 15, 16]], tf.int32)
    dynamic = BertPacker(1, 2, 0, sequence_length=8)(segments)
    assert dynamic["input_word_ids"].numpy().tolist() == [[1, 5, 6, 2, 0, 0, 0, 0],
                                                          [1, 7, 8, 9, 10, 11, 12, 2]]  # fmt: skip
    short = BertPacker(1, 2, 0, sequence_length=128)(segments[:1])
    assert short["input_word_ids"].shape == (1, 4)  # padded to the longest, not to 128
    fixed = BertPacker(1, 2, 0, sequence_length=128, pad_to_sequence_length=True)(segments[:1])
    assert fixed["input_word_ids"].shape == (1, 128) and fixed["input_mask"].numpy().sum() == 4
    for value in dynamic.values():
        assert value.dtype == tf.int32


def test_empty_strings_give_cls_sep(minilm_dir):
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    packed = BertPacker.from_tokenizer(tokenizer)(tokenizer(tf.constant(["", "  \t "])))
    assert packed["input_word_ids"].numpy().tolist() == [[101, 102], [101, 102]]


def test_packer_refuses_what_is_not_a_batch_of_token_lists(minilm_dir):
    """One text's tokens (dense), texts of shape (a, b) (ragged of rank 3) and padded ids
    (dense) are refused with one message naming the segment and what it got; they raised
    AttributeError or an op error from deep inside before."""
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=8)
    batch = tokenizer(tf.constant(["a fine film", "dull"]))
    for bad, name, what in [((tokenizer(tf.constant("one text")),), "first", "dense"),
                            ((tokenizer(tf.constant([["a", "b"]])),), "first", "ragged"),
                            ((batch, batch.to_tensor()), "second", "dense")]:
        with pytest.raises(ValueError, match=rf"{name} segment must be ragged \(batch, "
                                             rf"\(tokens\)\).*got a {what} tensor"):
            packer(*bad)
    with pytest.raises(ValueError, match=r"first segment must be ragged .* got a list, not token "
                                         "ids"):  # fmt: skip
        packer(["a fine film"])  # was AttributeError: 'list' object has no attribute 'shape'
    for length in (2, None, 8.5):  # None was a TypeError from the comparison
        with pytest.raises(ValueError, match=f"sequence_length must be a whole number of at "
                                             f"least 3, got {length}"):  # fmt: skip
            BertPacker.from_tokenizer(tokenizer, sequence_length=length)
    assert packer(batch, batch)["input_word_ids"].shape == (2, 8)


def test_packer_refuses_segments_of_different_batch_sizes(minilm_dir):
    """A second segment of one row was broadcast to every first one: a pair classifier's
    export, asked with two sentence1 and one sentence2, answered twice for the one pair."""
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    packer = BertPacker.from_tokenizer(tokenizer, sequence_length=8)
    first, second = tokenizer(tf.constant(["a fine film", "dull"])), tokenizer(tf.constant(["x"]))
    with pytest.raises(ValueError, match="two segments differ in batch size: give one of each "
                                         r"per example \(got 2 and 1\)"):  # fmt: skip
        packer(first, second)
    texts = tf.TensorSpec([None], tf.string)  # sizes known only when the graph runs

    @tf.function(input_signature=[texts, texts])
    def pack(a, b):
        return packer(tokenizer(a), tokenizer(b))

    with pytest.raises(tf.errors.InvalidArgumentError, match="two segments differ in batch size"):
        pack(tf.constant(["a fine film", "dull"]), tf.constant(["x"]))
    pairs = tf.constant(["a fine film", "dull"]), tf.constant(["x", "y"])
    eager = packer(*[tokenizer(t) for t in pairs])
    np.testing.assert_array_equal(pack(*pairs)["input_word_ids"], eager["input_word_ids"])


@pytest.mark.parametrize("pad_to_sequence_length", [False, True])
def test_one_segment_packs_as_the_general_packing_does(pad_to_sequence_length):
    """A single segment has a packing of its own (fewer ops); it must build what the general
    index arithmetic builds for it, row lengths 0 to 14 at sequence lengths 3 to 12, an
    empty batch included."""
    rng = np.random.default_rng(3)
    for sequence_length in [3, 4, 7, 12]:
        packer = BertPacker(1, 2, 0, sequence_length=sequence_length,
                            pad_to_sequence_length=pad_to_sequence_length)  # fmt: skip
        for rows in [0, 1, 5]:
            segment = tf.ragged.constant([list(range(10, 10 + n))
                                          for n in rng.integers(0, 15, rows)],
                                         tf.int32, row_splits_dtype=tf.int64)  # fmt: skip
            if rows == 0:
                segment = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32),
                                                           tf.zeros([0], tf.int64))  # fmt: skip
            lengths = tf.minimum(segment.row_lengths(), sequence_length - 2)
            general = packer._pack([segment], [lengths])
            packed = packer(segment)
            for key, value in general.items():
                assert packed[key].dtype == tf.int32
                assert packed[key].numpy().tolist() == value.numpy().tolist(), (key, rows)
            assert packed["input_word_ids"].shape[1] == (
                sequence_length if pad_to_sequence_length else max(2, 2 + max(
                    [min(n, sequence_length - 2) for n in segment.row_lengths().numpy()],
                    default=0)))


def test_printable_batches_take_a_short_path_with_the_same_ids(minilm_dir, texts):
    """A batch of printable ASCII texts is only lower-cased before WordPiece. Its ids and
    offsets must equal those of the character-by-character clean-up, with and without
    lower-casing, and a batch that adds one text with a tab (the long path) must give the
    others the same ids and offsets."""
    rng = np.random.default_rng(11)
    alphabet = [chr(i) for i in range(32, 127)] + list("aeiou   ") * 8
    printable = ["".join(rng.choice(alphabet, rng.integers(0, 60))) for _ in range(300)]
    printable += [t for t in texts["sst2"] if t.isascii() and t.isprintable()]
    printable += ["x" * 150 + " ok", "A" * 99 + "b, " + "c" * 101]  # words past the byte limit
    batch = tf.constant(printable)
    for lower_case in [True, False]:
        tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lower_case)
        ids = tokenizer(batch).to_list()
        assert ids == tokenizer.tokenize_with_offsets(batch)[0].to_list()
        assert tokenizer(tf.constant(printable + ["a\tb"])).to_list()[:-1] == ids
        assert tf.function(tokenizer)(batch).to_list() == ids
        # Offsets too: the short path's byte offsets are the character path's offsets.
        short = [t.to_list() for t in tokenizer.tokenize_with_offsets(batch)]
        assert short == [t.to_list() for t in tokenizer._offsets_by_character(batch)]
        mixed = tokenizer.tokenize_with_offsets(tf.constant(printable + ["é\tb"]))
        assert [t.to_list()[:-1] for t in mixed] == short


@pytest.mark.parametrize("lower_case", [True, False])
def test_texts_of_any_shape_get_the_ids_and_offsets_of_a_flat_batch(minilm_dir, lower_case):
    """One text, or texts of shape (a, b) or (a, b, c), printable or not: ids and offsets
    shaped like the texts (one text: dense), each text's values those of a flat batch. The
    character path took only a flat batch: a (2, 2) batch with an accent got offsets of the
    wrong shape, and one text with an accent raised an AttributeError."""
    tokenizer = BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=lower_case)

    def flat(texts):
        return [t.to_list() for t in tokenizer.tokenize_with_offsets(tf.constant(texts))]

    for text in ["Héllo wörld", "Hello world", ""]:
        results = tokenizer.tokenize_with_offsets(tf.constant(text))
        assert [r.numpy().tolist() for r in results] == [f[0] for f in flat([text])]
        assert tokenizer(tf.constant(text)).numpy().tolist() == flat([text])[0][0]
    for texts in ([["Hello", "thére"], ["a\tb", "c d"]], [["Hello", "there"], ["a", "b c"]],
                  [[["é x", "b"]], [["c", ""]]]):
        shape = np.array(texts).shape
        results = tokenizer.tokenize_with_offsets(tf.constant(texts))
        assert [r.shape[:-1] for r in results] == [shape] * 3
        lists = [r.to_list() for r in results]
        assert [_per_text(got, len(shape)) for got in lists] == flat(np.ravel(texts).tolist())
        assert tokenizer(tf.constant(texts)).to_list() == lists[0]
    for shape in [(3, 0), (0, 4)]:
        ids, starts, ends = tokenizer.tokenize_with_offsets(tf.zeros(shape, tf.string))
        assert ids.shape[:2] == starts.shape[:2] == ends.shape[:2] == shape
    unknown_rank = tf.function(tokenizer.tokenize_with_offsets,
                               input_signature=[tf.TensorSpec(None, tf.string)])  # fmt: skip
    with pytest.raises(ValueError, match="known rank"):
        unknown_rank(tf.constant(["a"]))


def _per_text(nested, depth):
    """Each text's list, in row-major order, from lists nested `depth` deep by text."""
    if depth == 1:
        return nested
    return [cell for part in nested for cell in _per_text(part, depth - 1)]


def test_lower_casing_does_not_follow_the_process_locale(minilm_dir):
    """ICU lower-cases by the environment's locale (Turkish: I to a dotless i); the reference,
    Python's str.lower(), knows no locale. A process under LANG=tr_TR.UTF-8 must give the ids
    and offsets this one gives, on both paths (a mixed batch and printable ASCII)."""
    texts = ["Is IBM in Istanbul, İzmir?", "ÌÍĨĮ and J, Σ ΟΔΟΣ, café", "I think I will"]
    code = (
        "import json, sys, tensorflow as tf\n"
        "from keras_bert import BertTokenizer\n"
        "tokenizer = BertTokenizer.from_checkpoint(sys.argv[1])\n"
        "texts = json.loads(sys.argv[2])\n"
        "out = [tokenizer(tf.constant(b)).to_list() for b in (texts, texts[2:])]\n"
        "out += [t.to_list() for t in tokenizer.tokenize_with_offsets(tf.constant(texts))]\n"
        "print(json.dumps(out))\n"
    )
    turkish = {**os.environ, "LANG": "tr_TR.UTF-8", "LC_ALL": "tr_TR.UTF-8"}
    result = subprocess.run([sys.executable, "-c", code, minilm_dir, json.dumps(texts)],
                            env=turkish, capture_output=True, text=True, check=True)  # fmt: skip
    tokenizer = BertTokenizer.from_checkpoint(minilm_dir)
    here = [tokenizer(tf.constant(b)).to_list() for b in (texts, texts[2:])]
    here += [t.to_list() for t in tokenizer.tokenize_with_offsets(tf.constant(texts))]
    assert json.loads(result.stdout.splitlines()[-1]) == here
    words = [tokenizer.vocabulary[i] for i in here[0][0]]
    assert words[:4] == ["is", "ibm", "in", "istanbul"]
