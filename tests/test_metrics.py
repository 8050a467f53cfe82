import keras
import numpy as np

from keras_bert.training import metrics


def test_the_accuracy_is_keras_own_with_ties_and_weights():
    rng = np.random.default_rng(6)
    # Small integers: many rows tie for their largest logit, where the first index counts.
    logits = rng.integers(-3, 4, (8, 5, 7)).astype("float32")
    labels = rng.integers(0, 7, (8, 5)).astype("float32")  # as Keras hands labels to a metric
    labels[0] = np.argmax(logits[0], axis=-1)  # some hits for sure
    weights = rng.integers(0, 2, (8, 5)).astype("float32")
    ours, keras_own = metrics.SparseAccuracyFromLogits(), keras.metrics.SparseCategoricalAccuracy()
    for metric in (ours, keras_own):
        metric.update_state(labels, logits, sample_weight=weights)
    assert 0.2 < float(keras_own.result()) < 1
    assert float(ours.result()) == float(keras_own.result())
    per_row = metrics.sparse_accuracy_from_logits(labels, logits).numpy()
    np.testing.assert_array_equal(per_row, np.argmax(logits, axis=-1) == labels)


def test_the_accuracy_round_trips():
    again = keras.metrics.deserialize(keras.metrics.serialize(
        metrics.SparseAccuracyFromLogits("accuracy")))  # fmt: skip
    assert type(again) is metrics.SparseAccuracyFromLogits and again.name == "accuracy"
