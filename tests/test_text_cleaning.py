import unicodedata

import numpy as np
import tensorflow as tf
from conftest import TINY_VOCAB

from keras_bert.text import text_cleaning
from keras_bert.text.text_cleaning import clean, clean_characters, valid_utf8
from keras_bert.text.tokenizer import BertTokenizer


def python_clean(text):
    """The original BERT clean-up (tab and line ends are whitespace, not control characters),
    then str.lower(), NFD and accents stripped: what an uncased model's text becomes."""
    text = "".join(" " if c in "\t\n\r" or unicodedata.category(c) == "Zs" else c
                   for c in text if c in "\t\n\r" or c != "\ufffd"
                   and unicodedata.category(c) not in ("Cc", "Cf", "Co"))  # fmt: skip
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


def clean_by_character(texts, lower_case):
    """Texts (str or bytes) through the character-by-character clean-up."""
    characters = tf.strings.unicode_split(valid_utf8(tf.constant(texts)), "UTF-8")
    cleaned = characters.with_flat_values(clean_characters(
        characters.flat_values, lower_case, characters.value_rowids()))
    return tf.strings.reduce_join(cleaned, axis=-1).numpy().tolist()


def test_capital_sigma_lower_cases_as_python_does():
    """Word-final capital sigma becomes the final form (str.lower()'s Final_Sigma rule), with
    case-ignorable characters (accents, apostrophes, modifier letters, removed soft hyphens)
    skipped on either side; the cleaned text is compared with Python's on random strings."""
    pool = list("ΣΣΣσΑaB'.:( 1中-ªⒶ") + ["\u0301", "\u02b0", "\u00ad", "\u2019", "\u00b7"]
    rng = np.random.default_rng(0)
    texts = ["mnΣ", "ΣΣ", "ΟΔΟΣ ΟΔΟΣ.", "Σ", "aΣb", "aΣ'", "a\u00adΣ", "ʰΣ", "ⒶΣ"] + [
        "".join(rng.choice(pool, size=rng.integers(1, 9))) for _ in range(3000)]
    ours = [t.decode() for t in clean_by_character(texts, True)]
    assert ours[:3] == ["mnς", "σς", "οδος οδος."]
    mismatches = [(t, o, python_clean(t)) for t, o in zip(texts, ours) if o != python_clean(t)]
    assert mismatches == []
    tokenizer = BertTokenizer(TINY_VOCAB + ["mn", "##ς", "##σ", "##a"])
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["mnΣ mnΣa"]))
    assert [tokenizer.vocabulary[i] for i in ids.to_list()[0]] == ["mn", "##ς", "mn", "##σ", "##a"]
    assert starts.to_list() == [[0, 2, 4, 6, 7]] and ends.to_list() == [[2, 3, 6, 7, 8]]


def test_whole_text_clean_up_equals_the_character_by_character_one():
    """Ids without offsets clean whole texts (`clean`); offsets need one pass per character
    (`clean_characters`). Both must give the same text, and Python's clean-up of valid
    text, on random texts of accents, combining marks, sigmas, CJK, spaces, control, format
    and private-use characters, emoji, and invalid UTF-8."""
    pool = (list("aZ 1.'-ΣΣσΑοςÉéßİǅﬁ中文\t\n\r\x00\x1b\x7f\u00a0\u2003\u3000\u200b\u200d")
            + ["\u0301", "\u0327", "\u02b0", "\u00ad", "\ue000", "\ufffd", "\U0001f600",
               "\u24b6", "\u0130"])  # fmt: skip
    rng = np.random.default_rng(5)
    texts = ["".join(rng.choice(pool, size=rng.integers(0, 12))) for _ in range(3000)]
    raw = [t.encode() for t in texts] + [b"caf\xc3", b"\xff\xfeab", b"a\xed\xa0\x80b \xc3\xa9"]
    for lower_case in [True, False]:
        whole = clean(valid_utf8(tf.constant(raw)), lower_case)
        assert whole.numpy().tolist() == clean_by_character(raw, lower_case)
    ours = [t.decode() for t in clean(tf.constant(texts), True).numpy()]
    assert [(t, o) for t, o in zip(texts, ours) if o != python_clean(t)] == []


def test_whitespace_class_is_tab_line_ends_and_the_space_separators():
    """`_WHITESPACE` lists Unicode's Zs characters (the space itself left out, it stays as it
    is) rather than writing \\p{Zs}: over every code point, it matches what
    [\\t\\n\\r\\p{Zs}] matches, the space excepted."""
    points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    characters = tf.strings.unicode_encode(tf.constant(points)[:, None], "UTF-8")
    listed = tf.strings.regex_full_match(characters, text_cleaning._WHITESPACE).numpy()
    spaces = tf.strings.regex_full_match(characters, r"[\t\n\r\p{Zs}]").numpy()
    assert spaces[32] and not listed[32]
    spaces[32] = False
    assert [points[i] for i in np.flatnonzero(listed != spaces)] == []
    assert sum(listed) == 19  # \t \n \r and 16 space separators besides U+0020
