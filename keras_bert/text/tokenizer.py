"""The WordPiece tokenizer as a Keras layer on TensorFlow and tensorflow-text ops.

It runs in eager code, inside `tf.data` and inside saved `tf.function`s. The ops it uses are
core TensorFlow plus `NormalizeUTF8` and `FastWordpieceTokenizeWithOffsets` from
tensorflow-text, which TF Serving 2.12 and later carry. The packer is keras_bert/text/packer.py.
"""

import functools
import os

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder

from keras_bert.text.text_cleaning import all_printable_ascii, clean, clean_characters, valid_utf8
from keras_bert.text.vocabulary import (
    check_vocabulary,
    find_vocabulary,
    read_vocabulary,
    require_bool,
)

# Hugging Face's limit (Google's code allows 200): longer words become [UNK]. The limit is
# applied to UTF-8 bytes, so it equals the character limit for ASCII words.
MAX_BYTES_PER_WORD = 100

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@functools.lru_cache(maxsize=4)
def wordpiece_model(vocabulary):
    """tensorflow-text's FastWordpieceTokenizer model, flatbuffer bytes, for a tuple of tokens:
    BERT's settings ("##" suffixes, [UNK], MAX_BYTES_PER_WORD, splitting on whitespace and
    punctuation). Cached for the process's last four vocabularies: building it is most of the
    work of making a tokenizer, which every model made, loaded or copied for an export does.
    BertTokenizer hands it to tensorflow-text as a tensor (bytes go through a Python list)."""
    return pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
        list(vocabulary), MAX_BYTES_PER_WORD, "##", "[UNK]", False, False)


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
        require_bool(do_lower_case, "do_lower_case")
        self.do_lower_case = do_lower_case
        object.__setattr__(self, "vocabulary", None)
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
        # Plain attributes: Keras's attribute tracking would wrap both, walking every token.
        object.__setattr__(self, "vocabulary", vocabulary)
        object.__setattr__(self, "_token_ids", {token: i for i, token in enumerate(vocabulary)})
        model = np.frombuffer(wordpiece_model(tuple(vocabulary)), np.uint8)
        self._wordpiece = tf_text.FastWordpieceTokenizer(model_buffer=tf.constant(model),
                                                         token_out_type=tf.int32)  # fmt: skip

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
