"""AdamW with BERT's weight-decay exclusions, warmup followed by linear decay, and optionally
layer-wise learning-rate decay."""

import re

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


def layer_rate(path, num_layers, decay):
    """The learning-rate multiplier of a variable in layer-wise decay: `decay ** (num_layers -
    i)` for a variable of transformer block i (counted from 0 at the bottom), `decay **
    (num_layers + 1)` for the embeddings, 1 for everything else (the pooler and the heads)."""
    block = re.search(r"(?:^|/)layer_(\d+)/", path)
    if block:
        return decay ** (num_layers - int(block.group(1)))
    if re.search(r"(?:^|/)embeddings/", path):
        return decay ** (num_layers + 1)
    return 1.0


@keras.saving.register_keras_serializable(package="keras_bert")
class LayerwiseAdamW(keras.optimizers.Adam):
    """AdamW whose learning rate shrinks layer by layer towards the embeddings (`layer_rate`):
    the lower layers, which hold the most general features, move least. The decoupled weight
    decay of each variable uses that variable's rate too, and skips NO_DECAY weights."""

    def __init__(self, learning_rate, layer_decay, weight_decay=0.01, **kwargs):
        if not 0 < layer_decay <= 1:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.layer_decay, self.decoupled_weight_decay = layer_decay, weight_decay
        self._rates = {}

    def build(self, variables):
        super().build(variables)
        blocks = [int(m.group(1)) for v in variables
                  for m in [re.search(r"(?:^|/)layer_(\d+)/", v.path)] if m]  # fmt: skip
        num_layers = max(blocks) + 1 if blocks else 0
        for variable in variables:
            decays = not any(name in variable.path.split("/")[-1] for name in NO_DECAY)
            self._rates[self._var_key(variable)] = (
                layer_rate(variable.path, num_layers, self.layer_decay), decays)

    def rate_of(self, variable):
        """(learning-rate multiplier, whether weight decay applies) of a variable."""
        return self._rates[self._var_key(variable)]

    def update_step(self, gradient, variable, learning_rate):
        rate, decays = self._rates[self._var_key(variable)]
        learning_rate = ops.cast(learning_rate, variable.dtype) * rate
        if decays and self.decoupled_weight_decay:
            variable.assign(variable - variable * self.decoupled_weight_decay * learning_rate)
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "layer_decay": self.layer_decay,
                "weight_decay": self.decoupled_weight_decay}  # fmt: skip


def create_optimizer(
    learning_rate, total_steps, warmup_steps, weight_decay=0.01, clipnorm=1.0, epsilon=1e-6,
    layer_decay=None,
):
    """AdamW on a warmup + linear-decay schedule, clipping the global gradient norm; with
    `layer_decay` < 1, each variable's learning rate is also scaled by `layer_rate`."""
    schedule = WarmupLinearDecay(learning_rate, total_steps, warmup_steps)
    if layer_decay is not None and layer_decay != 1:
        return LayerwiseAdamW(schedule, layer_decay, weight_decay=weight_decay, epsilon=epsilon,
                              global_clipnorm=clipnorm)  # fmt: skip
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule,
        weight_decay=weight_decay,
        epsilon=epsilon,
        global_clipnorm=clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer
