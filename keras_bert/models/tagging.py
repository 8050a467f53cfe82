"""Named entities inside the graph: a sentence's words are found at white space, tagged through
the first word piece of each, and the tags (IOB2) read as entities with character offsets.

The fine-tuning binary (training labels, evaluation) and the exported SavedModel share this
one implementation, so a served entity is what the evaluation counted. Entities are read the
way the CoNLL script reads chunks: an entity starts at B-X, or at I-X after O or after another
type, and continues over I-X.
"""

import keras
import tensorflow as tf

from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.text_cleaning import valid_utf8

WHITESPACE = r"[\t\n\r\p{Zs}]"  # what the tokenizer turns into spaces
IGNORE = -1  # label of word pieces after the first, of [CLS], [SEP] and padding


def shifted(x, fill, right=True):
    """Ragged `x` (batch, (n)) with each row moved one place right (or left), `fill` entering
    at the row's edge. The result shares x's row partition, so that elementwise ops between the
    two run on their flat values: between ragged tensors of different partition objects,
    TensorFlow builds a shape-broadcasting graph that takes 0.3 s to trace, per op."""
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
    """Args: a BertTokenizer, its BertPacker, the tags (IOB2 strings, "O" among them).
    Words whose first piece falls beyond the packer's sequence_length get "O";
    `from_tokenizer(tokenizer, sequence_length, tags=...)` builds the packer."""

    def __init__(self, tokenizer, packer, tags, **kwargs):
        super().__init__(tokenizer, packer, **kwargs)
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
        return {**super().get_config(), "tags": self.tags}

    def _words(self, sentences):
        """Token ids (truncated) with each token's word and first-piece flag, and each word's
        character span [start, end); all ragged over the batch."""
        sentences = valid_utf8(sentences)
        ids, starts, _ = self.tokenizer.tokenize_with_offsets(sentences)
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

    def word_counts(self, sentences):
        """Words per sentence (int64 (batch,)), split at white space as `encode` splits them."""
        sentences = valid_utf8(sentences)
        return tf.reduce_sum(tf.cast(_spaces_and_word_starts(sentences)[1], tf.int64), axis=1)

    def encode(self, sentences, word_tags=None):
        """Encoder inputs int32 (batch, seq); with word_tags (ragged (batch, (words)) tag ids)
        also the labels int32 (batch, seq): the word's tag on its first piece, IGNORE else."""
        words = self._words(sentences)
        inputs = self.packer(words["ids"])
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
        shape = tf.shape(inputs["input_word_ids"])
        labels = tags.to_tensor(IGNORE, shape=[shape[0], shape[1] - 2])  # [CLS] ... [SEP]
        return inputs, tf.pad(labels, [[0, 0], [1, 1]], constant_values=IGNORE)

    def tag(self, model, sentences):
        """Sentences in, tags and entities out (the whole pipeline of an export).

        Returns `word_tags` int32 ragged (batch, (words)), and padded over the sentence's
        entities: `entity_text` and `entity_type` tf.string, `entity_start` and `entity_end`
        int64 character offsets [start, end) (-1 as padding), and `num_entities` (batch,).
        """
        words = self._words(sentences)
        inputs = self.packer(words["ids"])
        logits = model({name: inputs[name] for name in INPUT_NAMES}, training=False)
        token_tags = tf.argmax(logits[:, 1:-1], axis=-1, output_type=tf.int32)  # skip [CLS]
        token_tags = tf.RaggedTensor.from_tensor(token_tags, lengths=words["ids"].row_lengths())
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
