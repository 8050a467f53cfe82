"""What a task model needs to train (`BertTask` takes it from `Trainable`): `compile()` with the
fine-tuning recipe as its defaults, that recipe saved and loaded with the model, the checks
that refuse, before any graph runs, a training that could not work (weights that cannot change,
weights Keras would apply wrongly, data without targets), and the build of the loss's and
metrics' variables before Keras traces a step.
"""

import os

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.training import batching, distribute, optimization

# A serving setting (docs/serving.md): TensorFlow's oneDNN kernels then keep the
# first weights each product sees, reordered for speed, and never read the variables again.
FROZEN_WEIGHTS_VARIABLE = "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"


def check_weights_can_change():
    """Refuses to train in a process where oneDNN assumes frozen weights: the forward pass would
    keep computing with the weights of its first call and training would silently stall."""
    if os.environ.get(FROZEN_WEIGHTS_VARIABLE, "").strip().lower() in ("1", "true"):
        value = os.environ[FROZEN_WEIGHTS_VARIABLE]
        raise ValueError(f"{FROZEN_WEIGHTS_VARIABLE}={value} is set: oneDNN would keep the first "
                         "weights it sees and training would not change what the model computes; "
                         "unset it to train (it is a serving setting)")


class Trainable:
    """The training half of `BertTask` (a Keras model): `compile`, its saved form, and the
    checks `fit` and `train_on_batch` make first. `class_count`, `takes_sample_weight`,
    `encoder` and the Keras model's own methods come from the class it is mixed into."""

    def compile(self, optimizer="auto", loss="auto", metrics="auto", *, learning_rate=5e-5,
                warmup_proportion=0.1, weight_decay=0.01, clipnorm=1.0, total_steps=None,
                layer_decay=None, **kwargs):  # fmt: skip
        """Keras `compile` with the fine-tuning recipe as defaults: `optimizer="auto"` is AdamW
        (weight decay not on LayerNorm and bias weights) with linear warmup over
        `warmup_proportion` of the steps then linear decay to 0 at `total_steps`, and
        global-norm clipping. When `total_steps` is None, each `fit` counts its own steps and
        runs the warmup and decay over them, with a new AdamW; given, the schedule spans every
        fit and train_on_batch until it ends, and training past its end (where the rate is 0)
        is refused. `layer_decay` < 1
        scales the rate of transformer block i by `layer_decay ** (num_layers - i)` and the
        embeddings' by `layer_decay ** (num_layers + 1)` (optimization.AdamW)."""
        loss = self.default_loss() if loss == "auto" else loss
        metrics = self.default_metrics() if metrics == "auto" else metrics
        self._keep_recipe(None)
        if optimizer == "auto":
            recipe = optimization.Recipe(learning_rate, warmup_proportion, weight_decay, clipnorm,
                                         layer_decay)  # fmt: skip
            if total_steps is not None:
                whole_number(total_steps, 1, "total_steps", " (or None: fit counts them)")
                optimizer = recipe.optimizer(total_steps)
            else:
                self._keep_recipe((recipe, dict(loss=loss, metrics=metrics, **kwargs)))
                # Each fit restarts it over its own steps (_follow_recipe). It carries the
                # recipe into a saved file's compile config.
                optimizer = recipe.optimizer(1, each_fit=True)
        self._keras_compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def _keras_compile(self, **kwargs):
        """Keras's compile, which decides `jit_compile` from whether every layer supports it.
        A task model's steps compiled with XLA run the encoder static and take batches
        preprocessed in tf.data (task.BertTask), so the layers that refuse XLA in other models
        (the packed token layout; the tokenizer's string ops) are passed over here."""
        refusing = [layer for layer in self._flatten_layers() if not layer.supports_jit]
        for layer in refusing:
            layer.supports_jit = True
        try:
            super().compile(**kwargs)
        finally:
            for layer in refusing:
                layer.supports_jit = False
        strategy = self.distribute_strategy
        if (self.jit_compile and strategy.num_replicas_in_sync > 1
                and not distribute.is_tpu(strategy)):  # fmt: skip
            self.jit_compile = False  # not left half set: the model still compiles without
            raise ValueError(
                f"jit_compile=True under a {type(strategy).__name__} of "
                f"{strategy.num_replicas_in_sync} replicas: Keras compiles all the replicas' "
                "step as one XLA computation, which XLA cannot place over several devices; "
                "compile with jit_compile=False (or train on one device, or a TPU)")

    def _follow_recipe(self, steps):
        """Under compile()'s recipe (no total_steps), a fresh AdamW and schedule over the
        `steps` a fit is about to run. Reused as it was, the first fit's schedule ended at a
        rate of 0, and a second fit changed no weight while Keras reported its loss.

        The AdamW compile() or the last fit made is restarted in place (`AdamW.restart`): the
        same state as a new one, in the same variables, so that Keras keeps the steps it
        traced. A new one (Keras's compile) drops them, and the next fit, evaluate and
        predict each traced their step again."""
        if getattr(self, "_recipe", None) is None:
            return
        recipe, compile_kwargs = self._recipe
        optimizer = self.optimizer  # compile()'s or the last fit's, if not wrapped by Keras
        if isinstance(optimizer, optimization.AdamW) and optimizer.recipe is recipe:
            schedule = optimizer._learning_rate
            if getattr(schedule, "_steps", True) is None and self.train_function is None:
                with self.distribute_strategy.scope():
                    schedule.make_restartable()  # no traced step has read its steps
            if optimizer.restart(steps, recipe.warmup_steps(steps)):
                return
        with self.distribute_strategy.scope():  # the one the model was made under, if any
            # Keras's compile: this class's would drop the recipe for the optimizer given.
            self._keras_compile(optimizer=recipe.optimizer(steps, each_fit=True),
                                **compile_kwargs)  # fmt: skip
            optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
            optimizer._learning_rate.make_restartable()

    def _check_can_train(self):
        check_weights_can_change()
        if self.encoder.policy.name in ("bfloat16", "float16"):  # not mixed: stored so
            raise ValueError(f"this model stores its weights in {self.encoder.policy.name} for "
                             "inference (with_precision(..., for_inference=True)) and cannot "
                             "train; train the model it was made from, or "
                             f"with_precision({self.encoder.policy.name!r}) (mixed precision)")

    def _check_weights(self, sample_weight=None, class_weight=None):
        """Refuses weights the model cannot apply, before any graph runs: Keras applies a
        class_weight missing a class with an index error mid-epoch, and applies none at all to
        a model with several outputs or a label per token."""
        name = type(self).__name__
        if sample_weight is not None and not self.takes_sample_weight:
            raise ValueError(f"{name} weighs its predictions itself; pass no sample_weight")
        if class_weight is None:
            return
        count = self.class_count()
        if count is None:
            other = " (weigh examples with sample_weight)" if self.takes_sample_weight else ""
            raise ValueError(f"{name} takes no class_weight: it has no single label per "
                             f"example{other}")  # fmt: skip
        keys = sorted(class_weight) if isinstance(class_weight, dict) else None
        if keys != list(range(count)):
            raise ValueError(f"class_weight must map each class 0 to {count - 1} to its weight, "
                             f"got the keys {keys}")  # fmt: skip
        batching.check_sample_weights([list(class_weight.values())], "class_weight")

    def compile_from_config(self, config):
        """Compiles as the saved model was, with its optimizer, which Keras then loads the saved
        state into: the next fit goes on from the step and the Adam moments where the saved
        model stopped, or under compile()'s recipe (carried by the optimizer, AdamW's
        `recipe`) makes its own schedule again. (Keras's own method compiles no model whose
        compile is its own, and such a file loaded then failed in fit: "object has no
        attribute 'optimizer'".) The compile config itself is Keras's, so that Keras's
        `clone_model` compiles its copy from it."""
        config = dict(config)
        # Files saved by keras_bert before 2026-11-30 kept these two beside Keras's settings.
        built, recipe = config.pop("optimizer_built", True), config.pop("recipe", None)
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        optimizer = config.get("optimizer")
        recipe = getattr(optimizer, "recipe", None) or (
            None if recipe is None else optimization.Recipe(**recipe))  # fmt: skip
        if recipe is not None:
            kept = {k: v for k, v in config.items() if k != "optimizer"}
            self._keep_recipe((recipe, kept))
        if built and self.built:
            self.optimizer.build(self.trainable_variables)

    @staticmethod
    def _require_targets(entry, x, y, name="x"):
        """Refuses data without targets for `entry` (fit, evaluate, validation_data, whose
        data is called `name`): y missing beside data in memory, or a tf.data.Dataset whose
        elements are x alone; Keras's loss failed on them with "None values not supported"."""
        if isinstance(x, tf.data.Dataset):
            spec = x.element_spec
            # A y beside a Dataset: batching.batched refuses it, saying where targets belong.
            if y is not None or (isinstance(spec, tuple) and len(spec) > 1) or (
                    batching.is_prepared(x)):  # fmt: skip
                return
            raise ValueError(f"{entry} needs targets: {name} is a tf.data.Dataset of inputs "
                             "alone; make its elements (x, y)")  # fmt: skip
        if x is not None and y is None:
            raise ValueError(f"{entry} needs targets: pass y (one per example), or x as a "
                             "batched tf.data.Dataset of (x, y)")  # fmt: skip

    def _build_before_tracing(self, dataset):
        """Creates the compiled loss's and metrics' variables (and the optimizer's) from the
        dataset's shapes, before Keras traces its step.

        Keras does this itself only for a model made under a tf.distribute strategy; otherwise
        the first trace of the step creates them, and tf.function then traces the step a
        second time, free of variable creation. `_symbolic_build` is the method Keras's own
        strategy path calls (keras_bert.training.distribute patches the same internals).

        Under a strategy of several replicas, Keras's build from the first batch fails when the
        replicas' shares of it differ in size; `distribute.build_from_one_replica` mends that,
        whoever made the strategy (this is where it is installed for MirroredStrategy). Under
        any strategy, `distribute.device_datasets_without_autotuning` is installed here too."""
        strategy = getattr(self, "_distribute_strategy", None)
        if strategy is not None:
            distribute.device_datasets_without_autotuning()
            if strategy.num_replicas_in_sync > 1:
                distribute.build_from_one_replica()
        if getattr(self, "_distribute_strategy", True) is None and hasattr(self, "_symbolic_build"):
            self._symbolic_build(data_batch=dataset.element_spec)

    def _keep_recipe(self, recipe):
        """Keeps (optimization.Recipe, compile's other arguments) for each fit to count its
        steps. Kept outside Keras's attribute tracking: tracked, the metrics became the model's
        own, and one compile() followed by another made with other metric objects (say with
        total_steps) reported the first one's never-updated accuracy, 0, for the real one."""
        object.__setattr__(self, "_recipe", recipe)

    def default_loss(self):
        raise NotImplementedError

    def default_metrics(self):
        return None
