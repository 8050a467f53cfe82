"""BertTask: what every task model shares. Raw strings in `fit`, `evaluate` and `predict` (and
Keras's other entry points). `compile()` with the fine-tuning recipe as its defaults, and the
checks made before training, come from `task_training.Trainable`; what leaves the process, `save`
and `export`, from `servable.ServableModel`.

A task model is a functional Keras model from encoder inputs (token ids) to its head's logits,
plus a `preprocessor` layer that turns raw strings into those inputs. `fit` and `evaluate` map
the preprocessor over the data in `tf.data` (batches padded to their longest member); `predict`
runs it inside Keras' predict step; an export runs it inside its serving function. The graph is
the same everywhere.

Steps that Keras compiles with XLA preprocess their batches in `tf.data` (strings never reach a
compiled step) and run the encoder on static shapes (`static_steps.StaticSteps`).
"""

import warnings

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.model.encoder import refuse_unknown_arguments
from keras_bert.models.static_steps import StaticSteps
from keras_bert.models.task_training import Trainable
from keras_bert.serving.servable import ServableModel
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.tokenizer import same_graph_settings
from keras_bert.training import batching, distribute, optimization


class BertTask(StaticSteps, Trainable, ServableModel):
    """Base class of the task models; subclasses build the functional graph and define
    `preprocess_batch`, `default_loss` and `serving_functions`."""

    # A task whose head reads only sequence_output (spans, tags) leaves the pooler out of
    # training: it gets no gradient, and Keras would warn of that at every fit.
    trains_pooler = True
    # Whether `sample_weight` is taken (the pretrainer weighs its predictions itself).
    takes_sample_weight = True

    def __init__(self, inputs, outputs, untrained_head=None, **kwargs):
        refuse_unknown_arguments(self, kwargs, f"the arguments of {type(self).__name__}'s "
                                 "constructor (or its from_checkpoint), name and trainable")
        super().__init__(inputs=inputs, outputs=outputs, untrained_head=untrained_head,
                         **kwargs)  # fmt: skip

    @property
    def trainable_weights(self):
        weights = super().trainable_weights
        encoder = getattr(self, "encoder", None)  # None while the functional graph is built
        if self.trains_pooler or encoder is None:
            return weights
        pooler = {id(w) for w in encoder.pooler.weights}
        return [w for w in weights if id(w) not in pooler]

    def class_count(self):
        """The classes `class_weight` weighs: a single label per example's, else None."""
        return

    def check_targets(self, x, y):
        """Refuses targets given in memory (lists, arrays, tensors) that the model cannot learn
        from `x` (its tensors), with one line naming the first bad one, before any graph runs;
        subclasses define it. A Dataset's targets are checked in the graph."""

    def preprocess_batch(self, x, y=None, sample_weight=None):
        """One batch of raw data -> (encoder inputs, targets, weights), in the graph."""
        return self.preprocessor(x), y, sample_weight

    def _preprocess_element(self, data):
        # `data`: the element's parts as one tuple (retracing with another count of arguments
        # fails in TensorFlow). A one-part element is x alone (a tuple there is a pair of texts).
        x, y, sample_weight = (data[0], None, None) if len(data) == 1 else (
            keras.utils.unpack_x_y_sample_weight(data))  # fmt: skip
        if batching.is_token_ids(x):
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        return keras.utils.pack_x_y_sample_weight(*self.preprocess_batch(x, y, sample_weight))

    def batched(self, x, y=None, sample_weight=None, batch_size=None, shuffle=False, seed=None):
        """Raw data as a batched tf.data.Dataset (`batching.batched`), data given in memory
        checked first: its texts by the preprocessor, its targets (`encode_targets`) by
        `check_targets`."""
        if y is not None and not isinstance(x, tf.data.Dataset):
            y = self.encode_targets(y)
        whole = shuffle and distribute.is_tpu(self.distribute_strategy)  # static batches
        return batching.batched(x, y, sample_weight, batch_size, shuffle, seed,
                                drop_remainder=whole, **self._checks())  # fmt: skip

    def encode_targets(self, y):
        """Targets given in memory as the graph takes them, before they are checked, split or
        batched (a token classifier's tags as ids, say); as given unless a model says."""
        return y

    def _in_memory(self, x, y=None, sample_weight=None):
        y = None if y is None else self.encode_targets(y)
        return batching.in_memory(x, y, sample_weight, **self._checks())

    def _checks(self):
        texts = None if self.preprocessor is None else self.preprocessor.texts
        return dict(check_x=texts, check_targets=self.check_targets)

    def make_dataset(self, x, y=None, sample_weight=None, batch_size=None, training=False,
                     seed=None):  # fmt: skip
        """Batches of encoder inputs (and targets), ready for Keras."""
        dataset = self.batched(x, y, sample_weight, batch_size, shuffle=training, seed=seed)
        return self.for_xla(self.preprocessed(dataset)).prefetch(tf.data.AUTOTUNE)

    def preprocessed(self, dataset):
        """`dataset`'s batches of raw data through `preprocess_batch`, as one graph traced once
        for the model's life (the one `train_on_batch` runs), where a plain function would be
        traced again on every call of fit and evaluate."""
        preprocess = self.traced(self._preprocess_element)
        # Traced here first, so that a mistake found while tracing (a pair's texts as (x, y))
        # is raised as its one line: inside `map`, autograph wraps it in a listing of frames.
        spec = dataset.element_spec
        preprocess.trace(spec if isinstance(spec, tuple) else (spec,))
        return dataset.map(lambda *data: preprocess(data), num_parallel_calls=tf.data.AUTOTUNE)

    # --- Keras entry points on raw strings ---

    def fit(self, x=None, y=None, batch_size=None, epochs=1, *, sample_weight=None,
            validation_data=None, steps_per_epoch=None, shuffle=True, seed=None, **kwargs):  # fmt: skip
        """Keras `fit` on raw data: x a list or array of strings (a pair of them for pair
        tasks), y the targets; or x a batched tf.data.Dataset of (strings, targets).
        `validation_split` (data in memory only) validates on the last examples, as Keras's."""
        self._check_can_train()
        self._check_weights(sample_weight, kwargs.get("class_weight"))
        batching.check_kind(x)
        self._require_targets("fit", x, y)
        # validation_data as (x, y, sample_weight), or None.
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
        if kwargs.get("validation_split"):
            if validation_data is not None:
                raise ValueError("pass validation_data or validation_split, not both")
            if isinstance(x, tf.data.Dataset):
                raise ValueError("validation_split splits data given in memory; x is a "
                                 "tf.data.Dataset: pass validation_data instead")  # fmt: skip
            (x, y, sample_weight), validation = batching.split_off(
                kwargs.pop("validation_split"), *self._in_memory(x, y, sample_weight))
        kwargs.pop("validation_split", None)
        if not self.compiled:
            self.compile()
        # Each core's share is static too. (A Dataset's batches are its own: batch_size, or
        # its default of 32, is not their size, and the binaries check theirs.)
        if distribute.is_tpu(self.distribute_strategy) and not isinstance(x, tf.data.Dataset):
            replicas = self.distribute_strategy.num_replicas_in_sync
            if (batch_size or 32) % replicas:
                raise ValueError(f"batch_size={batch_size or 32} does not split evenly over the "
                                 f"TPU's {replicas} cores: pass a multiple of {replicas}")
        dataset = self.make_dataset(x, y, sample_weight, batch_size, training=shuffle,
                                    seed=seed)  # fmt: skip
        if steps_per_epoch is None:
            # Keras needs to know an epoch; windows of SQuAD passages, say, are counted once.
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(
                batching.count_steps(dataset)))  # fmt: skip
        steps = (steps_per_epoch or int(dataset.cardinality())) * (epochs - initial_epoch)
        self._follow_recipe(steps)
        optimization.check_schedule_covers(self.optimizer, steps)
        validation_data = None
        if validation is not None:
            try:
                validation_data = self.make_dataset(*validation, batch_size=batch_size)
            except ValueError as error:  # else "y[0] is 5" reads as a mistake in fit's own y
                raise ValueError(f"validation_data: {error}") from None
        self._build_before_tracing(dataset)
        return super().fit(dataset, epochs=epochs, validation_data=validation_data,
                           steps_per_epoch=steps_per_epoch, shuffle=False, **kwargs)  # fmt: skip

    def __call__(self, inputs, *args, **kwargs):
        """Keras's call, on encoder inputs (token ids); raw texts are refused in one line, where
        Keras said the model "expects 3 named input(s)"."""
        if batching.holds_texts(inputs):
            raise ValueError(f"{type(self).__name__} called directly takes token ids, "
                             "model(model.preprocessor(texts)); predict(texts) takes the texts "
                             "themselves")  # fmt: skip
        return super().__call__(inputs, *args, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, *, sample_weight=None, **kwargs):
        """Keras `evaluate` on raw data (as `fit` takes it)."""
        self._check_weights(sample_weight)
        batching.check_kind(x)
        self._require_targets("evaluate", x, y)
        if not self.compiled:
            self.compile()
        dataset = self.make_dataset(x, y, sample_weight, batch_size)
        self._build_before_tracing(dataset)
        with warnings.catch_warnings():
            # Keras warns "Your input ran out of data; interrupting training" at the end of a
            # dataset whose length it was not told (a SQuAD model's windows): for evaluate,
            # that end is the end of the data, not an interruption.
            warnings.filterwarnings("ignore", message="Your input ran out of data")
            return super().evaluate(dataset, **kwargs)

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict=False):  # fmt: skip
        """Keras `train_on_batch` on one batch of raw data (as `fit` takes it). The recipe's
        schedule needs its length: compile(total_steps=...) first, or pass an optimizer."""
        self._check_can_train()
        self._check_weights(sample_weight, class_weight)
        if not self.compiled:
            self.compile()
        if getattr(self, "_recipe", None) is not None:
            raise ValueError("train_on_batch cannot count the steps of the learning-rate "
                             "schedule: call compile(total_steps=...) first (or compile with "
                             "an optimizer)")  # fmt: skip
        x, y, sample_weight = self._one_batch(x, y, sample_weight)
        optimization.check_schedule_covers(self.optimizer, 1)
        return super().train_on_batch(x, y, sample_weight, class_weight, return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """Keras `test_on_batch` on one batch of raw data (as `evaluate` takes it)."""
        self._check_weights(sample_weight)
        if not self.compiled:
            self.compile()
        x, y, sample_weight = self._one_batch(x, y, sample_weight)
        return super().test_on_batch(x, y, sample_weight, return_dict)

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

    def predict(self, x, batch_size=None, **kwargs):
        """Keras `predict` on raw strings; returns the model's outputs (logits).

        Under no tf.distribute strategy the strings go to Keras' predict step, which
        preprocesses them in its own graph: Keras keeps that graph between calls, where a
        `tf.data` map is built again by every call (about 0.1 s, most of a short predict).
        Under a strategy they are preprocessed in `tf.data`, as `fit` does (a TPU takes no
        strings)."""
        if self._preprocesses_in_step():
            return super().predict(self.batched(x, batch_size=batch_size), **kwargs)
        distribute.device_datasets_without_autotuning()
        return super().predict(self.make_dataset(x, batch_size=batch_size), **kwargs)

    # Whether `predict` decodes the model's outputs (answers, entities) rather than returning
    # them; `predict_on_batch` on raw data then returns what `predict` does.
    decodes_predictions = False

    def predict_on_batch(self, x):
        """Keras `predict_on_batch` on raw strings: the model's outputs, or where `predict`
        decodes them (answers, entities), what `predict` returns for that batch."""
        if batching.is_token_ids(x):
            return super().predict_on_batch(x)
        x = batching.in_memory(x, check_x=self._checks()["check_x"])[0]
        if self.decodes_predictions:
            return self.predict(x, batch_size=batching.example_count(x), verbose=0)
        if self.compiles_with_xla():  # strings never reach a compiled step
            x = self.pad_for_xla(self.preprocess_batch(x)[0], None, None)[0]
        return super().predict_on_batch(x)

    def _preprocesses_in_step(self):
        default = tf.distribute.get_strategy()  # the default strategy outside any scope
        return (not tf.distribute.has_strategy() and self.distribute_strategy is default
                and not self.compiles_with_xla())  # fmt: skip

    def make_predict_function(self, force=False):
        """Keras's predict function, traced once for any batch size (`batching.AnyBatchSize`): Keras
        calls it with each batch's tensors, so that a `predict` whose last batch is smaller
        traced the model twice."""
        # Its step preprocesses raw strings: made again once the preprocessor's settings change.
        settings, made_for = self._graph_settings(), self.__dict__.get("_predict_settings")
        if (self.predict_function is not None and not force
                and same_graph_settings(made_for, settings)):  # fmt: skip
            return self.predict_function
        super().make_predict_function(force=True)
        if isinstance(self.predict_function, tf.types.experimental.PolymorphicFunction):
            self.predict_function = batching.AnyBatchSize(self.predict_function)
        object.__setattr__(self, "_predict_settings", settings)  # a cache, not model state
        return self.predict_function

    def predict_step(self, data):
        x = keras.utils.unpack_x_y_sample_weight(data)[0]
        if not batching.is_token_ids(x):
            x = self.preprocess_batch(x)[0]
        with self._encoder_shapes_for_step():
            return super().predict_step(x)

    def traced(self, function):
        """`function` as one tf.function for the model's life, so that its graph is traced
        once, not at every call (the dev callback that predicts after every epoch, each
        `make_dataset` of fit and evaluate); traced again once the preprocessor's
        `graph_settings` change (a new vocabulary)."""
        # Kept outside Keras' attribute tracking: a plain cache, not a part of the model.
        cache = self.__dict__.get("_traced_functions")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_traced_functions", cache)
        settings = self._graph_settings()
        if function in cache:
            traced_for, traced = cache[function]
            if same_graph_settings(traced_for, settings):
                return traced
        traced = batching.AnyBatchSize(tf.function(function, reduce_retracing=True,
                                                    autograph=False))
        cache[function] = (settings, traced)
        return traced

    def _graph_settings(self):
        """The preprocessor's `graph_settings`, which the graphs that preprocess are traced
        with; None without a BertPreprocessor."""
        if isinstance(self.preprocessor, BertPreprocessor):
            return self.preprocessor.graph_settings()
        return None

    def map_batches(self, function, x, batch_size=None, verbose="auto", unit="example"):
        """Yields `function(*texts)` as NumPy values for each batch of raw x, through one
        traced graph, with a progress bar: what the decoding models' `predict` runs."""
        traced = self.traced(function)
        progress = keras.utils.Progbar(None, unit_name=unit, verbose=verbose != 0)
        for batch in self.batched(x, batch_size=batch_size):
            texts = self.preprocessor.segments(keras.utils.unpack_x_y_sample_weight(batch)[0])
            result = tf.nest.map_structure(lambda t: t.numpy(), traced(*texts))
            progress.add(len(texts[0]))
            yield result
