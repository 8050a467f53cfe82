"""The masked-LM loss: softmax cross-entropy over the vocabulary, its gradient written out."""

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
