"""AdamW with BERT's weight-decay exclusions, warmup followed by linear decay, and optionally
layer-wise learning-rate decay."""

import dataclasses
import math
import numbers
import re

import keras
import tensorflow as tf
from keras import ops

# LayerNorm (gamma, beta) and bias weights are not decayed, as in the original BERT optimizer.
NO_DECAY = ("gamma", "beta", "bias")


@keras.saving.register_keras_serializable(package="keras_bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `learning_rate` over `warmup_steps`, then linear decay to 0 at
    `total_steps`."""

    def __init__(self, learning_rate, total_steps, warmup_steps):
        self.learning_rate = learning_rate
        self._steps = None  # the steps in a variable, once `make_restartable` made it
        self.restart(total_steps, warmup_steps)

    def make_restartable(self):
        """Keeps the steps in a float32 variable (made in the current tf.distribute scope)
        that `__call__` reads, so that `restart` changes the schedule of a step already
        traced. Call it before the step is traced."""
        if self._steps is None:
            self._steps = keras.Variable([float(self.total_steps), float(self.warmup_steps)],
                                         dtype="float32", trainable=False,
                                         name="warmup_linear_decay_steps")  # fmt: skip

    def restart(self, total_steps, warmup_steps):
        """Makes this the schedule of a run of `total_steps` warming up over `warmup_steps`."""
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"warmup_steps must be in [0, {total_steps}], got {warmup_steps}")
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        if self._steps is not None:
            self._steps.assign([float(total_steps), float(warmup_steps)])

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self._steps is None:
            total, warmup = float(self.total_steps), float(self.warmup_steps)
        else:
            total, warmup = self._steps[0], self._steps[1]
        warming = step / ops.maximum(warmup, 1.0)
        decay = (total - step) / ops.maximum(total - warmup, 1.0)
        fraction = ops.where(step < warmup, warming, decay)
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


def fused_adam_step(optimizer, gradient, variable, learning_rate):
    """The Adam update of `variable` as PyTorch's and Hugging Face's AdamW make it,
    `lr * m_hat / (sqrt(v_hat) + epsilon)` with Keras Adam's slots, by TensorFlow's fused
    `ResourceApplyAdam` kernel: one multi-threaded pass over the weight and its two slots where
    Keras runs about ten element-wise ops, each a pass of its own.

    The kernel (as Keras's Adam) adds epsilon to sqrt(v) before the bias correction, which
    makes it epsilon / sqrt(1 - beta_2 ** step) in the reference's terms: at epsilon 1e-6, 3e-5
    at the first step and 6e-6 at the 32nd, larger than many of a fine-tuning's gradients, so
    a run of a few hundred examples moved its weights far less than the reference. The kernel
    is given epsilon * sqrt(1 - beta_2 ** step), which is the reference's update."""
    index = optimizer._get_variable_index(variable)
    m, v = optimizer._momentums[index].value, optimizer._velocities[index].value
    dtype = variable.dtype
    step = tf.cast(optimizer.iterations + 1, dtype)
    beta_1, beta_2 = tf.cast(optimizer.beta_1, dtype), tf.cast(optimizer.beta_2, dtype)
    variable = variable.value if isinstance(variable, keras.Variable) else variable
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=m.handle, v=v.handle, beta1_power=tf.pow(beta_1, step),
        beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype), beta1=beta_1,
        beta2=beta_2, epsilon=tf.cast(optimizer.epsilon, dtype) * tf.sqrt(1 - tf.pow(beta_2, step)),
        grad=tf.cast(gradient, dtype))  # fmt: skip


def dense_gradients(grads):
    """Gradients with IndexedSlices (an embedding lookup's) made dense once: Keras's global-norm
    clipping would otherwise densify one twice (for the norm and for the scaling), each a pass
    over the whole vocabulary table."""
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


