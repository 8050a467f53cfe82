"""Extractive question answering (SQuAD v1.1 and v2.0) on raw strings.

    model = keras_bert.BertQuestionAnswerer.from_checkpoint(path)
    model.fit((questions, passages), (answer_starts, answer_ends), epochs=2)
    model.predict((["Who wrote it?"], ["It was written by Ann."]))["answer"]  # ["Ann"]

Passages of any length are split into windows, and answers decoded back to character offsets,
inside the TensorFlow graph (keras_bert/models/spans.py), the same code in `fit`, `predict` and an
export.
"""

import math

import keras
import numpy as np
import tensorflow as tf

from keras_bert import serving
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.model.heads import SpanLabelerHead
from keras_bert.models.pretrained import load_pretrained
from keras_bert.models.spans import SpanWindows
from keras_bert.models.task import BertTask
from keras_bert.text.text_cleaning import valid_utf8
from keras_bert.training import batching, distribute


@keras.saving.register_keras_serializable(package="keras_bert")
class BertQuestionAnswerer(BertTask):
    """Start and end logits over each window, float32 (windows, seq), decoded into answers.

    Args:
      encoder: a `BertEncoder`.
      preprocessor: a `SpanWindows` (window and n-best settings).
      version_2_with_negative: questions may have no answer (SQuAD 2.0): `predict` answers
        nothing when [CLS]'s score beats the best span's by more than
        `null_score_diff_threshold`.

    `fit` and `evaluate` take x = (questions, passages) and y = (answer_starts, answer_ends),
    character offsets [start, end) of the answer in its passage, start -1 for no answer.
    """

    ENCODER_OUTPUTS = ("sequence_output",)

    trains_pooler = False
    decodes_predictions = True

    def __init__(self, encoder, preprocessor, version_2_with_negative=False,
                 null_score_diff_threshold=0.0, **kwargs):  # fmt: skip
        if not math.isfinite(null_score_diff_threshold):
            raise ValueError(f"null_score_diff_threshold must be a finite number, got "
                             f"{null_score_diff_threshold}")  # fmt: skip
        # === Layers ===
        head = SpanLabelerHead(encoder.config.initializer_range, name="spans")
        # === Graph ===
        inputs = {n: keras.Input((None,), dtype="int32", name=n) for n in INPUT_NAMES}
        logits = head(encoder(inputs)["sequence_output"], inputs["input_mask"])
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.head = head
        self.version_2_with_negative = version_2_with_negative
        self.null_score_diff_threshold = null_score_diff_threshold

    @classmethod
    def from_checkpoint(cls, path, *, sequence_length=384, max_query_length=64, doc_stride=128,
                        n_best_size=20, max_answer_length=30, max_windows=64, do_lower_case=None,
                        **kwargs):  # fmt: skip
        """A question answerer on a checkpoint folder with a new span head, or on a finished
        run's folder: a SQuAD run's span head is kept too (a v2.0 run from a v1.1 run, say);
        the window settings are this call's."""
        encoder, tokenizer, source = load_pretrained(path, do_lower_case, sequence_length)
        windows = SpanWindows.from_tokenizer(
            tokenizer, sequence_length, max_query_length=max_query_length,
            doc_stride=doc_stride, n_best_size=n_best_size, max_answer_length=max_answer_length,
            max_windows=max_windows)  # fmt: skip
        model = cls(encoder, windows, **kwargs)
        if isinstance(source, BertQuestionAnswerer):  # a finished SQuAD run: keep its span head
            model.head.set_weights(source.head.get_weights())
        return model

    @property
    def threshold(self):
        """The no-answer threshold; None for SQuAD 1.1, which always answers."""
        return self.null_score_diff_threshold if self.version_2_with_negative else None

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        if loss == "auto":
            kwargs.setdefault("loss_weights", {"start_logits": 0.5, "end_logits": 0.5})
        super().compile(optimizer, loss, metrics, **kwargs)

    def default_loss(self):
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {"start_logits": loss, "end_logits": loss}

    def encode_targets(self, y):
        """(answer_starts, answer_ends), or rows of (start, end) -> two int64 arrays."""
        offsets = "character offsets as whole numbers, start -1 for no answer"
        try:
            given = [np.asarray(v) for v in (y if isinstance(y, tuple) else np.asarray(y).T)]
            with np.errstate(invalid="ignore"):  # NaN: refused below
                starts, ends = (v.astype("int64") for v in given)
        except (TypeError, ValueError):
            raise ValueError(f"y must be (answer_starts, answer_ends): {offsets}") from None
        _check_one_span_a_question(starts.shape, ends.shape)
        for name, values, whole in zip(("answer_starts", "answer_ends"), given, (starts, ends)):
            if values.dtype.kind not in "iu":  # a cast made offset 4.5 offset 4
                bad = np.flatnonzero(~(values == whole))
                if bad.size:
                    raise ValueError(f"{name}[{bad[0]}] is {values[bad[0]].item()!r}: give "
                                     f"{offsets}")  # fmt: skip
        return starts, ends

    def preprocess_batch(self, x, y=None, sample_weight=None):
        """A batch of (questions, passages) and answer spans -> its windows' encoder inputs and
        start / end targets; a question's weight goes to each of its windows."""
        if y is None:
            raise ValueError("fit and evaluate need y = (answer_starts, answer_ends); "
                             "predict needs only x")  # fmt: skip
        if tf.is_tensor(y) and y.shape.rank == 2 and y.shape[-1] == 2:  # rows of (start, end)
            y = tuple(tf.unstack(y, axis=1))
        if not (isinstance(y, (tuple, list)) and len(y) == 2):
            got = f"shape {y.shape}" if tf.is_tensor(y) else type(y).__name__
            raise ValueError("y must be (answer_starts, answer_ends), or rows of (start, end); "
                             f"got y of {got}")  # fmt: skip
        y = [tf.convert_to_tensor(v) for v in y]
        _check_one_span_a_question(*(v.shape for v in y))
        for v in y:
            if v.dtype.is_floating:  # NaN is not equal to itself, so it fails too
                tf.debugging.assert_equal(v, tf.round(v),
                                          message="an answer offset is not a whole number")
        questions, contexts = self.preprocessor.segments(x)
        tf.debugging.assert_equal(tf.reduce_any(bad_spans(contexts, y[0], y[1])), False,
                                  message="an answer span is not within its passage")
        w = self.preprocessor.windows(questions, contexts, y[0], y[1])
        inputs = {n: w[n] for n in INPUT_NAMES}
        targets = {"start_logits": w["start_positions"], "end_logits": w["end_positions"]}
        weights = None if sample_weight is None else tf.gather(sample_weight, w["example"])
        return inputs, targets, weights

    def make_dataset(self, x, y=None, sample_weight=None, batch_size=None, training=False,
                     seed=None):  # fmt: skip
        """Batches of `batch_size` windows with their targets (needs y)."""
        if isinstance(x, tf.data.Dataset) and batching.is_prepared(x):
            return x
        if y is None and not isinstance(x, tf.data.Dataset):
            raise ValueError("fit and evaluate need y = (answer_starts, answer_ends); "
                             "predict needs only x")  # fmt: skip
        pairs = self.batched(x, y, sample_weight, 256, shuffle=training, seed=seed)
        windows = self.preprocessed(pairs).unbatch()
        if training:
            windows = windows.shuffle(4 * (batch_size or 32), seed=seed)
        whole = training and distribute.is_tpu(self.distribute_strategy)  # static batches
        windows = windows.padded_batch(batch_size or 32, drop_remainder=whole)
        return self.for_xla(windows).prefetch(tf.data.AUTOTUNE)

    def check_targets(self, x, y):
        contexts = self.preprocessor.segments(x)[1]
        bad = bad_spans(contexts, *y).numpy()
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"example {row}: the answer [{y[0][row]}, {y[1][row]}) is not "
                             f"within its passage of {int(_characters(contexts)[row])} "
                             "characters: give [start, end) character offsets with start < "
                             "end, or start -1 for no answer")  # fmt: skip

    def answer(self, questions, contexts):
        """tf.string (batch,) questions and passages -> the best answers, in the graph: `answer`,
        `start`, `end` (character offsets, -1 for none), `score`, `no_answer` (SQuAD 2.0) and
        `candidates` (the n-best; see SpanWindows.decode)."""
        return self.preprocessor.answer(self, questions, contexts, self.threshold)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """Answers for x = (questions, passages): a dict of NumPy arrays over the questions,
        `answer` (str), `start`, `end`, `score`, `no_answer` (SQuAD 2.0), `passage_cut` (the
        passage was longer than the preprocessor's `max_windows` windows), and `candidates`, a
        dict of (questions, n_best_size) arrays: `scores`, `char_starts`, `char_ends`, and
        `null_score` (questions,)."""
        results = [_pad_candidates(result, self.preprocessor.n_best_size) for result in
                   self.map_batches(self.answer, x, batch_size, verbose, unit="question")]  # fmt: skip
        merged = tf.nest.map_structure(lambda *parts: np.concatenate(parts), *results)
        merged["answer"] = np.array([a.decode("utf-8") for a in merged["answer"]], object)
        return merged

    def serving_functions(self):
        def from_text(question, context):
            result = self.answer(question, context)
            del result["candidates"]
            return result

        return {"serving_default": (from_text, serving.text_specs(("question", "context")))}

    def warmup_requests(self):
        texts = ["A short warm-up passage.", "", "Another, longer passage to warm up the server."]
        return [{"question": ["Who warms up?"], "context": texts[:1]},
                {"question": ["Who?"] * 3, "context": texts}]  # fmt: skip

    def get_config(self):
        return {**super().get_config(), "version_2_with_negative": self.version_2_with_negative,
                "null_score_diff_threshold": self.null_score_diff_threshold}  # fmt: skip


