"""BertTask: what every task model shares. Raw data goes in through one hook, `preprocess_batch`
(a batch of texts and targets -> encoder inputs, targets, weights, in the graph), which the
Keras entry points (`entry_points.RawDataEntryPoints`) run before Keras's own loops; `compile()`
with the fine-tuning recipe as its defaults, and the checks made before training, come from
`task_training.Trainable`; what leaves the process, `save` and `export`, from
`servable.ServableModel`.

A task model is a functional Keras model from encoder inputs (token ids) to its head's logits,
plus a `preprocessor` layer that turns raw strings into those inputs. `fit` and `evaluate` map
the hook over the data in `tf.data` (batches padded to their longest member); `predict` runs it
inside Keras' predict step; an export runs it inside its serving function. The graph is the
same everywhere.

Steps that Keras compiles with XLA preprocess their batches in `tf.data` (strings never reach a
compiled step) and run the encoder on static shapes (`static_steps.StaticSteps`).
"""

import keras
import tensorflow as tf

from keras_bert.model.config import whole_number
from keras_bert.model.encoder import refuse_unknown_arguments
from keras_bert.models.entry_points import RawDataEntryPoints
from keras_bert.models.static_steps import StaticSteps
from keras_bert.models.task_training import Trainable
from keras_bert.serving.servable import ServableModel
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.tokenizer import same_graph_settings
from keras_bert.training import batching, distribute


class BertTask(RawDataEntryPoints, StaticSteps, Trainable, ServableModel):
    """Base class of the task models; subclasses build the functional graph and define
    `preprocess_batch`, `default_loss` and `serving_functions`."""

    # A task whose head reads only sequence_output (spans, tags) leaves the pooler out of
    # training: it gets no gradient, and Keras would warn of that at every fit.
    trains_pooler = True
    # Whether `sample_weight` is taken (the pretrainer weighs its predictions itself).
    takes_sample_weight = True
    # Whether `predict` decodes the model's outputs (answers, entities) rather than returning
    # them; `predict_on_batch` on raw data then returns what `predict` does.
    decodes_predictions = False

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
        """The hook every entry point preprocesses through: one batch of raw data (x: tf.string
        (batch,), or a tuple of them for pairs; y and sample_weight as the model takes them)
        -> (encoder inputs, targets, weights), in the graph. Subclasses with targets to
        encode (tags, answer spans) or windows define their own."""
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
        for batch in self._raw_batches(x, batch_size):
            texts = self.preprocessor.segments(batch)
            result = tf.nest.map_structure(lambda t: t.numpy(), traced(*texts))
            progress.add(len(texts[0]))
            yield result

    def _raw_batches(self, x, batch_size=None):
        """x's batches of raw data (its x part): a Dataset's own batches; data in memory
        checked (`_in_memory`) and sliced here, in Python, where a tf.data pipeline built for
        each call cost more than a one-text batch's work."""
        if isinstance(x, tf.data.Dataset):
            for batch in self.batched(x):
                yield keras.utils.unpack_x_y_sample_weight(batch)[0]
            return
        size = 32 if batch_size is None else whole_number(batch_size, 1, "batch_size")
        x = self._in_memory(x)[0]
        for start in range(0, batching.example_count(x), size):
            yield tf.nest.map_structure(lambda t, start=start: t[start : start + size], x)
