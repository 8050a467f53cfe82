"""Named entities inside the graph: a sentence's words are found at white space, tagged through
the first word piece of each, and the tags (IOB2) read as entities with character offsets.

The fine-tuning binary (training labels, evaluation) and the exported SavedModel share this
one implementation, so a served entity is what the evaluation counted. Entities are read the
way the CoNLL script reads chunks: an entity starts at B-X, or at I-X after O or after another
type, and continues over I-X.
"""

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.text_cleaning import valid_utf8
from keras_bert.text.windows import (
    check_stride,
    flat_pieces,
    max_context,
    take_windows,
    window_spans,
    window_step,
)

WHITESPACE = r"[\t\n\r\p{Zs}]"  # what the tokenizer turns into spaces
IGNORE = -1  # label of word pieces after the first, of [CLS], [SEP] and padding


def shifted(x, fill, right=True):
    """Ragged `x` (batch, (n)) with each row moved one place right (or left), `fill` entering
    at the row's edge. The result shares x's row partition, so that elementwise ops between the
    two run on their flat values: between ragged tensors of different partition objects,
    TensorFlow builds a shape-broadcasting graph, slow to trace (docs/performance.md), per op."""
    rows, values = x.value_rowids(), x.flat_values
    new_row = tf.not_equal(rows[1:], rows[:-1])
    first = tf.ones_like(rows[:1], dtype=tf.bool)  # empty when x has no values at all
    if right:
        edge, moved = tf.concat([first, new_row], 0), tf.concat([values[:1], values[:-1]], 0)
    else:
        edge, moved = tf.concat([new_row, first], 0), tf.concat([values[1:], values[-1:]], 0)
    return x.with_flat_values(tf.where(edge, tf.cast(fill, values.dtype), moved))


def _spaces_and_word_starts(sentences):
    """Ragged (batch, (characters)) bools of valid UTF-8 sentences: which characters are white
    space, and which begin a word (not space, after a space or at the start)."""
    space = tf.strings.regex_full_match(tf.strings.unicode_split(sentences, "UTF-8"), WHITESPACE)
    return space, ~space & shifted(space, True)


def flat_index(index, table):
    """Ragged `index` (batch, (n)), positions within each row of ragged `table` (batch, (m)),
    as indices into table's flat values: a gather there is a ragged gather with batch_dims=1,
    without the 370 ops that one traces. Each position must lie within its row."""
    return index.flat_values + tf.gather(table.row_starts(), index.value_rowids())


@keras.saving.register_keras_serializable(package="keras_bert")
class WordTagger(BertPreprocessor):
    """Args: a BertTokenizer, its BertPacker, the tags (IOB2 strings, "O" among them), and
    `max_windows` (default 1) and `stride`, as `BertWindowsPreprocessor`'s.

    With one window, words whose first piece falls beyond the packer's sequence_length get
    "O". With more, a text's word pieces are cut into overlapping windows (each `stride`
    pieces after the one before; default half a window), each packed as a sequence of its
    own, and each word is tagged (and trained) from the window where its first piece has the
    most context on both sides, the original run_squad.py's rule; only words past
    `max_windows` windows get "O". `from_tokenizer(tokenizer, sequence_length, tags=...)`
    builds the packer."""

    def __init__(self, tokenizer, packer, tags, max_windows=1, stride=None, **kwargs):
        super().__init__(tokenizer, packer, **kwargs)
        self.max_windows = whole_number(max_windows, 1, "max_windows")
        check_stride(stride, self.max_tokens, self.sequence_length)
        self.stride = stride
        if isinstance(tags, (str, bytes)):  # else read character by character
            raise ValueError(f"tags must be a list of tag names, got the string {tags!r}")
        tags = list(tags)
        repeated = [tag for tag in tags if tags.count(tag) > 1]
        if repeated:  # a tag's second class would never be trained
            raise ValueError(f"tags must each appear once, got {repeated[0]!r} "
                             f"{tags.count(repeated[0])} times")  # fmt: skip
        if "O" not in tags:
            raise ValueError(f"the tag set has no 'O': {tags}")
        if len(tags) < 2:
            raise ValueError("the tag set is 'O' alone: a tagger needs at least one entity tag "
                             "(B-PER, say) beside it")  # fmt: skip
        for tag in tags:
            if tag != "O" and tag[:2] not in ("B-", "I-"):
                raise ValueError(f"tag {tag!r} is not O, B-<type> or I-<type>")
        self.tags = list(tags)
        self.types = sorted({tag[2:] for tag in tags if tag != "O"})

    @property
    def max_tokens(self):
        """Word pieces a sentence keeps: the sequence less [CLS] and [SEP]."""
        return self.packer.sequence_length - 2

    def call(self, sentences):
        return self.encode(sentences)

    def get_config(self):
        return {**super().get_config(), "tags": self.tags, "max_windows": self.max_windows,
                "stride": self.stride}  # fmt: skip

    def graph_settings(self):
        return (*super().graph_settings(), self.max_windows, self.stride)

    def _words(self, sentences):
        """Token ids (truncated) with each token's word and first-piece flag, and each word's
        character span [start, end); all ragged over the batch."""
        sentences = valid_utf8(sentences)
        ids, starts, _ = self.tokenizer.tokenize_with_offsets(sentences)
        if self.max_windows == 1:
            ids, starts = ids[:, : self.max_tokens], starts[:, : self.max_tokens]
        space, word_start = _spaces_and_word_starts(sentences)
        after = shifted(space, True, right=False)
        word_of_char = tf.math.cumsum(tf.cast(word_start, tf.int64), axis=1) - 1
        # Each token's word (its start is a character of its own sentence).
        token_word = starts.with_flat_values(
            tf.gather(word_of_char.flat_values, flat_index(starts, word_of_char)))
        previous = shifted(token_word, -1)
        chars = tf.ragged.range(space.row_lengths())
        return {
            "ids": ids,
            "token_word": token_word,
            "first_piece": tf.not_equal(token_word, previous),
            "word_starts": tf.ragged.boolean_mask(chars, word_start),
            "word_ends": tf.ragged.boolean_mask(chars, ~space & after) + 1,
            "sentences": sentences,
        }

    def cut(self, sentences):
        """bool (batch,): which texts have more word pieces than the windows hold (one
        sequence's `max_tokens`, or `max_windows` windows); their last words get "O"."""
        return self._spans(self.tokenizer(valid_utf8(sentences)).row_lengths())[0]["cut"]

    def word_counts(self, sentences):
        """Words per sentence (int64 (batch,)), split at white space as `encode` splits them."""
        sentences = valid_utf8(sentences)
        return tf.reduce_sum(tf.cast(_spaces_and_word_starts(sentences)[1], tf.int64), axis=1)

    def encode(self, sentences, word_tags=None):
        """Encoder inputs int32 (sequences, seq), a sequence a sentence or, with windows, a
        window (`windows_of` says whose); with word_tags (ragged (batch, (words)) tag ids)
        also the labels int32 (sequences, seq): the word's tag on its first piece (in the
        window of its most context), IGNORE else."""
        words = self._words(sentences)
        windows = self._windows(words) if self.max_windows > 1 else None
        inputs = self.packer(words["ids"] if windows is None else windows["ids"])
        if word_tags is None:
            return inputs
        tf.debugging.assert_equal(word_tags.row_lengths(), words["word_starts"].row_lengths(),
                                  message="a sentence's tags are not one per word (words are "
                                  "split at white space)")  # fmt: skip
        token_word = words["token_word"]
        tags = tf.gather(tf.cast(word_tags, tf.int32), token_word, batch_dims=1)
        # (the rows of tags, token_word and first_piece are as long: the `where` runs flat)
        tags = token_word.with_flat_values(
            tf.where(words["first_piece"].flat_values, tags.flat_values, IGNORE))
        if windows is not None:  # each token's tag in the window of its most context alone
            tags = windows["take"](tags)
            tags = tags.with_flat_values(tf.where(windows["best"], tags.flat_values, IGNORE))
        shape = tf.shape(inputs["input_word_ids"])
        labels = tags.to_tensor(IGNORE, shape=[shape[0], shape[1] - 2])  # [CLS] ... [SEP]
        return inputs, tf.pad(labels, [[0, 0], [1, 1]], constant_values=IGNORE)

    def windows_of(self, sentences):
        """int64 (sequences,): the sentence each of `encode`'s sequences comes from."""
        if self.max_windows == 1:
            return tf.range(tf.size(sentences, out_type=tf.int64))
        return self._windows(self._words(sentences))["example"]

    def _windows(self, words):
        """The windows of `words`' pieces: `ids` ragged (windows, (pieces)), `example`,
        `take` (a ragged (batch, (pieces)) value -> its windows' (windows, (pieces))), `best`
        (take's flat values: whether a piece has its most context in that window), and
        `pieces` (take's flat values: each piece's index in `words["ids"]`' flat values)."""
        ids = words["ids"]
        lengths = ids.row_lengths()
        spans, room, step = self._spans(lengths)
        positions, pieces = spans["positions"], flat_pieces(spans, ids)
        return {
            "ids": take_windows(ids, spans),
            "example": spans["example"],
            "take": lambda value: positions.with_flat_values(tf.gather(value.flat_values, pieces)),
            "best": max_context(spans, step, room, lengths),
            "pieces": pieces,
        }

    def _spans(self, lengths):
        """`window_spans` of texts of `lengths` pieces, with the room and step they used."""
        room = tf.fill(tf.shape(lengths), tf.constant(self.max_tokens, tf.int64))
        step = window_step(room, self.stride)
        return window_spans(lengths, room, step, self.max_windows), room, step

    def tag(self, model, sentences):
        """Sentences in, tags and entities out (the whole pipeline of an export).

        Returns `word_tags` int32 ragged (batch, (words)), and padded over the sentence's
        entities: `entity_text` and `entity_type` tf.string, `entity_start` and `entity_end`
        int64 character offsets [start, end) (-1 as padding), and `num_entities` (batch,).
        """
        words = self._words(sentences)
        windows = self._windows(words) if self.max_windows > 1 else None
        inputs = self.packer(words["ids"] if windows is None else windows["ids"])
        logits = model({name: inputs[name] for name in INPUT_NAMES}, training=False)
        tags = tf.argmax(logits[:, 1:-1], axis=-1, output_type=tf.int32)  # skip [CLS]
        if windows is None:
            token_tags = tf.RaggedTensor.from_tensor(tags, lengths=words["ids"].row_lengths())
        else:  # each piece's tag from the window of its most context; "O" past the last
            tags = tf.RaggedTensor.from_tensor(tags, lengths=windows["ids"].row_lengths())
            best = windows["best"]
            token_tags = tf.tensor_scatter_nd_update(
                tf.fill(tf.shape(words["ids"].flat_values), self.tags.index("O")),
                tf.boolean_mask(windows["pieces"], best)[:, None],
                tf.boolean_mask(tags.flat_values, best))  # fmt: skip
            token_tags = words["ids"].with_flat_values(token_tags)
        first = tf.ragged.boolean_mask(token_tags, words["first_piece"])
        first_word = tf.ragged.boolean_mask(words["token_word"], words["first_piece"])
        word_starts = words["word_starts"]
        at = flat_index(first_word, word_starts)  # each first piece's word, among all words
        o = self.tags.index("O")
        word_tags = tf.tensor_scatter_nd_update(
            tf.fill(tf.shape(word_starts.flat_values), o), at[:, None], first.flat_values)
        word_tags = word_starts.with_flat_values(word_tags)
        return {"word_tags": word_tags, **self.entities(words, word_tags)}

    def entities(self, words, word_tags):
        """The entities of `word_tags`, which share `words["word_starts"]`' row partition."""
        tags = word_tags.flat_values  # the logic below runs flat, one value per word
        prefix = tf.gather(tf.constant([t[:1] for t in self.tags]), tags)
        kind = tf.gather(tf.constant([t[2:] for t in self.tags]), tags)
        inside = tf.not_equal(prefix, "O")

        def before(values, fill):  # each word's previous word's value (`fill` for the first)
            return shifted(word_tags.with_flat_values(values), fill).flat_values

        def after(values):  # each word's next word's value (False for the last)
            return shifted(word_tags.with_flat_values(values), False, right=False).flat_values

        begins = inside & (tf.equal(prefix, "B") | ~before(inside, False)
                           | tf.not_equal(before(kind, ""), kind))  # fmt: skip
        ends = inside & (after(begins) | ~after(inside))
        start = tf.ragged.boolean_mask(words["word_starts"],
                                       words["word_starts"].with_flat_values(begins))  # fmt: skip
        end = tf.ragged.boolean_mask(words["word_ends"], words["word_ends"].with_flat_values(ends))
        text = tf.strings.substr(tf.repeat(words["sentences"], start.row_lengths()),
                                 start.flat_values, end.flat_values - start.flat_values,
                                 unit="UTF8_CHAR")  # fmt: skip
        return {
            "entity_text": start.with_flat_values(text).to_tensor(""),
            "entity_type": start.with_flat_values(tf.boolean_mask(kind, begins)).to_tensor(""),
            "entity_start": start.to_tensor(-1),
            "entity_end": end.to_tensor(-1),
            "num_entities": start.row_lengths(),
        }
