"""Heads that sit on a BertEncoder's outputs. Small, named, and without losses."""

import keras
from keras import ops

from keras_bert.model import primitives

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")

# A span logit at a padded position: exp(PADDING_LOGIT - any real logit) is 0 in float32.
PADDING_LOGIT = -10000.0


@_SERIALIZABLE
class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head: dense, activation, LayerNorm, then the tied token embedding and a bias.

    Computes logits only at the masked positions, so the vocabulary projection costs
    (batch, predictions) rather than (batch, seq) rows.

    Args:
      word_embeddings: the encoder's `embeddings.word_embeddings` layer, whose table is the
        output projection (tied weights). It belongs to the encoder and is not part of this
        layer's config: whoever builds the head passes it.
      hidden_act: a `BertConfig.hidden_act` name.
      initializer_range: stddev of the truncated-normal initializer.

    Call with `sequence_output`, (batch, seq, hidden), and `masked_positions`, int32
    (batch, predictions). Returns float32 logits (batch, predictions, vocab_size).
    """

    def __init__(self, word_embeddings, hidden_act="gelu", initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.word_embeddings = word_embeddings
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            word_embeddings.output_dim,
            activation=primitives.activation(hidden_act),
            kernel_initializer=primitives.initializer(initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.layer_norm = primitives.layer_norm("layer_norm")

    def build(self, sequence_output_shape, masked_positions_shape=None):
        hidden_size = self.word_embeddings.output_dim
        self.dense.build((None, hidden_size))
        self.layer_norm.build((None, hidden_size))
        self.output_bias = self.add_weight(
            shape=(self.word_embeddings.input_dim,), initializer="zeros", name="output_bias"
        )

    def call(self, sequence_output, masked_positions):
        positions = ops.cast(masked_positions, "int32")[:, :, None]
        gathered = ops.take_along_axis(sequence_output, positions, axis=1)  # (batch, preds, hidden)
        x = ops.cast(self.layer_norm(self.dense(gathered)), self.compute_dtype)
        table = ops.cast(self.word_embeddings.embeddings, self.compute_dtype)
        logits = ops.matmul(x, ops.transpose(table))  # (batch, preds, vocab)
        return ops.cast(logits, "float32") + self.output_bias

    def compute_output_shape(self, sequence_output_shape, masked_positions_shape):
        return (*masked_positions_shape, self.word_embeddings.input_dim)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_act=self.hidden_act, initializer_range=self.initializer_range)
        return config


@_SERIALIZABLE
class NextSentenceHead(keras.layers.Layer):
    """Next-sentence prediction: (batch, hidden) pooled output -> float32 (batch, 2) logits.

    Class 0 means "B follows A", class 1 "B is random", as in the original BERT code.
    """

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2,
            kernel_initializer=primitives.initializer(initializer_range),
            dtype="float32",
            name="dense",
        )

    def build(self, pooled_output_shape):
        self.dense.build(pooled_output_shape)

    def call(self, pooled_output):
        return self.dense(pooled_output)

    def compute_output_shape(self, pooled_output_shape):
        return (pooled_output_shape[0], 2)

    def get_config(self):
        return {**super().get_config(), "initializer_range": self.initializer_range}


@_SERIALIZABLE
class ClassifierHead(keras.layers.Layer):
    """Dropout and a dense layer on the pooled [CLS] output.

    `num_classes=1` gives one unbounded score (regression, as for STS-B).
    Call with (batch, hidden); returns float32 (batch, num_classes) logits.
    """

    def __init__(self, num_classes, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")
        self.dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=primitives.initializer(initializer_range),
            dtype="float32",  # logits feed the loss and the softmax in float32
            name="dense",
        )

    def build(self, pooled_output_shape):
        self.dense.build(pooled_output_shape)

    def call(self, pooled_output, training=None):
        return self.dense(self.dropout(pooled_output, training=training))

    def compute_output_shape(self, pooled_output_shape):
        return (pooled_output_shape[0], self.num_classes)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }


@_SERIALIZABLE
class MultipleChoiceHead(keras.layers.Layer):
    """One score per choice: each choice was packed with the context and encoded on its own.

    Call with the pooled output of all choices, (batch * num_choices, hidden), grouped by
    example; returns float32 (batch, num_choices) logits, to be soft-maxed across choices.
    """

    def __init__(self, num_choices, dropout_rate=0.1, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_choices = num_choices
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.scorer = ClassifierHead(1, dropout_rate, initializer_range, name="scorer")

    def build(self, pooled_output_shape):
        self.scorer.build(pooled_output_shape)

    def call(self, pooled_output, training=None):
        scores = self.scorer(pooled_output, training=training)  # (batch * choices, 1)
        return ops.reshape(scores, (-1, self.num_choices))

    def compute_output_shape(self, pooled_output_shape):
        return (None, self.num_choices)

    def get_config(self):
        return {
            **super().get_config(),
            "num_choices": self.num_choices,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }


@_SERIALIZABLE
class FoldChoices(keras.layers.Layer):
    """(batch, choices, seq) -> (batch * choices, seq), so each choice is encoded on its own."""

    def call(self, inputs):
        return ops.reshape(inputs, (-1, ops.shape(inputs)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])


@_SERIALIZABLE
class SpanLabelerHead(keras.layers.Layer):
    """Start and end logits for every position (SQuAD): (batch, seq, hidden) in, a dict of two
    float32 (batch, seq) tensors out, `start_logits` and `end_logits`.

    With `input_mask` (batch, seq), padded positions get PADDING_LOGIT, no probability in a
    softmax over the window: the loss of a window is then the same whatever padding its batch
    has (the original run_squad.py left padding's logits in the softmax)."""

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2,
            kernel_initializer=primitives.initializer(initializer_range),
            dtype="float32",
            name="dense",
        )

    def build(self, sequence_output_shape, input_mask_shape=None):
        self.dense.build(sequence_output_shape)

    def call(self, sequence_output, input_mask=None):
        logits = self.dense(sequence_output)  # (batch, seq, 2)
        if input_mask is not None:
            real = ops.expand_dims(ops.cast(input_mask, "bool"), -1)  # (batch, seq, 1)
            logits = ops.where(real, logits, PADDING_LOGIT)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def compute_output_shape(self, sequence_output_shape, input_mask_shape=None):
        shape = tuple(sequence_output_shape[:-1])
        return {"start_logits": shape, "end_logits": shape}

    def get_config(self):
        return {**super().get_config(), "initializer_range": self.initializer_range}


@_SERIALIZABLE
class TokenClassifierHead(ClassifierHead):
    """Dropout and a dense layer on every token (NER): (batch, seq, hidden) in, float32
    (batch, seq, num_classes) logits out."""

    def build(self, sequence_output_shape):
        self.dense.build(sequence_output_shape)

    def compute_output_shape(self, sequence_output_shape):
        return (*sequence_output_shape[:-1], self.num_classes)
