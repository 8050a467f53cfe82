"""Losses of the task models: the masked-LM loss (softmax cross-entropy over the vocabulary,
its gradient written out), and the text embedder's two, in-batch negatives for pairs of texts
that go together and CoSENT for pairs with a similarity score."""

import keras
import tensorflow as tf

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def sparse_cross_entropy_from_logits(labels, logits):
    """-log softmax(logits)[label] over the last axis, in float32: the numbers of
    `tf.nn.sparse_softmax_cross_entropy_with_logits`. `labels` are integers (floats holding
    integers are taken), shaped as `logits` without its last axis.

    TensorFlow's op computes its gradient in the forward pass, with Eigen. Here the forward is
    a log-sum-exp and the gradient, softmax(logits) - one_hot(labels), is computed when asked,
    with the softmax on oneDNN's kernel where TensorFlow has it (docs/performance.md). A label
    outside [0, vocabulary) is refused, as the op refuses it.
    """
    labels, logits = tf.convert_to_tensor(labels), tf.convert_to_tensor(logits)
    if labels.shape.rank is not None and logits.shape.rank is not None and (
            labels.shape.rank != logits.shape.rank - 1):  # fmt: skip
        raise ValueError(f"labels of shape {labels.shape} do not fit logits of shape "
                         f"{logits.shape}: they take the logits' shape without its last axis")
    width = tf.shape(logits)[-1]
    flat_labels = tf.reshape(tf.cast(labels, "int32"), (-1,))
    # As unsigned, a negative label is larger than any vocabulary: one check for both ends.
    checked = tf.debugging.assert_less(
        tf.cast(flat_labels, "uint32"), tf.cast(width, "uint32"),
        message="a label is outside [0, vocabulary size) of the logits")  # fmt: skip
    with tf.control_dependencies([checked]):
        flat_labels = tf.identity(flat_labels)

    @tf.custom_gradient
    def per_row(rows):
        top = tf.reduce_max(rows, axis=-1, keepdims=True)
        log_sum_exp = tf.math.log(tf.reduce_sum(tf.exp(rows - top), axis=-1)) + top[:, 0]
        loss = log_sum_exp - tf.gather(rows, flat_labels, batch_dims=1)

        def gradient(upstream):
            # upstream * (softmax - one_hot): the one-hot part subtracted at the labels alone.
            at_labels = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            return tf.tensor_scatter_nd_sub(tf.nn.softmax(rows) * upstream[:, None], at_labels,
                                            upstream)  # fmt: skip

        return loss, gradient

    rows = tf.reshape(tf.cast(logits, "float32"), (-1, width))
    return tf.reshape(per_row(rows), tf.shape(labels))


@_SERIALIZABLE
class SparseCrossEntropyFromLogits(keras.losses.Loss):
    """Keras's `SparseCategoricalCrossentropy(from_logits=True)` with the same numbers, faster
    over a vocabulary (`sparse_cross_entropy_from_logits`): BertPretrainer's masked-LM loss."""

    def __init__(self, reduction="sum_over_batch_size", name="sparse_cross_entropy", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        return sparse_cross_entropy_from_logits(y_true, y_pred)


def _unit(vectors):
    return tf.math.l2_normalize(tf.cast(vectors, tf.float32), axis=-1, epsilon=1e-12)


@_SERIALIZABLE
class MultipleNegativesRankingLoss(keras.losses.Loss):
    """In-batch negatives (sentence-transformers' MultipleNegativesRankingLoss): for each
    example's first text (the anchor), its second text is the answer among every second (and
    further: hard negatives) text of the batch. The loss is the cross-entropy of `scale` times
    the cosine similarities of the anchor to all of them, the right one at the anchor's row.

    y_pred: (batch, texts, dim) vectors, texts >= 2 (anchor, positive, negatives...); y_true is
    not read. Returns (batch,) losses."""

    def __init__(self, scale=20.0, name="multiple_negatives_ranking",
                 reduction="sum_over_batch_size", dtype=None):  # fmt: skip
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        del y_true
        vectors = _unit(y_pred)
        anchors = vectors[:, 0]
        # Candidates: every example's positive (rows 0..batch-1), then its hard negatives.
        others = tf.transpose(vectors[:, 1:], (1, 0, 2))
        candidates = tf.reshape(others, (-1, tf.shape(vectors)[-1]))
        scores = self.scale * tf.matmul(anchors, candidates, transpose_b=True)
        labels = tf.range(tf.shape(anchors)[0])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, scores)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@_SERIALIZABLE
class CoSENTLoss(keras.losses.Loss):
    """CoSENT (sentence-transformers' CoSENTLoss): for every two pairs of the batch whose
    scores say the first is less similar than the second, a penalty that grows with how far
    the first's cosine similarity lies above the second's:
    log(1 + sum exp(scale * (cos_i - cos_j))) over y_i < y_j. Only the scores' order counts.

    y_true: (batch,) similarity scores; y_pred: (batch, 2, dim) vectors of the two texts.
    Returns the batch's loss, a scalar."""

    def __init__(self, scale=20.0, name="cosent", reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.scale = float(scale)

    def call(self, y_true, y_pred):
        vectors = _unit(y_pred)
        cosines = self.scale * tf.reduce_sum(vectors[:, 0] * vectors[:, 1], axis=-1)
        scores = tf.reshape(tf.cast(y_true, tf.float32), [-1])
        less = scores[:, None] < scores[None, :]  # pair i is less similar than pair j
        terms = tf.boolean_mask(cosines[:, None] - cosines[None, :], less)
        return tf.reduce_logsumexp(tf.concat([[0.0], terms], 0))

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}