def _characters(contexts):
    """Characters of each passage, an invalid UTF-8 sequence counted as one (as offsets are)."""
    return tf.strings.length(valid_utf8(contexts), unit="UTF8_CHAR")


def bad_spans(contexts, starts, ends):
    """bool (batch,): which answer spans are neither "no answer" (start -1) nor characters
    [start, end) of their passage with start < end."""
    starts, ends = (tf.cast(v, tf.int64) for v in (starts, ends))
    length = tf.cast(_characters(contexts), tf.int64)
    return (starts != -1) & ((starts < 0) | (ends <= starts) | (ends > length))


def _pad_candidates(result, n_best):
    """Pads the n-best arrays of one batch to n_best columns, so batches concatenate."""
    candidates = dict(result["candidates"])
    for key, fill in (("scores", -np.inf), ("char_starts", -1), ("char_ends", -1)):
        values = candidates[key]
        candidates[key] = np.pad(values, ((0, 0), (0, n_best - values.shape[1])),
                                 constant_values=fill)  # fmt: skip
    return {**result, "candidates": candidates}


def _check_one_span_a_question(starts_shape, ends_shape):
    """Refuses answer starts and ends that are not one of each a question (several answers a
    question, say, as SQuAD's dev set has them): they failed mid-epoch in tf.data's graph."""
    if len(starts_shape) == 0 or len(ends_shape) == 0:
        raise ValueError("y must be (answer_starts, answer_ends), each a list with one entry a "
                         "question: ([start], [end]) for one question")  # fmt: skip
    if len(starts_shape) != 1 or len(ends_shape) != 1:
        shapes = [tuple(shape) for shape in (starts_shape, ends_shape)]
        raise ValueError(f"y must be (answer_starts, answer_ends), one start and one end a "
                         f"question, got shapes {shapes[0]} and {shapes[1]}; where a question "
                         "has several answers, train on one of them")  # fmt: skip