@keras.saving.register_keras_serializable(package="keras_bert")
class AdamW(keras.optimizers.Adam):
    """Adam with decoupled weight decay, as BERT trains: `weight_decay * lr * w` is subtracted
    from each weight before its Adam step, except for weights whose name contains one of
    `no_decay` (default NO_DECAY: LayerNorm's gamma and beta, biases; `()` decays every weight).
    The step is PyTorch's AdamW's, epsilon after the bias correction (`fused_adam_step`), where
    keras.optimizers.AdamW adds it before: `AdamW(5e-5, weight_decay=0.01, epsilon=1e-8,
    no_decay=())` is `torch.optim.AdamW(model.parameters(), 5e-5, weight_decay=0.01)`.

    With `layer_decay` < 1, each variable's learning rate (and so its decay) is also scaled by
    `layer_rate`: the lower layers, which hold the most general features, move least.
    Adam steps run TensorFlow's fused kernel (`fused_adam_step`); the other arguments are
    keras.optimizers.Adam's (`global_clipnorm`, `epsilon`, ...).

    `recipe`: the `Recipe` a task model compiled without `total_steps` makes each fit's
    optimizer from, carried by that optimizer (and its config) so that a model saved with it
    and loaded follows the recipe again; None for any other optimizer.
    """

    def __init__(self, learning_rate, weight_decay=0.01, layer_decay=1.0, recipe=None,
                 no_decay=NO_DECAY, **kwargs):  # fmt: skip
        if not 0 < layer_decay <= 1:
            raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
        super().__init__(learning_rate=learning_rate, **kwargs)
        if self.amsgrad:
            raise ValueError("keras_bert's AdamW has no amsgrad; use keras.optimizers.AdamW")
        # Not Keras's `weight_decay`, which would decay every weight a second time.
        self.layer_decay, self.decoupled_weight_decay = layer_decay, weight_decay
        self.no_decay = tuple(no_decay)
        self.recipe = Recipe(**recipe) if isinstance(recipe, dict) else recipe
        self._rates = {}
        self._unbuilt_variables = len(self.variables)  # the step count (and a constant rate)

    def build(self, variables):
        super().build(variables)
        blocks = [int(m.group(1)) for v in variables
                  for m in [re.search(r"(?:^|/)layer_(\d+)/", v.path)] if m]  # fmt: skip
        num_layers = max(blocks) + 1 if blocks else 0
        for variable in variables:
            decays = not any(name in variable.path.split("/")[-1] for name in self.no_decay)
            self._rates[self._var_key(variable)] = (
                layer_rate(variable.path, num_layers, self.layer_decay), decays)

    def load_own_variables(self, store):
        """Keras's, and also the state of an AdamW saved before it was built (the step count
        and rate alone) into a built one: a model loaded compiled builds its optimizer before
        the state is loaded (Keras's compile_from_config, and the task models'), and Keras
        then skipped that whole state with a warning. The slots stay fresh, as they were."""
        if self.built and len(store.keys()) == self._unbuilt_variables:
            for i in range(self._unbuilt_variables):
                self.variables[i].assign(store[str(i)])
            return
        super().load_own_variables(store)

    def restart(self, total_steps, warmup_steps):
        """Back to a new optimizer's state (step count and Adam moments 0) on a restartable
        WarmupLinearDecay (`make_restartable`) of `total_steps`, without new variables, so
        that Keras's traced step stays valid. Returns False, changing nothing, where the
        optimizer holds more state than that (a constant rate's variable, gradient
        accumulation, EMA) or its schedule is not restartable."""
        schedule = self._learning_rate
        if not isinstance(schedule, WarmupLinearDecay) or schedule._steps is None:
            return False
        own = [self.iterations, *(self._momentums + self._velocities if self.built else [])]
        if {id(v) for v in self.variables} != {id(v) for v in own}:
            return False
        for variable in own:
            variable.assign(ops.zeros(variable.shape, variable.dtype))
        schedule.restart(total_steps, warmup_steps)
        return True

    def rate_of(self, variable):
        """(learning-rate multiplier, whether weight decay applies) of a variable."""
        return self._rates[self._var_key(variable)]

    def apply(self, grads, trainable_variables=None):
        return super().apply(dense_gradients(grads), trainable_variables)

    def _clip_gradients(self, grads):
        """Keras's global-norm clipping (the same scale, NaN for a norm that is not finite),
        each gradient's squared norm taken by one `L2Loss` op rather than a `Square` and a
        `Sum`, which wrote a copy of every gradient first."""
        clip_to = self.global_clipnorm
        if self.clipnorm or self.clipvalue or not (clip_to and clip_to > 0):
            return super()._clip_gradients(grads)
        norm = tf.sqrt(tf.add_n([2 * tf.cast(tf.nn.l2_loss(g), tf.float32)
                                 for g in grads if g is not None]))  # fmt: skip
        clip = tf.constant(clip_to, tf.float32)
        scale = clip * tf.minimum(1 / norm, 1 / clip) + (norm - norm)
        return [g if g is None else g * tf.cast(scale, g.dtype) for g in grads]

    def update_step(self, gradient, variable, learning_rate):
        rate, decays = self._rates[self._var_key(variable)]
        learning_rate = ops.cast(learning_rate, variable.dtype) * rate
        if decays and self.decoupled_weight_decay:
            # w * (1 - decay * lr): one pass over the weight, where w - w * (decay * lr) took a
            # multiplication's pass and then a subtraction's.
            variable.assign(variable * (1 - self.decoupled_weight_decay * learning_rate))
        fused_adam_step(self, gradient, variable, learning_rate)

    def get_config(self):
        recipe = None if self.recipe is None else dataclasses.asdict(self.recipe)
        return {**super().get_config(), "layer_decay": self.layer_decay,
                "weight_decay": self.decoupled_weight_decay, "recipe": recipe,
                "no_decay": list(self.no_decay)}  # fmt: skip


