"""The input packer: token ids of one or two segments to the encoder's inputs, as a Keras
layer on core TensorFlow ops (eager, in `tf.data` and in saved `tf.function`s)."""

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


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
        are several times slower to trace: docs/performance.md.)"""
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
