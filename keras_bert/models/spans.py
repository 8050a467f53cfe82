"""SQuAD inside the graph: question and passage strings become windows of encoder inputs, and
the model's start and end logits over those windows become answer spans in the passage.

The fine-tuning binary (training targets, evaluation) and the exported SavedModel both use
this one implementation, so a served answer is the answer the evaluation scored.

Windows follow the original run_squad.py: the question is cut to `max_query_length` tokens,
the passage is split into windows of the tokens left over, each starting `doc_stride` tokens
after the last, and a passage token counts as an answer start only in the window where it has
the most context (min of tokens to its left and right, plus 0.01 x window length; the first such
window on ties). Positions are character offsets into the passage, from the tokenizer.
"""

import keras
import tensorflow as tf

from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.packer import same_batch
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.text_cleaning import valid_utf8
from keras_bert.text.windows import flat_pieces, max_context, window_spans

NO_POSITION = -1  # character offset of positions off the passage (a Python int: no tensor at import)


@keras.saving.register_keras_serializable(package="keras_bert")
class SpanWindows(BertPreprocessor):
    """Builds windows and decodes spans; every method runs eagerly or inside tf.function.

    Its packer's `sequence_length` is max_seq_length; `from_tokenizer(tokenizer,
    max_seq_length, ...)` builds one."""

    def __init__(self, tokenizer, packer, max_query_length=64, doc_stride=128, n_best_size=20,
                 max_answer_length=30, max_windows=64, **kwargs):  # fmt: skip
        kwargs["num_segments"] = 2
        super().__init__(tokenizer, packer, **kwargs)
        max_seq_length = packer.sequence_length
        if max_query_length + 4 > max_seq_length:
            raise ValueError(f"max_query_length ({max_query_length}) leaves no room for the "
                             f"passage in windows of sequence_length={max_seq_length} tokens: "
                             f"pass max_query_length={max_seq_length - 4} or less, or a longer "
                             "sequence_length")  # fmt: skip
        for name, value in (("max_query_length", max_query_length), ("doc_stride", doc_stride),
                            ("n_best_size", n_best_size), ("max_answer_length", max_answer_length),
                            ("max_windows", max_windows)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.max_query_length = max_query_length
        self.doc_stride = doc_stride
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.max_windows = max_windows

    @property
    def max_seq_length(self):
        return self.packer.sequence_length

    @property
    def text_names(self):
        return ("question", "context")

    def call(self, x):
        return self.windows(*self.segments(x))

    def get_config(self):
        config = {**super().get_config(), "max_query_length": self.max_query_length,
                  "doc_stride": self.doc_stride, "n_best_size": self.n_best_size,
                  "max_answer_length": self.max_answer_length,
                  "max_windows": self.max_windows}  # fmt: skip
        del config["num_segments"]
        return config

    def windows(self, questions, contexts, answer_starts=None, answer_ends=None):
        """Splits each (question, passage) pair into windows.

        Args:
          questions, contexts: tf.string (batch,).
          answer_starts, answer_ends: optional int (batch,) character span [start, end) of
            the answer in the passage; start -1 for no answer. Gives training targets.

        Returns a dict over windows (`windows` >= batch): the encoder inputs, int32
        (windows, seq); `example` int64 (windows,), the pair each window comes from;
        `passage_cut` bool (batch,), whether a passage needed more than `max_windows`;
        `char_starts` and `char_ends` int64 (windows, seq), the passage characters of each
        position (-1 off the passage); `max_context` bool (windows, seq); with
        answers also `start_positions` and `end_positions` int32 (windows,), 0 ([CLS]) when
        the answer is not inside the window.
        """
        with tf.control_dependencies([same_batch(questions, contexts, "questions and passages")]):
            question_ids = self.tokenizer(questions)[:, : self.max_query_length]
        context_ids, char_starts, char_ends = self.tokenizer.tokenize_with_offsets(contexts)
        query_lengths = question_ids.row_lengths()
        doc_lengths = context_ids.row_lengths()
        room = self.max_seq_length - 3 - query_lengths  # passage tokens per window
        step = tf.minimum(room, self.doc_stride)
        # A passage's windows are bounded, so one huge passage cannot hold a server for seconds;
        # its text past the last window is not read (`passage_cut` says so).
        spans = window_spans(doc_lengths, room, step, self.max_windows)
        example, starts, lengths = spans["example"], spans["starts"], spans["sizes"]
        positions, flat = spans["positions"], flat_pieces(spans, context_ids)
        passage_ids = positions.with_flat_values(tf.gather(context_ids.flat_values, flat))
        inputs = self.packer(tf.gather(question_ids, example), passage_ids)
        shape = tf.shape(inputs["input_word_ids"], out_type=tf.int64)
        prefix_lengths = tf.gather(query_lengths, example) + 2  # [CLS] question [SEP]

        # Each window position's passage token as an index into `positions`' flat values, or
        # one past the last (NO_POSITION below) where the position is off the passage.
        token = tf.range(shape[1])[None, :] - prefix_lengths[:, None]  # (windows, seq)
        on_passage = (token >= 0) & (token < lengths[:, None])
        off = tf.size(flat, tf.int64)
        token = tf.where(on_passage, token + positions.row_starts()[:, None], off)

        def on_positions(values):  # flat passage-token values -> (windows, seq)
            return tf.gather(tf.concat([values, [NO_POSITION]], 0), token)

        result = {
            **inputs,
            "example": example,
            "passage_cut": spans["cut"],
            "char_starts": on_positions(tf.gather(char_starts.flat_values, flat)),
            "char_ends": on_positions(tf.gather(char_ends.flat_values, flat)),
            "max_context": on_positions(tf.cast(max_context(spans, step, room, doc_lengths),
                                                tf.int64)) > 0,
        }  # fmt: skip
        if answer_starts is not None:
            first, last = _answer_tokens(char_starts, char_ends, answer_starts, answer_ends)
            first, last = tf.gather(first, example), tf.gather(last, example)
            answerable = tf.gather(tf.cast(answer_starts, tf.int64) >= 0, example)
            inside = answerable & (first <= last) & (first >= starts) & (last < starts + lengths)
            result["start_positions"] = tf.cast(
                tf.where(inside, first - starts + prefix_lengths, 0), tf.int32)
            result["end_positions"] = tf.cast(
                tf.where(inside, last - starts + prefix_lengths, 0), tf.int32)
        return result

    def decode(self, windows, start_logits, end_logits):
        """The best spans of each pair.

        Args:
          windows: the dict `windows()` returned.
          start_logits, end_logits: float32 (windows, seq).

        Returns a dict over pairs: `scores` float32 (batch, n_best) of start + end logits,
        best first, -inf where there are fewer candidates; `char_starts`, `char_ends` int64
        (batch, n_best) the span's characters [start, end) in the passage; `null_score`
        float32 (batch,), the smallest [CLS] start + end logit over the pair's windows.
        A candidate starts at a passage token in its window of most context, ends at a
        passage token of the same window, not before the start, and spans at most
        `max_answer_length` tokens.
        """
        on_passage = windows["char_starts"] >= 0
        neg_inf = tf.constant(-float("inf"), tf.float32)
        k = tf.minimum(self.n_best_size, tf.shape(start_logits)[1])
        top_start = tf.math.top_k(tf.where(on_passage & windows["max_context"],
                                           start_logits, neg_inf), k)  # fmt: skip
        top_end = tf.math.top_k(tf.where(on_passage, end_logits, neg_inf), k)
        scores = top_start.values[:, :, None] + top_end.values[:, None, :]  # (windows, k, k)
        span = top_end.indices[:, None, :] - top_start.indices[:, :, None] + 1
        valid = (span >= 1) & (span <= self.max_answer_length) & (scores > neg_inf)
        scores = tf.reshape(tf.where(valid, scores, neg_inf), [tf.shape(scores)[0], -1])
        starts = tf.gather(windows["char_starts"], top_start.indices, batch_dims=1)
        ends = tf.gather(windows["char_ends"], top_end.indices, batch_dims=1)
        starts = tf.reshape(tf.broadcast_to(starts[:, :, None], tf.shape(valid)), tf.shape(scores))
        ends = tf.reshape(tf.broadcast_to(ends[:, None, :], tf.shape(valid)), tf.shape(scores))

        # Where each pair's candidates (those of all its windows) are in the flattened
        # (windows, k * k) values, -1 past its last; built once for the three values below.
        flat_index = tf.reshape(tf.range(tf.size(scores, tf.int64)), tf.shape(scores))
        ragged = tf.RaggedTensor.from_value_rowids(flat_index, windows["example"]).merge_dims(1, 2)
        # At least one column, even for an empty batch, for the best answer's [:, 0].
        width = tf.maximum(ragged.bounding_shape(axis=1), 1)
        pair_index = ragged.to_tensor(-1, shape=tf.stack([ragged.nrows(), width]))

        def per_pair(values, fill):  # (windows, k * k) -> (batch, candidates of all windows)
            flat = tf.gather(tf.reshape(values, [-1]), tf.maximum(pair_index, 0))
            return tf.where(pair_index >= 0, flat, fill)

        pair_scores = per_pair(scores, neg_inf)
        n_best = tf.minimum(self.n_best_size, tf.shape(pair_scores)[1])
        best = tf.math.top_k(pair_scores, n_best)
        found = best.values > neg_inf

        def ranked(values):  # candidates in score order; NO_POSITION where there are none
            values = tf.gather(per_pair(values, tf.constant(NO_POSITION, tf.int64)), best.indices,
                               batch_dims=1)  # fmt: skip
            return tf.where(found, values, tf.constant(NO_POSITION, tf.int64))

        null = start_logits[:, 0] + end_logits[:, 0]
        return {
            "scores": best.values,
            "char_starts": ranked(starts),
            "char_ends": ranked(ends),
            "null_score": tf.math.segment_min(null, windows["example"]),
        }

    def answer(self, model, questions, contexts, null_score_diff_threshold=None):
        """Questions and passages in, best answers out: the whole pipeline of an export.

        Returns a dict over pairs: `answer` tf.string, `start` and `end` int64 character
        offsets in the passage (-1 when there is none), `score` float32 (start + end logit),
        `passage_cut` bool, true when the passage was longer than `max_windows` windows (its
        end was not read), and with a threshold (SQuAD 2.0) `no_answer` bool, true when [CLS]'s score beats the
        best span's by more than the threshold. `candidates` holds decode()'s n-best.
        """
        contexts = valid_utf8(contexts)
        windows = self.windows(questions, contexts)
        logits = model({name: windows[name] for name in INPUT_NAMES}, training=False)
        best = self.decode(windows, logits["start_logits"], logits["end_logits"])
        start, end, score = best["char_starts"][:, 0], best["char_ends"][:, 0], best["scores"][:, 0]
        empty = start < 0
        result = {"start": start, "end": end, "score": score, "candidates": best,
                  "passage_cut": windows["passage_cut"]}  # fmt: skip
        if null_score_diff_threshold is not None:
            result["no_answer"] = empty = empty | (
                best["null_score"] - score > null_score_diff_threshold)
        text = tf.strings.substr(contexts, tf.maximum(start, 0), tf.maximum(end - start, 0),
                                 unit="UTF8_CHAR")  # fmt: skip
        none = tf.constant(NO_POSITION, tf.int64)
        result.update(answer=tf.where(empty, "", text), start=tf.where(empty, none, start),
                      end=tf.where(empty, none, end))  # fmt: skip
        return result


def _answer_tokens(char_starts, char_ends, answer_starts, answer_ends):
    """int64 (batch,) first and last passage token overlapping each answer's characters."""
    rows, batch = char_starts.value_rowids(), char_starts.nrows()  # char_ends' rows too

    def count(flags):  # true flat values per row (flat: see windows())
        return tf.math.unsorted_segment_sum(tf.cast(flags, tf.int64), rows, batch)

    answer_starts = tf.gather(tf.cast(answer_starts, tf.int64), rows)
    answer_ends = tf.gather(tf.cast(answer_ends, tf.int64), rows)
    first = count(char_ends.flat_values <= answer_starts)
    last = count(char_starts.flat_values < answer_ends) - 1
    return first, last
