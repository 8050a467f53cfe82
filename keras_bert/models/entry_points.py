"""Keras's entry points on raw data, for `BertTask`.

A task model turns raw data into encoder inputs through one hook, `preprocess_batch` (one
batch of texts and targets -> token ids, targets, weights, in the graph). `fit` and `evaluate`
map it over `tf.data` batches (`make_dataset`), `predict` runs it inside Keras's predict step,
the `*_on_batch` calls through the same traced graph; Keras's own loops do everything else.
Each override here says on its first comment line why Keras's method is not enough.
"""

import warnings

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.text.tokenizer import same_graph_settings
from keras_bert.training import batching, distribute, optimization


class RawDataEntryPoints:
    """`fit`, `evaluate`, `predict`, the `*_on_batch` calls, `predict_step`,
    `make_predict_function` and `__call__` of a task model. The class it is mixed into gives
    `preprocess_batch`, `make_dataset`, `batched`, `traced` and the checks (`Trainable`)."""

    def fit(self, x=None, y=None, batch_size=None, epochs=1, *, sample_weight=None,
            validation_data=None, steps_per_epoch=None, shuffle=True, seed=None, **kwargs):  # fmt: skip
        """Keras `fit` on raw data: x a list or array of strings (a pair of them for pair
        tasks), y the targets; or x a batched tf.data.Dataset of (strings, targets).
        `validation_split` (data in memory only) validates on the last examples, as Keras's.
        Under compile()'s recipe, the warmup and decay span this fit's steps."""
        # Keras's fit takes no strings in memory and cannot count the recipe's steps.
        (x, y, sample_weight), validation = self._checked_fit_data(
            x, y, sample_weight, epochs, validation_data, batch_size, kwargs)  # fmt: skip
        dataset = self.make_dataset(x, y, sample_weight, batch_size, training=shuffle,
                                    seed=seed)  # fmt: skip
        if steps_per_epoch is None:
            # Keras needs to know an epoch; windows of SQuAD passages, say, are counted once.
            dataset, steps_per_epoch = self._one_iterator(dataset, batching.count_steps(dataset))
        steps = steps_per_epoch * (epochs - kwargs.get("initial_epoch", 0))
        self._follow_recipe(steps)
        optimization.check_schedule_covers(self.optimizer, steps)
        if validation is not None:
            try:
                validation = self.make_dataset(*validation, batch_size=batch_size)
            except ValueError as error:  # else "y[0] is 5" reads as a mistake in fit's own y
                raise ValueError(f"validation_data: {error}") from None
            validation, kwargs["validation_steps"] = self._one_iterator_unless_told(
                validation, kwargs.get("validation_steps"))  # fmt: skip
        self._build_before_tracing(dataset)
        return super().fit(dataset, epochs=epochs, validation_data=validation,
                           steps_per_epoch=steps_per_epoch, shuffle=False, **kwargs)  # fmt: skip

    def evaluate(self, x=None, y=None, batch_size=None, *, sample_weight=None, **kwargs):
        """Keras `evaluate` on raw data (as `fit` takes it)."""
        # Keras's evaluate takes no strings in memory.
        self._check_weights(sample_weight)
        batching.check_kind(x)
        self._require_targets("evaluate", x, y)
        self._compile_if_not()
        dataset = self.make_dataset(x, y, sample_weight, batch_size)
        dataset, kwargs["steps"] = self._one_iterator_unless_told(dataset, kwargs.get("steps"))
        self._build_before_tracing(dataset)
        with warnings.catch_warnings():
            # Keras warns "Your input ran out of data; interrupting training" at the end of a
            # dataset whose length it was not told (a SQuAD model's windows): for evaluate,
            # that end is the end of the data, not an interruption.
            warnings.filterwarnings("ignore", message="Your input ran out of data")
            return super().evaluate(dataset, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """Keras `predict` on raw strings; returns the model's outputs (logits).

        Under no tf.distribute strategy the strings go to Keras' predict step, which
        preprocesses them in its own graph: Keras keeps that graph between calls, where a
        `tf.data` map is built again by every call. Under a strategy, or where the step
        compiles with XLA, they are preprocessed in `tf.data`, as `fit` does (a TPU takes no
        strings)."""
        # Keras's predict takes no strings in memory.
        if self._preprocesses_in_step():
            dataset = self.batched(x, batch_size=batch_size)
        else:
            distribute.device_datasets_without_autotuning()
            dataset = self.make_dataset(x, batch_size=batch_size)
        dataset, kwargs["steps"] = self._one_iterator_unless_told(dataset, kwargs.get("steps"))
        return super().predict(dataset, **kwargs)

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict=False):  # fmt: skip
        """Keras `train_on_batch` on one batch of raw data (as `fit` takes it). The recipe's
        schedule needs its length: compile(total_steps=...) first, or pass an optimizer."""
        # Keras's train_on_batch takes no strings, and would train on past a schedule's end.
        self._check_can_train()
        self._check_weights(sample_weight, class_weight)
        self._compile_if_not()
        if getattr(self, "_recipe", None) is not None:
            raise ValueError("train_on_batch cannot count the steps of the learning-rate "
                             "schedule: call compile(total_steps=...) first (or compile with "
                             "an optimizer)")  # fmt: skip
        x, y, sample_weight = self._one_batch(x, y, sample_weight)
        optimization.check_schedule_covers(self.optimizer, 1)
        return super().train_on_batch(x, y, sample_weight, class_weight, return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """Keras `test_on_batch` on one batch of raw data (as `evaluate` takes it)."""
        # Keras's test_on_batch takes no strings.
        self._check_weights(sample_weight)
        self._compile_if_not()
        x, y, sample_weight = self._one_batch(x, y, sample_weight)
        return super().test_on_batch(x, y, sample_weight, return_dict)

    def predict_on_batch(self, x):
        """Keras `predict_on_batch` on raw strings: the model's outputs, or where `predict`
        decodes them (answers, entities), what `predict` returns for that batch."""
        # Keras's predict_on_batch checks no strings, and knows neither decoding nor XLA.
        if batching.is_token_ids(x):
            return super().predict_on_batch(x)
        x = batching.in_memory(x, check_x=self._checks()["check_x"])[0]
        if self.decodes_predictions:
            return self.predict(x, batch_size=batching.example_count(x), verbose=0)
        if self.compiles_with_xla():  # strings never reach a compiled step
            x = self.pad_for_xla(self.preprocess_batch(x)[0], None, None)[0]
        return super().predict_on_batch(x)

    def predict_step(self, data):
        # Keras's predict step takes token ids: raw strings go through the hook here.
        x = keras.utils.unpack_x_y_sample_weight(data)[0]
        if not batching.is_token_ids(x):
            x = self.preprocess_batch(x)[0]
        with self._encoder_shapes_for_step():
            return super().predict_step(x)

    def make_predict_function(self, force=False):
        """Keras's predict function, traced once for any batch size (`batching.AnyBatchSize`),
        and again once the preprocessor's settings change (its step preprocesses strings)."""
        # Keras's function traced the model again for a smaller last batch.
        settings, made_for = self._graph_settings(), self.__dict__.get("_predict_settings")
        if (self.predict_function is not None and not force
                and same_graph_settings(made_for, settings)):  # fmt: skip
            return self.predict_function
        super().make_predict_function(force=True)
        if isinstance(self.predict_function, tf.types.experimental.PolymorphicFunction):
            self.predict_function = batching.AnyBatchSize(self.predict_function)
        object.__setattr__(self, "_predict_settings", settings)  # a cache, not model state
        return self.predict_function

    def __call__(self, inputs, *args, **kwargs):
        """Keras's call, on encoder inputs (token ids)."""
        # Keras's own refusal of raw texts said the model "expects 3 named input(s)".
        if batching.holds_texts(inputs):
            raise ValueError(f"{type(self).__name__} called directly takes token ids, "
                             "model(model.preprocessor(texts)); predict(texts) takes the texts "
                             "themselves")  # fmt: skip
        return super().__call__(inputs, *args, **kwargs)

    # --- what the entry points share ---

    def _compile_if_not(self):
        if not self.compiled:
            self.compile()

    def _checked_fit_data(self, x, y, sample_weight, epochs, validation_data, batch_size,
                          kwargs):  # fmt: skip
        """fit's (x, y, sample_weight) and validation (x, y, sample_weight) or None, checked
        before any graph runs; `validation_split` is taken out of `kwargs` and applied. The
        model is compiled if it was not."""
        self._check_can_train()
        self._check_weights(sample_weight, kwargs.get("class_weight"))
        batching.check_kind(x)
        self._require_targets("fit", x, y)
        validation = None if validation_data is None else (
            keras.utils.unpack_x_y_sample_weight(validation_data))  # fmt: skip
        if validation is not None:
            if validation[1] is None and not isinstance(validation[0], tf.data.Dataset):
                raise ValueError("validation_data needs targets: make it (x, y) or (x, y, "
                                 "sample_weight), or a batched tf.data.Dataset of (x, y)")
            self._require_targets("validation_data", *validation[:2], name="it")
        # A fit of no epochs failed in the schedule ("total_steps must be positive, got 0").
        initial_epoch = whole_number(kwargs.get("initial_epoch", 0), 0, "initial_epoch")
        whole_number(epochs, initial_epoch + 1, "epochs",
                     f" (more than initial_epoch={initial_epoch})" if initial_epoch else "")
        split = kwargs.pop("validation_split", None)
        if split:
            if validation_data is not None:
                raise ValueError("pass validation_data or validation_split, not both")
            if isinstance(x, tf.data.Dataset):
                raise ValueError("validation_split splits data given in memory; x is a "
                                 "tf.data.Dataset: pass validation_data instead")  # fmt: skip
            (x, y, sample_weight), validation = batching.split_off(
                split, *self._in_memory(x, y, sample_weight))  # fmt: skip
        self._compile_if_not()
        # Each core's share is static too. (A Dataset's batches are its own: batch_size, or
        # its default of 32, is not their size, and the binaries check theirs.)
        if distribute.is_tpu(self.distribute_strategy) and not isinstance(x, tf.data.Dataset):
            replicas = self.distribute_strategy.num_replicas_in_sync
            if (batch_size or 32) % replicas:
                raise ValueError(f"batch_size={batch_size or 32} does not split evenly over the "
                                 f"TPU's {replicas} cores: pass a multiple of {replicas}")
        return (x, y, sample_weight), validation

    def _one_batch(self, x, y, sample_weight):
        """One batch of raw data in memory, checked and preprocessed by the graph that `fit`
        maps over its batches; encoder inputs pass as they are."""
        if batching.is_token_ids(x):
            return x, y, sample_weight
        if y is None:
            raise ValueError("training and testing need targets: pass y (one per example)")
        data = self._in_memory(x, y, sample_weight)
        parts = data[:1] if y is None else data[:2] if sample_weight is None else data
        return keras.utils.unpack_x_y_sample_weight(self.traced(self._preprocess_element)(parts))

    def _one_iterator(self, dataset, steps):
        """(dataset, steps) to hand Keras's loop a dataset of `steps` batches a pass: repeated,
        with `steps` as its steps a pass, where the steps of one call divide them.

        Told a dataset's length, Keras makes an iterator at the start of each epoch (and each
        evaluation and prediction) and another at its end, which the next start replaces; each
        instantiates the preprocessing graph and starts prefetching. Over a repeated dataset
        told its steps, it makes one for all of fit's epochs, each a whole pass, and one an
        evaluation or prediction. A call of several steps could run into the next pass: there
        the dataset is left as it is."""
        if steps % self.steps_per_execution:
            return dataset.apply(tf.data.experimental.assert_cardinality(steps)), steps
        return dataset.repeat(), steps

    def _one_iterator_unless_told(self, dataset, steps):
        """`_one_iterator` over one pass of a dataset whose length tf.data knows, where the
        caller gave no `steps`; else (dataset, steps) as they are."""
        if steps is not None or dataset.cardinality() <= 0:
            return dataset, steps
        return self._one_iterator(dataset, int(dataset.cardinality()))

    def _preprocesses_in_step(self):
        """Whether `predict` hands raw strings to the predict step (no strategy, no XLA)."""
        default = tf.distribute.get_strategy()  # the default strategy outside any scope
        return (not tf.distribute.has_strategy() and self.distribute_strategy is default
                and not self.compiles_with_xla())  # fmt: skip
