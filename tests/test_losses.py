import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_bert.training import losses


def _values_and_gradients(loss_fn, labels, logits, upstream):
    @tf.function
    def run():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = loss_fn(labels, logits)
            total = tf.reduce_sum(tf.cast(loss, "float32") * upstream)
        return loss, tape.gradient(total, logits)

    return run()


def test_values_and_gradients_are_those_of_tensorflows_op():
    rng = np.random.default_rng(3)
    # Rank 3 as masked LM's, spread wide enough that a softmax without its max subtracted
    # would overflow in float32.
    logits = tf.constant(rng.normal(size=(2, 5, 300)) * 40, "float32")
    labels = tf.constant(rng.integers(0, 300, (2, 5)), "int32")
    upstream = tf.constant(rng.normal(size=(2, 5)), "float32")

    def reference(y, x):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)

    got = _values_and_gradients(losses.sparse_cross_entropy_from_logits, labels, logits, upstream)
    want = _values_and_gradients(reference, labels, logits, upstream)
    assert got[0].shape == (2, 5) and got[1].shape == (2, 5, 300)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert np.abs(want[1]).max() > 0.1  # the comparison is not between zeros


def test_bfloat16_logits_compute_in_float32_and_get_a_bfloat16_gradient():
    rng = np.random.default_rng(4)
    logits = tf.constant(rng.normal(size=(6, 50)) * 3, "bfloat16")
    labels = tf.constant(rng.integers(0, 50, 6), "int32")
    upstream = tf.ones((6,), "float32")
    loss, gradient = _values_and_gradients(losses.sparse_cross_entropy_from_logits, labels,
                                           logits, upstream)  # fmt: skip
    assert loss.dtype == tf.float32 and gradient.dtype == tf.bfloat16
    want = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.cast(logits, "float32"))
    np.testing.assert_allclose(loss, want, rtol=1e-6)


@pytest.mark.parametrize("bad", [50, -1])
def test_a_label_outside_the_vocabulary_is_refused(bad):
    labels = tf.constant([3, bad, 7])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"outside \[0, vocabulary size\)"):
        losses.sparse_cross_entropy_from_logits(labels, tf.zeros((3, 50)))


def test_arrays_are_taken_as_tensors_are():
    logits = np.array([[0.0, 1.0, 2.0], [3.0, 1.0, 0.0]], "float32")
    got = losses.sparse_cross_entropy_from_logits(np.array([2, 1]), logits)
    want = tf.nn.sparse_softmax_cross_entropy_with_logits(np.array([2, 1]), logits)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_labels_must_have_the_logits_shape_without_its_last_axis():
    with pytest.raises(ValueError, match=r"labels of shape \(3, 1\) do not fit logits"):
        losses.sparse_cross_entropy_from_logits(tf.zeros((3, 1), "int32"), tf.zeros((3, 50)))


def test_the_keras_loss_weighs_and_reduces_as_keras_own_and_round_trips():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(4, 3, 20)).astype("float32")
    labels = rng.integers(0, 20, (4, 3)).astype("float32")  # as Keras hands labels to a loss
    weights = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], "float32")
    ours = losses.SparseCrossEntropyFromLogits(reduction="mean_with_sample_weight")
    keras_own = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight")  # fmt: skip
    np.testing.assert_allclose(ours(labels, logits, weights), keras_own(labels, logits, weights),
                               rtol=1e-6)  # fmt: skip
    again = keras.losses.deserialize(keras.losses.serialize(ours))
    assert type(again) is losses.SparseCrossEntropyFromLogits
    assert again.reduction == "mean_with_sample_weight"
