"""The masked-LM accuracy: the share of predictions whose largest logit is at the label."""

import keras
import tensorflow as tf

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def sparse_accuracy_from_logits(labels, logits):
    """1.0 where the first index of the largest logit on the last axis is the label, else 0.0.

    Keras's `sparse_categorical_accuracy` takes the same argmax, but its TensorFlow `argmax`
    first rewrites every -0.0 to the smallest negative float (five element-wise passes over
    the logits). The two differ only where -0.0 and 0.0 tie for the largest logit (Keras takes
    the 0.0).
    """
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return tf.cast(tf.equal(predicted, tf.cast(labels, tf.int32)), "float32")


@_SERIALIZABLE
class SparseAccuracyFromLogits(keras.metrics.MeanMetricWrapper):
    """Keras's `SparseCategoricalAccuracy` on logits (`sparse_accuracy_from_logits`), faster over
    a vocabulary: BertPretrainer's masked-LM accuracy."""

    def __init__(self, name="sparse_accuracy", dtype=None):
        super().__init__(fn=sparse_accuracy_from_logits, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}
