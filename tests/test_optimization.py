import keras
import numpy as np
import pytest

from keras_bert import BertEncoder
from keras_bert.optimization import WarmupLinearDecay, create_optimizer

from conftest import TINY


def test_warmup_then_linear_decay():
    schedule = WarmupLinearDecay(1e-3, total_steps=100, warmup_steps=10)
    values = [float(schedule(step)) for step in (0, 5, 10, 55, 100, 150)]
    np.testing.assert_allclose(values, [0.0, 5e-4, 1e-3, 5e-4, 0.0, 0.0], atol=1e-9)
    assert (
        WarmupLinearDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()
    )
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupLinearDecay(1e-3, total_steps=10, warmup_steps=20)


def test_layer_norm_and_bias_weights_are_not_decayed():
    encoder = BertEncoder(**TINY)
    optimizer = create_optimizer(1e-3, total_steps=10, warmup_steps=1, weight_decay=0.1)
    optimizer.build(encoder.trainable_variables)
    decayed = {v.path for v in encoder.trainable_variables if optimizer._use_weight_decay(v)}
    assert "layer_0/attention/query/kernel" in decayed
    assert "embeddings/word_embeddings/embeddings" in decayed
    assert not [p for p in decayed if p.endswith(("bias", "gamma", "beta"))]


def test_gradients_are_clipped_to_the_global_norm():
    variable = keras.Variable(np.zeros(3, "float32"))
    optimizer = keras.optimizers.SGD(1.0, global_clipnorm=1.0)
    optimizer.apply([np.array([30.0, 40.0, 0.0], "float32")], [variable])
    np.testing.assert_allclose(variable.numpy(), [-0.6, -0.8, 0.0], atol=1e-6)
    assert create_optimizer(1e-3, 10, 1).global_clipnorm == 1.0
