"""AdamW with BERT's weight-decay exclusions, and warmup followed by linear decay."""

import keras
from keras import ops

# LayerNorm (gamma, beta) and bias weights are not decayed, as in the original BERT optimizer.
NO_DECAY = ("gamma", "beta", "bias")


@keras.saving.register_keras_serializable(package="keras_bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `learning_rate` over `warmup_steps`, then linear decay to 0 at
    `total_steps`."""

    def __init__(self, learning_rate, total_steps, warmup_steps):
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"warmup_steps must be in [0, {total_steps}], got {warmup_steps}")
        self.learning_rate = learning_rate
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = step / max(self.warmup_steps, 1)
        decay = (self.total_steps - step) / max(self.total_steps - self.warmup_steps, 1)
        fraction = ops.where(step < self.warmup_steps, warmup, decay)
        return self.learning_rate * ops.clip(fraction, 0.0, 1.0)

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
        }


def create_optimizer(
    learning_rate, total_steps, warmup_steps, weight_decay=0.01, clipnorm=1.0, epsilon=1e-6
):
    """AdamW on a warmup + linear-decay schedule, clipping the global gradient norm."""
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(learning_rate, total_steps, warmup_steps),
        weight_decay=weight_decay,
        epsilon=epsilon,
        global_clipnorm=clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer
