"""Texts longer than a sequence: each cut into overlapping windows of tokens, each window
packed as a sequence of its own, for models that read a whole text (`BertClassifier` made with
`max_windows`).

A text's tokens are split as the original run_squad.py splits a passage: windows of the
positions left after [CLS] and the [SEP]s (and, for pairs, the first text), each starting
`stride` tokens after the one before; at most `max_windows` of them, and `cut` says which texts
needed more (their ends are not read).
"""

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.packer import same_batch
from keras_bert.text.preprocessing import BertPreprocessor

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def window_step(room, stride):
    """int64 (batch,): tokens between the starts of a text's windows, `stride` (None: half a
    window's `room`) but at most the room and at least 1."""
    return tf.maximum(room // 2 if stride is None else tf.minimum(room, stride), 1)


def check_stride(stride, room, sequence_length):
    """Refuses, in one line, a `stride` (None for the default) that is not a whole number from
    1 to `room`, the tokens of text a window of `sequence_length` holds: a longer one skips
    text between windows."""
    if stride is None:
        return
    whole_number(stride, 1, "stride", f" (tokens between window starts: 1 to {room})")
    if stride > room:
        raise ValueError(f"stride={stride} skips text: a window of sequence_length="
                         f"{sequence_length} holds {room} tokens of it; pass a stride of at "
                         f"most {room}")  # fmt: skip


def window_spans(lengths, room, step, max_windows):
    """Where each text's windows lie.

    Args:
      lengths: int64 (batch,), tokens of each text.
      room: int64 (batch,), tokens a window of that text holds.
      step: int64 (batch,), tokens between the starts of its windows (`window_step`).
      max_windows: windows a text gets at most.

    Returns a dict: `example` and `index`, int64 (windows,), the text each window comes from
    and its number within the text; `starts` and `sizes`, int64 (windows,), its first token
    and its token count; `positions`, ragged (windows, (tokens)), each window token's place in
    its text; `counts`, int64 (batch,), each text's windows; `cut`, bool (batch,), whether a
    text needed more than `max_windows`. Every text has at least one window (an empty text's
    is empty).
    """
    needed = 1 + tf.maximum(lengths - room + step - 1, 0) // step
    counts = tf.minimum(needed, max_windows)
    example = tf.repeat(tf.range(tf.size(counts, out_type=tf.int64)), counts)
    index = tf.ragged.range(counts).flat_values
    starts = index * tf.gather(step, example)
    sizes = tf.maximum(tf.minimum(tf.gather(room, example), tf.gather(lengths, example) - starts),
                       0)  # fmt: skip
    return {"example": example, "index": index, "starts": starts, "sizes": sizes,
            "positions": tf.ragged.range(starts, starts + sizes), "counts": counts,
            "cut": needed > max_windows}  # fmt: skip


def flat_pieces(spans, ids):
    """int64 (tokens of all windows,): each window token (`window_spans`' `positions`) as an
    index into the flat values of the texts' ids, ragged (batch, (tokens))."""
    positions = spans["positions"]
    # On flat values: a ragged + dense op traces TensorFlow's ragged shape broadcasting.
    offset = tf.gather(ids.row_starts(), spans["example"])
    return positions.flat_values + tf.gather(offset, positions.value_rowids())


def take_windows(ids, spans):
    """The windows' tokens, ragged (windows, (tokens)), of texts' ids ragged (batch, (tokens))."""
    return spans["positions"].with_flat_values(tf.gather(ids.flat_values, flat_pieces(spans, ids)))


def max_context(spans, step, room, lengths):
    """bool (tokens of all windows,), over `spans["positions"]`' flat values: whether each
    window's token has its most context in that window among all windows of its text (min of
    the tokens to its left and to its right, plus 0.01 x the window's size; the first such
    window on ties), the original run_squad.py's rule. `spans` is `window_spans`' result for
    the texts' `step`, `room` and `lengths`, int64 (batch,) each."""
    positions, counts = spans["positions"], spans["counts"]
    token_example = tf.gather(spans["example"], positions.value_rowids())
    p = positions.flat_values[:, None]  # (tokens, 1) place in the text
    longest = tf.maximum(tf.reduce_max(counts), 0)  # 0, not int64's min, for an empty batch
    k = tf.range(longest)[None, :]  # (1, windows of the text with most)
    start = k * tf.gather(step, token_example)[:, None]
    length = tf.minimum(tf.gather(room, token_example)[:, None],
                        tf.gather(lengths, token_example)[:, None] - start)  # fmt: skip
    valid = (k < tf.gather(counts, token_example)[:, None]) & (p >= start) & (p < start + length)
    score = tf.cast(tf.minimum(p - start, start + length - 1 - p), tf.float64) + 0.01 * (
        tf.cast(length, tf.float64))
    score = tf.where(valid, score, -float("inf"))
    best = tf.reduce_max(score, axis=1, keepdims=True)
    first_best = tf.reduce_min(tf.where(score == best, k, tf.int64.max), axis=1)
    own = tf.gather(spans["index"], positions.value_rowids())
    return first_best == own


@_SERIALIZABLE
class BertWindowsPreprocessor(BertPreprocessor):
    """A `BertPreprocessor` that reads whole texts. Each text (of a pair, the second; the first
    is cut to `first_text_length` tokens and packed into every window) is cut into
    overlapping windows, each packed as a sequence of its own.

    Args:
      tokenizer, packer, num_segments: as `BertPreprocessor`'s; the packer's
        `sequence_length` is a window's.
      max_windows: windows a text is read in at most; a longer text's end is not read.
      stride: tokens between the starts of a text's windows, at most a window's room for
        text; default half of it, so that each token after the first half-window is read
        twice.

    Call as a `BertPreprocessor`; returns encoder inputs int32 (batch, windows, seq), windows
    the batch's most, a shorter text's extra windows all 0 (`input_mask` 0). `windows(x)`
    also returns `cut`, bool (batch,): which texts needed more than `max_windows` windows.
    """

    def __init__(self, tokenizer, packer, num_segments=1, max_windows=8, stride=None,
                 **kwargs):  # fmt: skip
        super().__init__(tokenizer, packer, num_segments, **kwargs)
        self.max_windows = whole_number(max_windows, 1, "max_windows")
        room = self.sequence_length - 1 - num_segments - (
            self.first_text_length if num_segments == 2 else 0)  # fmt: skip
        check_stride(stride, room, self.sequence_length)
        self.stride = stride

    @property
    def first_text_length(self):
        """Tokens a pair's first text keeps; each window holds the second's in the rest."""
        return (self.sequence_length - 3) // 2

    def graph_settings(self):
        return (*super().graph_settings(), self.max_windows, self.stride)

    def call(self, x):
        return self.windows(x)[0]

    def windows(self, x):
        """Texts as `call` takes them -> (encoder inputs int32 (batch, windows, seq), `cut`
        bool (batch,))."""
        first, ids, spans = self._spans(x)
        example, cut = spans["example"], spans["cut"]
        parts = [take_windows(ids, spans)]
        if first is not None:
            parts.insert(0, tf.gather(first, example))
        packed = self.packer(*parts)  # (windows, seq)
        batch = tf.size(cut, out_type=tf.int64)
        inputs = {name: tf.RaggedTensor.from_value_rowids(packed[name], example, batch).to_tensor()
                  for name in INPUT_NAMES}  # fmt: skip
        return inputs, cut

    def cut(self, x):
        """bool (batch,): which texts need more than `max_windows` windows (their ends are not
        read), found without packing any."""
        return self._spans(x)[2]["cut"]

    def _spans(self, x):
        """(a pair's first texts' ids, cut to `first_text_length`, or None; the windowed texts'
        ids; `window_spans` of them)."""
        segments = self.segments(x)
        ids = self.tokenizer(segments[-1])
        lengths = ids.row_lengths()
        room = tf.fill(tf.shape(lengths), tf.constant(self.sequence_length - 2, tf.int64))
        first = None
        if self.num_segments == 2:
            with tf.control_dependencies([same_batch(*segments, "first and second texts")]):
                first = self.tokenizer(segments[0])[:, : self.first_text_length]
            room = room - 1 - first.row_lengths()
        return first, ids, window_spans(lengths, room, window_step(room, self.stride),
                                        self.max_windows)  # fmt: skip

    def get_config(self):
        return {**super().get_config(), "max_windows": self.max_windows, "stride": self.stride}
