import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY

import keras_bert
from keras_bert import BertEncoder
from keras_bert.training import optimization
from keras_bert.training.optimization import WarmupLinearDecay, create_optimizer


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
    decayed = {v.path for v in encoder.trainable_variables if optimizer.rate_of(v)[1]}
    assert "layer_0/attention/query/kernel" in decayed
    assert "embeddings/word_embeddings/embeddings" in decayed
    assert not [p for p in decayed if p.endswith(("bias", "gamma", "beta"))]
    # no_decay=() decays every weight, as torch.optim.AdamW(model.parameters()) does.
    every = keras_bert.AdamW(1e-3, weight_decay=0.1, no_decay=())
    every.build(encoder.trainable_variables)
    assert all(every.rate_of(v)[1] for v in encoder.trainable_variables)
    assert keras_bert.AdamW.from_config(every.get_config()).no_decay == ()


@pytest.mark.parametrize("layer_decay", [None, 0.5])
def test_our_optimizer_clips_gradients_to_the_global_norm(layer_decay):
    # Adam's first step moves each weight by about lr whatever the gradient's size, so the
    # clipping shows in its first moment: (1 - beta_1) times the clipped gradient.
    variable = keras.Variable(np.zeros(3, "float32"), name="kernel")
    optimizer = create_optimizer(1e-3, 10, 0, weight_decay=0.0, layer_decay=layer_decay)
    optimizer.build([variable])
    optimizer.apply([np.array([30.0, 40.0, 0.0], "float32")], [variable])
    momentum = [v for v in optimizer.variables if "momentum" in v.path]
    np.testing.assert_allclose(momentum[0].numpy(), [0.06, 0.08, 0.0], atol=1e-7)
    # Under the clipping norm, a gradient is kept as it is; a norm that is not finite makes
    # every gradient NaN, as Keras's clipping does, rather than a step that looks sound.
    optimizer.apply([np.array([0.3, 0.4, 0.0], "float32")], [variable])
    np.testing.assert_allclose(momentum[0].numpy(), [0.084, 0.112, 0.0], atol=1e-7)
    optimizer.apply([np.array([np.inf, 1.0, 0.0], "float32")], [variable])
    assert np.isnan(momentum[0].numpy()).all()


def test_layer_decay_sets_each_variables_effective_learning_rate(two_block_checkpoint):
    """One Adam step moves a weight by lr * rate * g / (|g| + eps), so by lr * rate where the
    gradient is not tiny: the largest move of each variable, over lr, is its effective rate."""
    model = keras_bert.BertClassifier.from_checkpoint(two_block_checkpoint, num_classes=2,
                                                      sequence_length=16)  # fmt: skip
    # epsilon 1e-12: a tiny model's gradients are small, and Adam's epsilon would show
    model.compile(create_optimizer(1e-3, 1000, 0, weight_decay=0.0, clipnorm=1e9, epsilon=1e-12,
                                   layer_decay=0.5))  # fmt: skip
    before = {v.path: v.numpy().copy() for v in model.trainable_variables}
    model.fit(["the cat sat on the mat", "a dog", "hello world !", "mats"], [0, 1, 1, 0],
              batch_size=4, epochs=1, verbose=0)  # fmt: skip
    expected = {"embeddings/": 0.5**3, "layer_0/": 0.5**2, "layer_1/": 0.5, "pooler/": 1.0,
                "classifier": 1.0}  # 2 blocks: embeddings 0.5^(2+1), block i 0.5^(2-i)  # fmt: skip
    checked = set()
    for variable in model.trainable_variables:
        move = np.abs(variable.numpy() - before[variable.path])
        key = next(k for k in expected if k in variable.path)
        rate, _ = model.optimizer.rate_of(variable)
        assert rate == pytest.approx(expected[key]), variable.path
        if "key/bias" in variable.path:
            continue  # the softmax ignores it: its gradient is zero (to rounding)
        assert np.max(move) / 1e-3 == pytest.approx(rate, rel=0.01), variable.path
        checked.add(key)
    assert checked == set(expected)


def test_layer_decay_keeps_the_decay_exclusions():
    encoder = BertEncoder(**TINY)
    optimizer = create_optimizer(1e-3, total_steps=10, warmup_steps=1, weight_decay=0.1,
                                 layer_decay=0.8)  # fmt: skip
    optimizer.build(encoder.trainable_variables)
    decays = {v.path: optimizer.rate_of(v)[1] for v in encoder.trainable_variables}
    assert decays["layer_0/attention/query/kernel"] and decays["embeddings/word_embeddings/embeddings"]
    assert not [p for p, d in decays.items() if d and p.endswith(("bias", "gamma", "beta"))]
    with pytest.raises(ValueError, match="layer_decay must be in"):
        create_optimizer(1e-3, 10, 1, layer_decay=1.5)


def test_fused_adamw_steps_match_keras_adamw():
    """Our AdamW runs TensorFlow's fused Adam kernel; three steps (a dense gradient, and the
    IndexedSlices an embedding lookup gives) must land where Keras's own AdamW lands (epsilon
    too small to show where each adds it: see the next test)."""
    import tensorflow as tf

    from keras_bert.training.optimization import AdamW

    rng = np.random.default_rng(0)
    start = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=3).astype("float32")]
    results = []
    for make in (AdamW, keras.optimizers.AdamW):
        variables = [keras.Variable(start[0], name="kernel"), keras.Variable(start[1], name="bias")]
        optimizer = make(learning_rate=1e-2, weight_decay=0.1, epsilon=1e-12, global_clipnorm=1.0)
        if make is keras.optimizers.AdamW:  # ours leaves biases out by itself
            optimizer.exclude_from_weight_decay(var_names=["bias"])
        grads = np.random.default_rng(1)
        for step in range(3):
            rows = grads.normal(size=(2, 3)).astype("float32")
            sparse = tf.IndexedSlices(rows, tf.constant([4, 1 + step]), tf.constant([5, 3]))
            optimizer.apply([sparse, grads.normal(size=3).astype("float32")], variables)
        results.append([v.numpy() for v in variables])
    for ours, theirs, first in zip(*results, start):
        assert not np.allclose(ours, first)
        np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_schedules_and_their_check_count_batches_under_gradient_accumulation():
    """Keras's schedules read the batches seen; `iterations` counts updates. tasks.pretrain
    sized its schedule in updates, so with 2 batches an update its warmup was half the steps
    asked and its second half of updates ran at a rate of 0 (and a resumed run counted its
    batches done as its updates)."""
    optimizer = optimization.create_optimizer(1e-3, total_steps=4, warmup_steps=0)
    optimizer.gradient_accumulation_steps = 2
    variable = keras.Variable([1.0])
    optimizer.build([variable])
    for _ in range(3):
        optimizer.apply([tf.constant([1.0])], [variable])
    assert int(optimizer.iterations) == 1 and optimization.batches_done(optimizer) == 3
    optimization.check_schedule_covers(optimizer, 1)  # the 4th batch, the schedule's last
    with pytest.raises(ValueError, match="training steps 4 to 5 would run past .* at step 4"):
        optimization.check_schedule_covers(optimizer, 2)


def test_adamw_adds_epsilon_where_the_reference_does():
    """PyTorch's (and Hugging Face's) AdamW: w -= lr * (m_hat / (sqrt(v_hat) + eps) + decay * w),
    epsilon added after the bias correction. Keras's Adam (and TensorFlow's kernel) add it
    before, a far larger epsilon in the first steps: with gradients of 1e-6 and epsilon 1e-6
    its first step was a thirtieth of the reference's."""
    from keras_bert.training.optimization import AdamW

    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype("float32")
    grads = [1e-6 * rng.normal(size=(4, 3)).astype("float32") for _ in range(5)]
    lr, decay, eps, beta_1, beta_2 = 1e-3, 0.01, 1e-6, 0.9, 0.999
    variable = keras.Variable(start, name="kernel")
    optimizer = AdamW(learning_rate=lr, weight_decay=decay, epsilon=eps)
    w, m, v = start.astype("float64"), 0.0, 0.0
    for step, grad in enumerate(grads, start=1):
        optimizer.apply([grad], [variable])
        w = w * (1 - lr * decay)
        m, v = beta_1 * m + (1 - beta_1) * grad, beta_2 * v + (1 - beta_2) * grad.astype("float64") ** 2
        m_hat, v_hat = m / (1 - beta_1**step), v / (1 - beta_2**step)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
        moved, expected = variable.numpy() - start, w - start
        np.testing.assert_allclose(moved, expected, rtol=2e-3, atol=1e-8)
