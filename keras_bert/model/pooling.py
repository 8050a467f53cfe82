"""Pooling layers: a text's windows into the text (long texts), and a text's token vectors
into one sentence vector (the text embedder)."""

import keras
from keras import ops

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


@_SERIALIZABLE
class CombineWindows(keras.layers.Layer):
    """A text's window logits -> the text's logits: their mean or their max over the text's
    windows (those whose `input_mask` has a real token).

    Call with logits float32 (batch * windows, classes), as the windows were folded
    (`FoldChoices`), and input_mask int (batch, windows, seq); returns float32
    (batch, classes)."""

    def __init__(self, pooling="mean", **kwargs):
        super().__init__(**kwargs)
        if pooling not in ("mean", "max"):
            raise ValueError(f"CombineWindows pools by 'mean' or 'max', got {pooling!r}")
        self.pooling = pooling

    def call(self, logits, input_mask):
        shape = ops.shape(input_mask)
        logits = ops.reshape(logits, (shape[0], shape[1], -1))  # (batch, windows, classes)
        real = ops.any(input_mask > 0, axis=-1)[:, :, None]
        if self.pooling == "max":
            return ops.max(ops.where(real, logits, float("-inf")), axis=1)
        count = ops.sum(ops.cast(real, logits.dtype), axis=1)
        return ops.sum(ops.where(real, logits, 0.0), axis=1) / ops.maximum(count, 1.0)

    def compute_output_shape(self, logits_shape, input_mask_shape):
        return (input_mask_shape[0], logits_shape[-1])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling}


@_SERIALIZABLE
class AttendWindows(keras.layers.Layer):
    """A text's window [CLS] vectors -> one vector for the text: their sum weighted by a
    softmax over the text's windows (those whose `input_mask` has a real token) of a learned
    score, one dense unit a window. The score's kernel starts at zero, so an untrained layer
    takes the windows' mean.

    Call with pooled (batch * windows, hidden), as the windows were folded (`FoldChoices`),
    and input_mask int (batch, windows, seq); returns (batch, hidden) in the layer's dtype."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.score = keras.layers.Dense(1, kernel_initializer="zeros", dtype="float32",
                                        name="score")  # fmt: skip

    def build(self, pooled_shape, input_mask_shape=None):
        self.score.build(pooled_shape)

    def call(self, pooled, input_mask):
        shape = ops.shape(input_mask)
        pooled = ops.cast(pooled, "float32")
        scores = ops.reshape(self.score(pooled), (shape[0], shape[1]))  # (batch, windows)
        real = ops.any(input_mask > 0, axis=-1)
        weights = ops.softmax(ops.where(real, scores, -1e9), axis=-1)
        vectors = ops.reshape(pooled, (shape[0], shape[1], -1))  # (batch, windows, hidden)
        return ops.cast(ops.sum(vectors * weights[:, :, None], axis=1), self.compute_dtype)

    def compute_output_shape(self, pooled_shape, input_mask_shape):
        return (input_mask_shape[0], pooled_shape[-1])


@_SERIALIZABLE
class SentenceVectors(keras.layers.Layer):
    """Token vectors -> one float32 vector a text, pooled as a sentence-transformers model
    pools them, then optionally scaled to unit length.

    pooling: "mean" (of the real tokens' vectors), "max" (over the real tokens), "cls" (the
    first token's vector, not the pooler's output) or "mean_sqrt_len" (their sum over the
    square root of their count).

    Call with sequence_output (batch * texts, seq, hidden), as the texts were folded
    (`FoldChoices`), and input_mask int (batch, texts, seq); returns float32
    (batch, texts, hidden)."""

    POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")

    def __init__(self, pooling="mean", normalize=True, **kwargs):
        super().__init__(**kwargs)
        if pooling not in self.POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(self.POOLINGS)}, got "
                             f"{pooling!r}")  # fmt: skip
        self.pooling = pooling
        self.normalize = bool(normalize)

    def call(self, sequence_output, input_mask):
        shape = ops.shape(input_mask)
        tokens = ops.cast(sequence_output, "float32")
        mask = ops.cast(ops.reshape(input_mask, (-1, shape[2])) > 0, "float32")[:, :, None]
        if self.pooling == "cls":
            vectors = tokens[:, 0]
        elif self.pooling == "max":
            vectors = ops.max(tokens * mask + (1.0 - mask) * -1e9, axis=1)
        else:
            count = ops.maximum(ops.sum(mask, axis=1), 1e-9)
            root = ops.sqrt(count) if self.pooling == "mean_sqrt_len" else count
            vectors = ops.sum(tokens * mask, axis=1) / root
        if self.normalize:
            norm = ops.sqrt(ops.sum(ops.square(vectors), axis=-1, keepdims=True))
            vectors = vectors / ops.maximum(norm, 1e-12)
        return ops.reshape(vectors, (shape[0], shape[1], -1))

    def compute_output_shape(self, sequence_output_shape, input_mask_shape):
        return (input_mask_shape[0], input_mask_shape[1], sequence_output_shape[-1])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling, "normalize": self.normalize}
