"""BERT's text clean-up (the original BasicTokenizer's, before WordPiece) on TensorFlow string
ops: whitespace becomes a space; control, format and private-use characters are removed; with
lower-casing, the text is lower-cased as Python's str.lower() does, NFD-decomposed and stripped of
accents. Whole texts at once (`clean`), or one character at a time (`clean_characters`), which
keeps each character's place so that offsets map back to the original text."""

import tensorflow as tf
import tensorflow_text as tf_text

# What becomes a space: tab, line feed, carriage return and Unicode's space separators (Zs),
# the space itself left out: rewriting every space as itself made the op 6 times slower.
_WHITESPACE = r"[\t\n\r\x{00A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]"
_REMOVED = r"[\x{FFFD}\p{Cc}\p{Cf}\p{Co}]"  # control, format, private use, replacement


def lower_unicode(texts):
    """Lower-cased as Python's str.lower() does, whatever the process's locale. ICU (behind
    `tf.strings.lower(..., encoding="utf-8")`) follows the locale of the environment: under
    LANG=tr_TR.UTF-8 or az_AZ it turns I into a dotless i, a letter of its own. The ASCII
    letters are lowered first, by a byte rule that knows no locale. (Lithuanian's extra dots
    on i, and Turkish's İ to i, are combining marks, which uncased models strip anyway.)"""
    return tf.strings.lower(tf.strings.lower(texts), encoding="utf-8")


def valid_utf8(texts):
    """Invalid UTF-8 replaced by U+FFFD (which the clean-up then removes), one per byte
    sequence, as Python's `bytes.decode(errors="replace")` does."""
    return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)  # fmt: skip


def clean(texts, do_lower_case, lower=lower_unicode):
    """BERT's text clean-up of valid UTF-8 strings: whitespace becomes a space; control,
    format and private-use characters and U+FFFD are removed; with `do_lower_case`, `lower`
    lower-cases, then the text is NFD-decomposed and stripped of accents (category Mn).

    On whole texts, ICU's lower-casing applies the Final_Sigma rule itself; the same clean-up
    one character at a time (`clean_characters`) needs a `lower` that applies it.
    """
    texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
    texts = tf.strings.regex_replace(texts, _REMOVED, "")
    if do_lower_case:
        texts = tf_text.normalize_utf8(lower(texts), "NFD")
        texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    return texts


def clean_characters(characters, do_lower_case, row_ids):
    """`clean` one character at a time (a flat tf.string of single characters; `row_ids`
    says which text each belongs to), a capital sigma at the end of a word taking the final
    form, as Python's str.lower() does. Each character maps to zero or more characters, so
    offsets into the cleaned text can be mapped back to the original."""

    def lower(characters):
        lowered = lower_unicode(characters)
        sigma = tf.equal(characters, "\u03a3")
        return tf.cond(tf.reduce_any(sigma),
                       lambda: tf.where(_final_sigmas(characters, sigma, row_ids), "\u03c2",
                                        lowered),
                       lambda: lowered)  # fmt: skip

    return clean(characters, do_lower_case, lower)


def all_printable_ascii(texts):
    """Whether every text is printable ASCII (space to tilde): the texts BERT's clean-up only
    lower-cases."""
    return tf.reduce_all(tf.strings.regex_full_match(texts, r"[\x20-\x7e]*"))


# Unicode's Case_Ignorable characters (Mn, Me, Cf, Lm, Sk and the word-internal punctuation of
# Word_Break MidLetter / MidNumLet / Single_Quote); a removed character (now "") counts as one.
_CASE_IGNORABLE = (r"|[\p{Mn}\p{Me}\p{Cf}\p{Lm}\p{Sk}'.:\x{00AD}\x{00B7}\x{0387}\x{055F}"
                   r"\x{05F4}\x{2018}\x{2019}\x{2024}\x{2027}\x{FE13}\x{FE52}\x{FE55}\x{FF07}"
                   r"\x{FF0E}\x{FF1A}]")  # fmt: skip


def _final_sigmas(characters, sigma, row_ids):
    """Where a capital sigma takes the final form when lower-cased (Unicode's Final_Sigma rule,
    which str.lower() follows): after a cased letter and not before one, case-ignorable
    characters skipped on both sides, within one text."""
    # Cased: letters with case, and the few others Unicode marks so (ª, º, circled letters).
    cased = tf.strings.regex_full_match(characters, r"[\p{Lu}\p{Ll}\p{Lt}\x{00AA}\x{00BA}"
                                                    r"\x{24B6}-\x{24E9}\x{1F130}-\x{1F189}]")
    positions = tf.cast(tf.where(~tf.strings.regex_full_match(characters, _CASE_IGNORABLE))[:, 0],
                        tf.int32)  # fmt: skip
    here = tf.range(tf.size(characters))
    count = tf.size(positions)
    before = tf.searchsorted(positions[None], here[None], side="left")[0] - 1
    after = tf.searchsorted(positions[None], here[None], side="right")[0]

    def cased_at(index, valid):
        neighbour = tf.gather(positions, tf.clip_by_value(index, 0, tf.maximum(count - 1, 0)))
        same_text = tf.equal(tf.gather(row_ids, neighbour), row_ids)
        return valid & same_text & tf.gather(cased, neighbour)

    return sigma & cased_at(before, before >= 0) & ~cased_at(after, after < count)