def create_optimizer(
    learning_rate, total_steps, warmup_steps, weight_decay=0.01, clipnorm=1.0, epsilon=1e-6,
    layer_decay=None, recipe=None,
):
    """AdamW on a warmup + linear-decay schedule, clipping the global gradient norm; with
    `layer_decay` < 1, each variable's learning rate is also scaled by `layer_rate`. `recipe`:
    AdamW's."""
    schedule = WarmupLinearDecay(learning_rate, total_steps, warmup_steps)
    layer_decay = 1.0 if layer_decay is None else layer_decay  # 0 is refused, not "none"
    return AdamW(schedule, weight_decay=weight_decay, layer_decay=layer_decay,
                 epsilon=epsilon, global_clipnorm=clipnorm, recipe=recipe)  # fmt: skip


def batches_done(optimizer):
    """The training batches `optimizer` has seen: Keras's own counter, the step its
    learning-rate schedules read. Under gradient accumulation `optimizer.iterations` counts
    updates instead (batches // accumulation steps)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer
    counter = getattr(optimizer, "_iterations", optimizer.iterations)
    return int(ops.convert_to_numpy(counter))  # (int() takes no MirroredVariable)


def check_schedule_covers(optimizer, steps):
    """Refuses `steps` more training steps that would run past the end of `optimizer`'s
    WarmupLinearDecay, where the rate is 0: those steps change no weight, while Keras reports
    their loss as if they trained (a second `fit` after the first had used up the schedule
    trained nothing, without a word)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer
    schedule = getattr(optimizer, "_learning_rate", None)  # Keras keeps a schedule here
    if not isinstance(schedule, WarmupLinearDecay):
        return
    done, end = batches_done(optimizer), schedule.total_steps
    if done + steps > end:
        what = f"step {done + 1}" if steps == 1 else f"steps {done + 1} to {done + steps}"
        raise ValueError(f"training {what} would run past the end of the learning-rate "
                         f"schedule at step {end}, where the rate is 0 and "
                         "nothing is learnt: compile(total_steps=...) with the steps of all "
                         "the training together, or compile() without it (each fit then runs "
                         "a schedule of its own steps)")  # fmt: skip


@dataclasses.dataclass
class Recipe:
    """The fine-tuning optimizer's settings, kept until the number of training steps is known
    (BertTask.compile's defaults, applied to each fit's count of its steps)."""

    learning_rate: float
    warmup_proportion: float
    weight_decay: float
    clipnorm: float
    layer_decay: float | None = None

    def __post_init__(self):
        """Refuses settings that would train silently wrong (a NaN or negative rate, a
        negative decay, a clipping norm of 0) in one line naming the argument."""
        def number(value):
            return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                    and math.isfinite(value))  # fmt: skip

        for name, good, what in [
            ("learning_rate", lambda v: number(v) and v > 0, "a finite number above 0"),
            ("warmup_proportion", lambda v: number(v) and 0 <= v <= 1, "a fraction from 0 to 1"),
            ("weight_decay", lambda v: number(v) and v >= 0, "a finite number of at least 0"),
            ("clipnorm", lambda v: v is None or (number(v) and v > 0),
             "a finite number above 0, or None for no clipping"),
            ("layer_decay", lambda v: v is None or (number(v) and 0 < v <= 1),
             "a number in (0, 1], or None for none"),
        ]:  # fmt: skip
            value = getattr(self, name)
            if not good(value):
                raise ValueError(f"{name} must be {what}, got {value!r}")
        self.learning_rate = float(self.learning_rate)  # Keras takes no int rate

    def warmup_steps(self, total_steps):
        return int(total_steps * self.warmup_proportion)

    def optimizer(self, total_steps, each_fit=False):
        """`create_optimizer` for a run of `total_steps`, warming up over its proportion;
        `each_fit`: the optimizer of one fit of a model that makes every fit's from this recipe,
        which it carries (AdamW's `recipe`)."""
        return create_optimizer(
            self.learning_rate, total_steps, self.warmup_steps(total_steps),
            weight_decay=self.weight_decay, clipnorm=self.clipnorm, layer_decay=self.layer_decay,
            recipe=self if each_fit else None)
