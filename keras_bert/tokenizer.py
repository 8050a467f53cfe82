"""WordPiece tokenizer and input packer as Keras layers on TensorFlow and tensorflow-text ops.

Both run in eager code, inside `tf.data` and inside saved `tf.function`s. The ops they use are
core TensorFlow plus `NormalizeUTF8` and `FastWordpieceTokenizeWithOffsets` from
tensorflow-text, which TF Serving 2.12 and later carry.
"""

import os

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bert.config import whole_number
from keras_bert.text_cleaning import all_printable_ascii, clean, clean_characters, valid_utf8
from keras_bert.vocabulary import check_vocabulary, find_vocabulary, read_vocabulary

# Hugging Face's limit (Google's code allows 200): longer words become [UNK]. The limit is
# applied to UTF-8 bytes, so it equals the character limit for ASCII words.
MAX_BYTES_PER_WORD = 100

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def _to_character_offsets(byte_offsets, byte_ends, side):
    """Maps byte offsets in the cleaned text to character indices in the original text.

    `byte_ends` is ragged (batch, (characters)): the cleaned-text byte where each original
    character's replacement ends. A token start lies in the first character whose end is past
    it; a token end lies in the first character whose end reaches it.
    """
    sorted_ends = byte_ends.to_tensor(default_value=tf.int64.max)
    offsets = byte_offsets.to_tensor()
    indices = tf.searchsorted(sorted_ends, offsets, side=side, out_type=tf.int64)
    return tf.RaggedTensor.from_tensor(indices, lengths=byte_offsets.row_lengths())


