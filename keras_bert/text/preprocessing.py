"""Preprocessors: raw strings in, encoder inputs out, as Keras layers that a task model carries
(and saves, vocabulary included), so `fit`, `predict` and an export all take strings.

Each runs inside `tf.data` (what `fit` and `predict` do) and inside a saved `tf.function` (what
an export does); batches are padded to their longest member. Called from Python, each but the
pre-training one runs as one traced graph (`BertPreprocessor.__call__`).
"""

import keras
import tensorflow as tf

from keras_bert.text.packer import BertPacker
from keras_bert.text.tokenizer import call_traced, same_graph_settings

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def _texts(value, what):
    """A rank-1 tf.string tensor from a tensor, array or list of str; a one-line error else."""
    try:
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, bytes)) for v in value):
            # What convert_to_tensor makes of it, without its search for tensors to stack
            # (35 us for 32 texts instead of 73); strings even when the list is empty.
            tensor = tf.constant(value, tf.string)
        else:
            tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be strings, got {type(value).__name__}") from None
    if tensor.dtype != tf.string:
        raise ValueError(f"{what} must be strings, got {tensor.dtype.name} values")
    return tensor


def _symbolic(x):
    """Whether x (or an element of a tuple, list or dict x) is a Keras symbolic tensor."""
    if isinstance(x, dict):
        x = list(x.values())
    elif not isinstance(x, (tuple, list)):
        x = [x]
    return any(isinstance(v, keras.KerasTensor) for v in x)


@_SERIALIZABLE
class BertPreprocessor(keras.layers.Layer):
    """Tokenizes and packs one text (`num_segments=1`) or a pair of texts per example.

    Args:
      tokenizer: a `BertTokenizer`.
      packer: a `BertPacker` (its `sequence_length` caps the packed length).
      num_segments: 1, or 2 for sentence pairs.

    Call with a tf.string (batch,) tensor, or for pairs a tuple/list of two of them, or a dict
    keyed by `text_names`; returns the encoder inputs, int32 (batch, seq).
    """

    traced_when_eager = True  # see __call__

    def __init__(self, tokenizer, packer, num_segments=1, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.supports_jit = False  # string ops: XLA compiles none (see packing.TokenLayout)
        if num_segments not in (1, 2):
            raise ValueError(f"num_segments must be 1 or 2, got {num_segments}")
        self.tokenizer = tokenizer
        self.packer = packer
        self.num_segments = num_segments
        self.built = True
        # The graph eager calls run and its graph_settings, kept where neither Keras nor
        # tf.saved_model looks (both would save a function held as an attribute of the layer).
        object.__setattr__(self, "_eager_graph", [])

    @classmethod
    def from_tokenizer(cls, tokenizer, sequence_length=128, **kwargs):
        return cls(tokenizer, BertPacker.from_tokenizer(tokenizer, sequence_length=sequence_length),
                   **kwargs)  # fmt: skip

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    @property
    def text_names(self):
        """The names of an export's string inputs."""
        return ("sentence",) if self.num_segments == 1 else ("sentence1", "sentence2")

    def segments(self, x):
        """x as a list of `num_segments` rank-1 string tensors."""
        if isinstance(x, dict):
            missing = [name for name in self.text_names if name not in x]
            if missing:
                raise ValueError(f"inputs lack {', '.join(missing)} (this model takes "
                                 f"{', '.join(self.text_names)})")  # fmt: skip
            x = [x[name] for name in self.text_names]
        elif not isinstance(x, (tuple, list)) or not x or isinstance(x[0], (str, bytes)):
            x = [x]  # one list of texts, not a tuple of segments
        self._check_count(len(x))
        texts = [_texts(t, "texts") for t in x]
        for t in texts:
            if t.shape.rank != 1:
                raise ValueError(f"expected {self._expected()}, got a string tensor of shape "
                                 f"{t.shape}")  # fmt: skip
        return texts

    def _check_count(self, count):
        """Refuses `count` texts an example where the model takes another number."""
        if count != self.num_segments:
            # A tf.data element (first, second) reads as (x, y): a pair's x must be nested.
            nested = " (a tf.data.Dataset's element (first, second) reads as (x, y): make it " \
                "((first, second), y), or ((first, second),) to predict)" \
                if count < self.num_segments else ""
            raise ValueError(f"this model takes {self.num_segments} text(s) per example, got "
                             f"{count}; pass {self._expected()}{nested}")  # fmt: skip

    def __call__(self, x, *args, **kwargs):
        """Called eagerly on texts (a list, an array or a string tensor), the layer runs as one
        graph, traced on the first such call, rather than op by op. Inside `tf.data`, a
        `tf.function` or a functional model, Keras calls the layer as usual."""
        if args or kwargs or _symbolic(x):
            return super().__call__(x, *args, **kwargs)
        if not self.traced_when_eager or not tf.executing_eagerly():
            # The texts checked first, so that a mistake (a pair's texts as (x, y) in a
            # tf.data.Dataset, say) is raised as its one line: Keras's Layer.__call__ would
            # wrap it in a listing of the layer's arguments.
            self.texts(x)
            self.tokenizer.require_vocabulary()
            return super().__call__(x)
        texts = self.texts(x)
        return call_traced(self._eager_function(texts), texts)

    def _eager_function(self, texts):
        """The concrete function eager calls run, traced again once `graph_settings` change."""
        settings = self.graph_settings()
        if self._eager_graph and same_graph_settings(self._eager_graph[0], settings):
            return self._eager_graph[1]
        specs = [tf.TensorSpec([None] * t.shape.rank, tf.string) for t in texts]
        graph = tf.function(lambda *t: self.call(t[0] if len(t) == 1 else list(t)),
                            autograph=False).get_concrete_function(*specs)  # fmt: skip
        self._eager_graph[:] = [settings, graph]
        return graph

    def graph_settings(self):
        """What a graph traced from this layer bakes in of the tokenizer and the packer, which
        a user can change after: the vocabulary (`set_vocabulary`; a graph traced before kept
        the old one's ids), the lower-casing, the packer's ids and lengths. Whoever keeps such
        a graph traces it again when these differ (`same_graph_settings`). A subclass's own
        settings are fixed when it is made."""
        packer = self.packer
        return (*self.tokenizer.graph_settings(), packer.cls_id, packer.sep_id, packer.pad_id,
                packer.sequence_length, packer.pad_to_sequence_length)  # fmt: skip

    def texts(self, x):
        """x's texts, checked, as a list of tf.string tensors: what `call` takes."""
        return self.segments(x)

    def _expected(self):
        if self.num_segments == 1:
            return "a list (or 1-D array) of strings"
        return "a pair (first texts, second texts), each a list of strings"

    def call(self, x):
        return self.packer(*[self.tokenizer(t) for t in self.segments(x)])

    def untruncated_lengths(self, x):
        """Tokens each example packs to before truncation, [CLS] and its [SEP]s counted: int64
        (batch,). The examples `sequence_length` truncates are those longer than it."""
        segments = self.segments(x)
        pieces = sum(self.tokenizer(t).row_lengths() for t in segments)
        return pieces + len(segments) + 1

    def get_config(self):
        return {
            **super().get_config(),
            "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
            "packer": keras.saving.serialize_keras_object(self.packer),
            "num_segments": self.num_segments,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("tokenizer", "packer"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


@_SERIALIZABLE
class BertMultipleChoicePreprocessor(BertPreprocessor):
    """Packs a context with each of its candidate endings, `[CLS] context [SEP] ending [SEP]`.

    Call with (contexts, endings): tf.string (batch,) and (batch, num_choices), or a dict with
    keys `context` and `endings`; returns encoder inputs int32 (batch, num_choices, seq).
    """

    def __init__(self, tokenizer, packer, num_choices=4, **kwargs):
        kwargs["num_segments"] = 2
        super().__init__(tokenizer, packer, **kwargs)
        self.num_choices = num_choices

    @property
    def text_names(self):
        return ("context", "endings")

    def _expected(self):
        return f"(contexts, endings): a list of strings and a list of {self.num_choices}-string lists"

    def texts(self, x):
        """[contexts (batch,), endings (batch, num_choices)], checked."""
        if isinstance(x, dict):
            x = [x.get(name) for name in self.text_names]
        if not isinstance(x, (tuple, list)) or len(x) != 2:
            # A tf.data element (contexts, endings, y) reads as (x, y, sample_weight).
            nested = "" if isinstance(x, (tuple, list)) else (
                " (a tf.data.Dataset's element (contexts, endings, y) reads as (x, y, "
                "sample_weight): make it ((contexts, endings), y))")
            raise ValueError(f"expected {self._expected()}{nested}")
        contexts, endings = _texts(x[0], "contexts"), _texts(x[1], "endings")
        if contexts.shape.rank != 1 or endings.shape.rank != 2 or (
                endings.shape[1] not in (None, self.num_choices)):  # fmt: skip
            raise ValueError(f"expected {self._expected()}; got shapes {contexts.shape} and "
                             f"{endings.shape}")  # fmt: skip
        return [contexts, endings]

    def call(self, x):
        contexts, endings = self.texts(x)
        packed = self.packer(self.tokenizer(tf.repeat(contexts, self.num_choices)),
                             self.tokenizer(tf.reshape(endings, [-1])))  # fmt: skip
        # (batch * choices, seq) -> (batch, choices, seq)
        return {k: tf.reshape(v, [-1, self.num_choices, tf.shape(v)[-1]]) for k, v in packed.items()}

    def untruncated_lengths(self, x):
        """int64 (batch, num_choices): each context-and-ending pair's `untruncated_lengths`."""
        contexts, endings = self.texts(x)
        context = self.tokenizer(contexts).row_lengths()[:, None]  # (batch, 1)
        ending = self.tokenizer(tf.reshape(endings, [-1])).row_lengths()
        return context + tf.reshape(ending, [-1, self.num_choices]) + 3

    def get_config(self):
        config = {**super().get_config(), "num_choices": self.num_choices}
        del config["num_segments"]
        return config


@_SERIALIZABLE
class BertTextsPreprocessor(BertPreprocessor):
    """Packs each text of an example on its own, `[CLS] text [SEP]`: what a text embedder
    reads, one text an example to embed, or texts that go together to train on (an anchor and
    its positive, hard negatives after them; or the two texts of a scored pair).

    Call with a tf.string (batch,) tensor, a tuple/list of such tensors of one length (the
    example's texts), or a dict keyed `sentence`; returns encoder inputs int32
    (batch, texts, seq).
    """

    def __init__(self, tokenizer, packer, **kwargs):
        kwargs["num_segments"] = 1
        super().__init__(tokenizer, packer, **kwargs)

    def _expected(self):
        return ("a list of strings, or a tuple of lists of strings of one length (texts that go "
                "together: anchors, positives, ...)")  # fmt: skip

    def _check_count(self, count):
        """Any number of texts an example."""

    def segments(self, x):
        """x as a list of rank-1 string tensors, one for each text of an example."""
        texts = super().segments(x)
        lengths = {int(t.shape[0]) for t in texts if t.shape[0] is not None}
        if len(lengths) > 1:
            raise ValueError(f"the example's texts come in lists of {sorted(lengths)} strings: "
                             "give one text of each list per example")  # fmt: skip
        return texts

    def call(self, x):
        texts = self.segments(x)
        count = len(texts)
        batch = tf.shape(texts[0])[0]
        for t in texts[1:]:
            tf.debugging.assert_equal(tf.shape(t)[0], batch,
                                      message="an example's texts come in lists of one length")
        packed = self.packer(self.tokenizer(tf.concat(texts, 0)))  # (texts * batch, seq)
        return {k: tf.transpose(tf.reshape(v, [count, batch, -1]), [1, 0, 2])
                for k, v in packed.items()}  # fmt: skip

    def untruncated_lengths(self, x):
        """int64 (batch, texts): tokens each text packs to before truncation."""
        texts = self.segments(x)
        lengths = self.tokenizer(tf.concat(texts, 0)).row_lengths() + 2
        return tf.transpose(tf.reshape(lengths, [len(texts), -1]))

    def get_config(self):
        config = super().get_config()
        del config["num_segments"]
        return config