@_SERIALIZABLE
class BertTokenizer(keras.layers.Layer):
    """BERT's WordPiece tokenizer: strings in, token ids out.

    Does what the original BERT BasicTokenizer does (control characters removed, accents
    stripped when lower-casing, CJK characters and punctuation split off), then WordPiece.
    Invalid UTF-8 is replaced with U+FFFD (and so dropped), never an error.

    Args:
      vocabulary: a list of tokens, or the path of a `vocab.txt`.
      do_lower_case: lower-case and strip accents (uncased models) or not (cased models).

    Call with a tf.string tensor of shape (batch,); returns int32 ragged (batch, (tokens)).
    Texts of any other known shape are tokenized as tensorflow-text's tokenizers do: one text
    gives a dense (tokens,), texts of shape (a, b) a ragged (a, b, (tokens)).
    """

    # Where a traced call splits its batch in two halves, which the inter-op threads tokenize
    # side by side (docs/performance.md). Each half is checked and cleaned on its own: one
    # `tf.cond` on the printable check before the split cost more than the split gained.
    SPLIT_FROM = 16

    def __init__(self, vocabulary=None, do_lower_case=True, **kwargs):
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        # Strings go through as they are; Keras would otherwise try to cast them.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.supports_jit = False  # string ops: XLA compiles none (see packing.TokenLayout)
        self.do_lower_case = do_lower_case
        self.vocabulary = None
        if vocabulary is not None:  # None: a saved model's, read by load_assets()
            self.set_vocabulary(vocabulary)
        self.built = True

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary: a list of tokens, or the path of a `vocab.txt`."""
        if isinstance(vocabulary, (str, os.PathLike)):
            source = os.fspath(vocabulary)
            vocabulary = read_vocabulary(source)
        else:
            source, vocabulary = "vocabulary", list(vocabulary)
        check_vocabulary(vocabulary, source)
        self.vocabulary = vocabulary
        self._token_ids = {token: i for i, token in enumerate(vocabulary)}
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocabulary,
            suffix_indicator="##",
            max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32,
            unknown_token="[UNK]",
            no_pretokenization=False,
            support_detokenization=False,
        )

    # The vocabulary travels as an asset (vocab.txt inside a .keras file), not in the config.
    def save_assets(self, dir_path):
        self.require_vocabulary()
        with open(os.path.join(dir_path, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.vocabulary) + "\n")

    def load_assets(self, dir_path):
        self.set_vocabulary(os.path.join(dir_path, "vocab.txt"))

    @classmethod
    def from_checkpoint(cls, path, do_lower_case=None):
        """The tokenizer of a Google, Hugging Face or keras-bert checkpoint folder."""
        vocab_file, lower_case = find_vocabulary(path, do_lower_case)
        return cls(vocab_file, do_lower_case=lower_case)

    def require_vocabulary(self):
        """Raises a ValueError of one line unless the tokenizer has its vocabulary."""
        if self.vocabulary is None:  # made without one, and none loaded since
            raise ValueError("this BertTokenizer has no vocabulary: pass one (a list of tokens "
                             "or the path of a vocab.txt) or call set_vocabulary (a model made "
                             "from its config alone, by from_config or model_from_json, has "
                             "none: load its saved .keras file)")  # fmt: skip

    def token_id(self, token):
        self.require_vocabulary()
        return self._token_ids[token]

    @property
    def pad_id(self):
        return self.token_id("[PAD]")

    @property
    def cls_id(self):
        return self.token_id("[CLS]")

    @property
    def sep_id(self):
        return self.token_id("[SEP]")

    @property
    def mask_id(self):
        return self.token_id("[MASK]")

    @property
    def unk_id(self):
        return self.token_id("[UNK]")

    def __call__(self, inputs, *args, **kwargs):
        """Called eagerly, the tokenizer skips Keras's `Layer.__call__`, which walks a list of
        texts string by string."""
        symbolic = isinstance(inputs, keras.KerasTensor)  # building a functional graph
        if not symbolic:  # else Keras's __call__ would wrap the one line in a listing
            self.require_vocabulary()
        if args or kwargs or not tf.executing_eagerly() or symbolic:
            return super().__call__(inputs, *args, **kwargs)
        return self.call(inputs)

    def call(self, inputs):
        """Token ids only. A batch of printable ASCII texts (the common case) needs only
        lower-casing before WordPiece; any other batch is cleaned text by text
        (`text_cleaning.clean`: a few ops for the batch rather than one pass per character; the
        same text, checked on 21,980 real texts and 20,000 random ones). One `tf.cond` for the
        whole batch (or each half of it, below): splitting its rows between the two made every
        batch slower."""
        self.require_vocabulary()
        inputs = tf.convert_to_tensor(inputs, dtype=tf.string)
        if inputs.shape.rank != 1:
            return self._ids(inputs)
        if tf.executing_eagerly():
            return self._eager_ids(inputs)
        # In a graph, a batch of SPLIT_FROM texts or more is tokenized as two halves: two chains
        # of ops, which TensorFlow's inter-op threads run side by side (see SPLIT_FROM).
        size = tf.shape(inputs)[0]
        half = size // 2
        return tf.cond(size >= self.SPLIT_FROM,
                       lambda: tf.concat([self._ids(inputs[:half]), self._ids(inputs[half:])], 0),
                       lambda: self._ids(inputs))  # fmt: skip

    def _eager_ids(self, texts):
        """`call` on a batch of texts from Python: through a graph traced on the first such
        call (again after `set_vocabulary`), rather than op by op. The graph returns the ragged
        result's parts, which are known to be valid: no checks to run on them again."""
        settings = self.graph_settings()
        cache = self.__dict__.setdefault("_eager_graph", [])  # where tf.saved_model looks not
        if not (cache and same_graph_settings(cache[0], settings)):
            def parts(texts):
                ids = self.call(texts)
                return ids.flat_values, ids.row_splits

            cache[:] = [settings, tf.function(parts, autograph=False).get_concrete_function(
                tf.TensorSpec([None], tf.string))]
        values, splits = call_traced(cache[1], [texts])
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False)

    def graph_settings(self):
        """What a graph traced from this tokenizer bakes in and a user can change after: the
        vocabulary (`set_vocabulary` makes a new list) and the lower-casing. Compared with
        `same_graph_settings`."""
        return (self.vocabulary, self.do_lower_case)

    def _ids(self, texts):
        printable = all_printable_ascii(texts)
        cleaned = tf.cond(printable, lambda: self._lowered(texts),
                          lambda: clean(valid_utf8(texts), self.do_lower_case))  # fmt: skip
        return self._wordpiece.tokenize(cleaned)

    def tokenize_with_offsets(self, inputs):
        """Returns (ids, starts, ends), each ragged (batch, (tokens)) for texts of shape
        (batch,), shaped as `call` shapes its ids for any other.

        `starts` and `ends` are int64 character (not byte) offsets into each input string, the
        token covering characters [start, end). Invalid UTF-8 counts one character per
        replaced byte sequence, as Python's `bytes.decode(errors="replace")` does.

        A batch of printable ASCII texts is only lower-cased, which keeps every character in
        its place, one byte each: WordPiece's byte offsets are the character offsets. Any other
        batch is cleaned character by character (`_offsets_by_character`).
        """
        self.require_vocabulary()
        inputs = tf.convert_to_tensor(inputs, dtype=tf.string)
        if inputs.shape.rank != 1:
            return self._offsets_of_any_shape(inputs)
        printable = all_printable_ascii(inputs)
        return tf.cond(printable,
                       lambda: self._wordpiece.tokenize_with_offsets(self._lowered(inputs)),
                       lambda: self._offsets_by_character(inputs))  # fmt: skip

    def _offsets_of_any_shape(self, texts):
        """`tokenize_with_offsets` of one text or of texts of rank 2 or more, shaped as `call`
        shapes its ids: the texts are tokenized as one flat batch (the character path needs
        one), then the batch's leading shape is restored."""
        if texts.shape.rank is None:
            raise ValueError("tokenize_with_offsets needs texts of known rank: give the "
                             "tf.function a TensorSpec of known rank, such as [None]")
        results = self.tokenize_with_offsets(tf.reshape(texts, [-1]))
        if texts.shape.rank == 0:
            return tuple(result[0] for result in results)
        shape = tf.shape(texts, out_type=tf.int64)

        def shaped(tokens):  # (texts flattened, (tokens)) -> texts' shape + ((tokens),)
            for axis in reversed(range(1, texts.shape.rank)):
                tokens = tf.RaggedTensor.from_uniform_row_length(
                    tokens, shape[axis], nrows=tf.reduce_prod(shape[:axis]))
            return tokens

        return tuple(shaped(result) for result in results)

    def _lowered(self, printable_texts):
        """The whole clean-up of printable ASCII texts (no control characters, no accents)."""
        return tf.strings.lower(printable_texts) if self.do_lower_case else printable_texts

    def _offsets_by_character(self, inputs):
        """`tokenize_with_offsets` for any text: each character cleaned on its own, so that
        each token's bytes in the cleaned text map back to the characters they came from."""
        # (batch, (characters))
        characters = tf.strings.unicode_split(valid_utf8(inputs), "UTF-8")
        cleaned = characters.with_flat_values(clean_characters(
            characters.flat_values, self.do_lower_case, characters.value_rowids()))
        byte_ends = tf.math.cumsum(
            tf.strings.length(cleaned, unit="BYTE"), axis=-1
        )  # ragged cumsum works row by row
        ids, byte_starts, byte_stops = self._wordpiece.tokenize_with_offsets(
            tf.strings.reduce_join(cleaned, axis=-1)
        )
        byte_ends = tf.cast(byte_ends, tf.int64)
        starts = _to_character_offsets(byte_starts, byte_ends, side="right")
        ends = _to_character_offsets(byte_stops, byte_ends, side="left") + 1
        return ids, starts, ends

    def get_config(self):
        return {**super().get_config(), "do_lower_case": self.do_lower_case}


def same_graph_settings(old, new):
    """Whether the settings two graphs were traced with, tuples that start with a vocabulary,
    are the same: the vocabulary the same list (`set_vocabulary` makes a new one; comparing
    30,000 tokens at every call would cost more than tracing saves), the rest equal. None, for
    no settings, equals only None."""
    if old is None or new is None:
        return old is new
    return old[0] is new[0] and old[1:] == new[1:]


def call_traced(graph, inputs):
    """Runs a traced `tf.function` (a ConcreteFunction) on its flat list of input tensors and
    returns its structured output: the traced function itself, without the binding of its
    inputs to their signature that `ConcreteFunction.__call__` does first. For the
    string-to-ids graphs of the tokenizer and the preprocessors only: it records nothing on a
    gradient tape."""
    return graph.inference_fn.call_preflattened(list(inputs) + list(graph.captured_inputs))


def _trim_lengths(first_lengths, second_lengths, budget):
    """Longest-first truncation of a pair to `budget` tokens, as the original BERT code does.

    It drops one token at a time from the longer segment (the second on ties); in closed form
    the first keeps at most max(ceil(budget / 2), budget - len(second)).
    """
    budget = tf.constant(budget, second_lengths.dtype)
    first_cap = tf.maximum((budget + 1) // 2, budget - second_lengths)
    first = tf.minimum(first_lengths, first_cap)
    return first, tf.minimum(second_lengths, budget - first)


def same_batch(first, second, what):
    """An op that fails unless `first` and `second` (tensors, ragged or not) have as many rows,
    to run before what pairs them; a ValueError at once where both sizes are known. Where they
    are known only when the graph runs (an export's request), a second part of one row was
    broadcast to every first one, silently."""
    rows = [t.nrows() if isinstance(t, tf.RaggedTensor) else tf.shape(t)[0]
            for t in (first, second)]  # fmt: skip
    known = [tf.get_static_value(r) for r in rows]
    message = f"{what} differ in batch size: give one of each per example"
    if None not in known and known[0] != known[1]:
        raise ValueError(f"{message} (got {known[0]} and {known[1]})")
    return tf.debugging.assert_equal(rows[0], tf.cast(rows[1], rows[0].dtype), message=message)


def _check_segment(segment, name):
    """Refuses what BertPacker cannot pack: anything but a ragged (batch, (tokens))."""
    if not (isinstance(segment, tf.RaggedTensor) and segment.shape.rank == 2):
        if isinstance(segment, tf.RaggedTensor) or tf.is_tensor(segment):
            kind = "ragged" if isinstance(segment, tf.RaggedTensor) else "dense"
            got = f"a {kind} tensor of shape {segment.shape}"
        else:  # texts, say: the packer takes the tokenizer's ids
            got = f"a {type(segment).__name__}, not token ids"
        raise ValueError(f"BertPacker's {name} segment must be ragged (batch, (tokens)), as "
                         f"BertTokenizer gives for texts of shape (batch,); got {got}")


@_SERIALIZABLE
class BertPacker(keras.layers.Layer):
    """Packs one or two segments into `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`.

    Segments are truncated to `sequence_length` longest-first. Batches are padded to their
    longest member (dynamic padding) unless `pad_to_sequence_length` is set. Uses core
    TensorFlow ops only.

    Call with one or two int ragged tensors (batch, (tokens)); returns a dict of int32
    (batch, seq): `input_word_ids`, `input_mask`, `input_type_ids`.
    """

    def __init__(
        self, cls_id, sep_id, pad_id, sequence_length=512, pad_to_sequence_length=False, **kwargs
    ):
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.supports_jit = False  # ragged ops: XLA compiles none (see packing.TokenLayout)
        whole_number(sequence_length, 3, "sequence_length")
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.pad_id = pad_id
        self.sequence_length = sequence_length
        self.pad_to_sequence_length = pad_to_sequence_length
        self.built = True

    @classmethod
    def from_tokenizer(cls, tokenizer, **kwargs):
        return cls(tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, **kwargs)

    def call(self, first_segment, second_segment=None):
        _check_segment(first_segment, "first")
        if second_segment is not None:
            _check_segment(second_segment, "second")
        segments = [tf.cast(first_segment, tf.int32)]
        if second_segment is None:
            return self._pack_one(segments[0])
        segments.append(tf.cast(second_segment, tf.int32))
        with tf.control_dependencies([same_batch(*segments, "BertPacker's two segments")]):
            first, second = (tf.cast(s.row_lengths(), tf.int64) for s in segments)
        lengths = list(_trim_lengths(first, second, self.sequence_length - 3))
        return self._pack(segments, lengths)

    def _pack_one(self, segment):
        """`_pack` for a single segment, in fewer ops: the tokens padded (and truncated) by
        `to_tensor`, a [CLS] column before them, and [SEP] written after each row's last token:
        the same ids as `_pack`'s index arithmetic, in fewer ops."""
        lengths = tf.minimum(tf.cast(segment.row_lengths(), tf.int64), self.sequence_length - 2)
        if self.pad_to_sequence_length:
            width = tf.constant(self.sequence_length - 2, tf.int64)
        else:  # an empty batch still has [CLS] and [SEP] columns, for what reads them
            width = tf.maximum(tf.reduce_max(lengths), 0)
        tokens = segment.to_tensor(self.pad_id, shape=tf.stack([tf.size(lengths, tf.int64), width]))
        rows = tf.shape(tokens)[:1]
        ids = tf.concat([tf.fill(rows, self.cls_id)[:, None], tokens,
                         tf.fill(rows, self.pad_id)[:, None]], axis=1)  # fmt: skip
        position = tf.range(width + 2)[None, :]  # (1, seq)
        total = (lengths + 2)[:, None]  # tokens of each row, [CLS] and [SEP] counted
        return {
            "input_word_ids": tf.where(tf.equal(position, total - 1), self.sep_id, ids),
            "input_mask": tf.cast(position < total, tf.int32),
            "input_type_ids": tf.zeros_like(ids),
        }

    def _pack(self, segments, lengths):
        """[CLS], then each segment's first `lengths` tokens and a [SEP], padded: each output
        position's token is gathered from the segments' flat values by index arithmetic on
        dense (batch, seq) tensors. (Ragged concatenation and masking build the same rows, but
        take 0.7 s to trace for a pair, against 0.1 s for this.)"""
        flat = [s.flat_values for s in segments]
        values = tf.concat([*flat, [self.cls_id, self.sep_id, self.pad_id]], axis=0)
        cls = sum(tf.size(v, tf.int64) for v in flat)  # the specials' indices in `values`
        sep, pad = cls + 1, cls + 2
        ends, end = [], tf.ones_like(lengths[0])  # each segment's [SEP] position, per row
        for length in lengths:
            ends.append(end + length)
            end = end + length + 1
        total = end  # tokens of each row, [CLS] and [SEP]s counted
        if self.pad_to_sequence_length:
            width = tf.constant(self.sequence_length, tf.int64)
        else:  # an empty batch still has [CLS] and [SEP] columns, for what reads them
            width = tf.maximum(tf.reduce_max(total), 2)
        position = tf.range(width)[None, :]  # (1, seq)
        index = tf.where(position < total[:, None], cls, pad)  # (batch, seq)
        type_ids = tf.zeros_like(index, tf.int32)
        base = 0  # where the segment's values begin in `values`
        for k, (segment, length, sep_at) in enumerate(zip(segments, lengths, ends)):
            start = (sep_at - length)[:, None]
            inside = (position >= start) & (position < sep_at[:, None])
            at_sep = tf.equal(position, sep_at[:, None])
            offset = base + tf.cast(segment.row_starts(), tf.int64)[:, None] - start
            index = tf.where(inside, position + offset, index)
            index = tf.where(at_sep, sep, index)
            if k:
                type_ids = tf.where(inside | at_sep, 1, type_ids)
            base += tf.size(segment.flat_values, tf.int64)
        return {
            "input_word_ids": tf.gather(values, index),
            "input_mask": tf.cast(position < total[:, None], tf.int32),
            "input_type_ids": type_ids,
        }

    def get_config(self):
        return {
            **super().get_config(),
            "cls_id": self.cls_id,
            "sep_id": self.sep_id,
            "pad_id": self.pad_id,
            "sequence_length": self.sequence_length,
            "pad_to_sequence_length": self.pad_to_sequence_length,
        }
