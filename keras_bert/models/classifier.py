"""Sentence (and sentence-pair) classification and multiple choice, on raw strings.

    model = keras_bert.BertClassifier.from_checkpoint(path, num_classes=2)
    model.fit(["a fine film", "a dull film"], [1, 0], epochs=3)
    model.predict(["what a film"])          # logits, (batch, num_classes)
    model.classify(["what a film"])         # label_id, probabilities (and cut), as exported
    model.save("sst2.keras"); model.export("exported/sst2")
"""

import keras
import numpy as np
import tensorflow as tf

from keras_bert import serving
from keras_bert.model.config import whole_number
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.model.heads import ClassifierHead, FoldChoices, MultipleChoiceHead
from keras_bert.model.pooling import AttendWindows, CombineWindows
from keras_bert.models.pretrained import load_pretrained
from keras_bert.models.task import BertTask
from keras_bert.text.preprocessing import BertMultipleChoicePreprocessor, BertPreprocessor
from keras_bert.text.windows import BertWindowsPreprocessor
from keras_bert.training import batching
from keras_bert.training.batching import check_class_ids, class_ids

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")


def class_outputs(logits):
    """Logits -> `label_id` (the argmax) and `probabilities` (softmax), as exports return them."""
    logits = tf.cast(logits, tf.float32)
    return {"label_id": tf.argmax(logits, axis=-1, output_type=tf.int32),
            "probabilities": tf.nn.softmax(logits, axis=-1)}  # fmt: skip


@_SERIALIZABLE
class BertClassifier(BertTask):
    """The pooled [CLS] output, dropout and a dense layer: float32 (batch, num_classes) logits.

    `num_classes=1` is regression (one unbounded score, as STS-B needs; mean squared error).

    With a `BertWindowsPreprocessor` (`from_checkpoint(..., max_windows=N)`) the classifier
    reads whole texts: each window of a text is encoded on its own, and `window_pooling`
    makes the text's logits: "mean" (the default) or "max" of the windows' logits, or
    "attention", the head on a learned softmax-weighted sum of the windows' [CLS] vectors.
    A text is one example in training too: its windows share its label and its one loss.
    Its inputs are then int32 (batch, windows, seq); `classify` and an export also return
    `cut` (the text was longer than `max_windows` windows).

    Args:
      encoder: a `BertEncoder`.
      preprocessor: a `BertPreprocessor` (its `num_segments` says single texts or pairs), or
        a `BertWindowsPreprocessor`.
      num_classes: classes, or 1 for regression.
      labels: optional names of the classes, which an export returns beside their ids.
      dropout: dropout before the dense layer (default: the encoder's hidden dropout).
      window_pooling: "mean", "max" or "attention": how windows make a text's logits
        (windows only).
    """

    ENCODER_OUTPUTS = ("pooled_output_only",)

    def __init__(self, encoder, preprocessor, num_classes=2, labels=None, dropout=None,
                 window_pooling="mean", **kwargs):  # fmt: skip
        num_classes = whole_number(num_classes, 1, "num_classes", " (1 for regression)")
        if labels is not None and len(labels) != num_classes:
            raise ValueError(f"{len(labels)} labels for {num_classes} classes")
        if labels is not None and len({str(label) for label in labels}) < len(labels):
            raise ValueError(f"the label names repeat ({list(labels)}): an export would answer "
                             "one name for two classes")  # fmt: skip
        dropout = encoder.config.hidden_dropout_prob if dropout is None else dropout
        # === Layers ===
        head = ClassifierHead(num_classes, dropout, encoder.config.initializer_range,
                              dtype=encoder.policy, name="classifier")  # fmt: skip
        windowed = isinstance(preprocessor, BertWindowsPreprocessor)
        if window_pooling not in ("mean", "max", "attention"):
            raise ValueError(f"window_pooling must be 'mean', 'max' or 'attention', got "
                             f"{window_pooling!r}")  # fmt: skip
        if not windowed:
            combine = None
        elif window_pooling == "attention":
            combine = AttendWindows(dtype=encoder.policy, name="windows")
        else:
            combine = CombineWindows(window_pooling, dtype="float32", name="windows")
        # === Graph ===
        shape = (None, None) if windowed else (None,)  # (windows, seq) or (seq,) an example
        inputs = {name: keras.Input(shape, dtype="int32", name=name) for name in INPUT_NAMES}
        encoded = {n: FoldChoices(name=f"fold_{n}")(x) for n, x in inputs.items()} if (
            windowed) else inputs  # fmt: skip
        # pooled_output_only: the last block computes the [CLS] token alone (encoder.py).
        pooled = encoder(encoded)["pooled_output_only"]
        if isinstance(combine, AttendWindows):  # windows' vectors -> a text's, then the head
            outputs = head(combine(pooled, inputs["input_mask"]))
        else:
            outputs = head(pooled)
            outputs = combine(outputs, inputs["input_mask"]) if windowed else outputs
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.head = head
        self.num_classes = num_classes
        self.labels = None if labels is None else [str(label) for label in labels]
        self.dropout = dropout
        self.window_pooling = window_pooling

    @property
    def windowed(self):
        """Whether the classifier reads texts in windows (a `BertWindowsPreprocessor`)."""
        return isinstance(self.preprocessor, BertWindowsPreprocessor)

    @classmethod
    def from_checkpoint(cls, path, num_classes=2, *, sequence_length=128, num_segments=1,
                        do_lower_case=None, max_windows=None, stride=None, **kwargs):  # fmt: skip
        """A classifier on a pre-trained checkpoint (Google, Hugging Face or keras-bert folder)
        with a new head; `num_segments=2` for sentence pairs. With `max_windows`, texts are
        read whole, in up to that many windows of `sequence_length` tokens, each `stride`
        tokens after the one before (`BertWindowsPreprocessor`); without, they are cut at
        `sequence_length`."""
        encoder, tokenizer, _ = load_pretrained(path, do_lower_case, sequence_length)
        if max_windows is None:
            if stride is not None:
                raise ValueError("stride is the step between windows: pass max_windows too")
            preprocessor = BertPreprocessor.from_tokenizer(tokenizer, sequence_length,
                                                           num_segments=num_segments)  # fmt: skip
        else:
            preprocessor = BertWindowsPreprocessor.from_tokenizer(
                tokenizer, sequence_length, num_segments=num_segments, max_windows=max_windows,
                stride=stride)  # fmt: skip
        return cls(encoder, preprocessor, num_classes, **kwargs)

    def encode_targets(self, y):
        """Labels given in memory as names (a model made with `labels`) -> their class ids."""
        values = np.asarray(y)
        if self.labels is None or values.dtype.kind not in "SU":
            return y
        index = {name: i for i, name in enumerate(self.labels)}
        names = [v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)]
        for row, name in enumerate(names):
            if name not in index:
                raise ValueError(f"y[{row}] is {name!r}, not one of the model's labels "
                                 f"{self.labels}")  # fmt: skip
        return np.array([index[n] for n in names], "int32").reshape(values.shape)

    def check_targets(self, x, y):
        if self.num_classes > 1:
            return check_class_ids(y, self.num_classes)
        values = np.asarray(y)
        if values.dtype.kind not in "iuf" or not np.isfinite(values.astype("float64")).all():
            raise ValueError("y must be finite numbers (regression targets)")
        if values.size != len(values):  # Keras's loss broadcast (n, 2) against (n, 1)
            raise ValueError(f"y has shape {values.shape}: give one regression target per "
                             "example")  # fmt: skip

    def preprocess_batch(self, x, y=None, sample_weight=None):
        inputs = self.preprocessor(x)  # first: a mistake in x is the one to name
        if y is not None and y.dtype == tf.string:  # a Dataset's labels, as names
            if self.labels is None:
                raise ValueError("labels given as strings need a model made with their names, "
                                 "labels=[...]; or give class ids")  # fmt: skip
            y = batching.ids_of_names(tf.reshape(y, [-1]), self.labels, "label")
        if y is not None and self.num_classes > 1:
            y = class_ids(y, self.num_classes)
        elif y is not None:
            y = tf.cast(y, tf.float32)
            tf.debugging.assert_equal(tf.size(y), tf.shape(y)[0],
                                      message="give one regression target per example")
            y = tf.reshape(y, [-1])  # one rank for the traced step, whatever the batch's
            tf.debugging.assert_all_finite(y, "a regression target is not a finite number")
        return inputs, y, sample_weight

    def default_loss(self):
        if self.num_classes == 1:
            return keras.losses.MeanSquaredError()
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def class_count(self):
        return None if self.num_classes == 1 else self.num_classes

    def default_metrics(self):
        return [] if self.num_classes == 1 else [keras.metrics.SparseCategoricalAccuracy("accuracy")]

    def serving_outputs(self, logits):
        """Logits -> what an export returns: `score` for regression, else `label_id`,
        `probabilities` and (with label names) `label`."""
        if self.num_classes == 1:
            return {"score": tf.cast(logits, tf.float32)[:, 0]}
        outputs = class_outputs(logits)
        if self.labels is not None:
            outputs["label"] = tf.gather(tf.constant(self.labels), outputs["label_id"])
        return outputs

    def answer(self, *texts):
        """tf.string (batch,) texts (a second tensor for pairs) -> what an export answers, in
        the graph: `serving_outputs`, and with windows `cut` bool (batch,)."""
        if not self.windowed:
            return self.serving_outputs(self(self.preprocessor(list(texts)), training=False))
        inputs, cut = self.preprocessor.windows(list(texts))
        return {**self.serving_outputs(self(inputs, training=False)), "cut": cut}

    def classify(self, x, batch_size=None, verbose="auto"):
        """Raw texts (a list of strings, or a pair of lists) -> what the export answers, as a
        dict of NumPy arrays over the texts: `label_id` int32 and `probabilities` float32
        (texts, num_classes), `label` (str, with label names), or `score` for regression;
        and `cut` bool, with windows: the text was longer than `max_windows` windows."""
        results = list(self.map_batches(self.answer, x, batch_size, verbose, unit="text"))
        merged = tf.nest.map_structure(lambda *parts: np.concatenate(parts), *results)
        if "label" in merged:
            merged["label"] = np.array([name.decode("utf-8") for name in merged["label"]], object)
        return merged

    def serving_functions(self):
        ids_shape = (None, None, None) if self.windowed else (None, None)
        return {
            "serving_default": (self.answer, serving.text_specs(self.preprocessor.text_names)),
            "serve_token_ids": self.token_id_function(self.serving_outputs, ids_shape),
        }

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "labels": self.labels,
                "dropout": self.dropout, "window_pooling": self.window_pooling}  # fmt: skip


@_SERIALIZABLE
class BertMultipleChoice(BertTask):
    """One score per choice (SWAG): each ending is packed with its context and encoded on its
    own; float32 (batch, num_choices) logits, soft-maxed across the choices.

    Call `fit`/`predict` with x = (contexts, endings): a list of strings and a list of
    `num_choices`-string lists; y the index of the right ending.
    """

    ENCODER_OUTPUTS = ("pooled_output_only",)

    def __init__(self, encoder, preprocessor, num_choices=4, dropout=None, **kwargs):
        num_choices = whole_number(num_choices, 2, "num_choices")
        dropout = encoder.config.hidden_dropout_prob if dropout is None else dropout
        # === Layers ===
        folds = {n: FoldChoices(name=f"fold_{n}") for n in INPUT_NAMES}
        head = MultipleChoiceHead(num_choices, dropout, encoder.config.initializer_range,
                                  dtype=encoder.policy, name="choices")  # fmt: skip
        # === Graph ===
        inputs = {n: keras.Input((num_choices, None), dtype="int32", name=n) for n in INPUT_NAMES}
        folded = {n: folds[n](x) for n, x in inputs.items()}  # (batch * choices, seq)
        outputs = head(encoder(folded)["pooled_output_only"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.head = head
        self.num_choices = num_choices
        self.dropout = dropout

    @classmethod
    def from_checkpoint(cls, path, num_choices=4, *, sequence_length=128, do_lower_case=None,
                        **kwargs):  # fmt: skip
        encoder, tokenizer, _ = load_pretrained(path, do_lower_case, sequence_length)
        preprocessor = BertMultipleChoicePreprocessor.from_tokenizer(
            tokenizer, sequence_length, num_choices=num_choices)
        return cls(encoder, preprocessor, num_choices, **kwargs)

    def check_targets(self, x, y):
        check_class_ids(y, self.num_choices, what="choice")

    def preprocess_batch(self, x, y=None, sample_weight=None):
        if y is not None:
            y = class_ids(y, self.num_choices, what="choice")
        return self.preprocessor(x), y, sample_weight

    def default_loss(self):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def class_count(self):
        return self.num_choices

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy("accuracy")]

    def serving_functions(self):
        def from_choices(context, endings):
            return class_outputs(self(self.preprocessor((context, endings)), training=False))

        specs = [tf.TensorSpec([None], tf.string, name="context"),
                 tf.TensorSpec([None, self.num_choices], tf.string, name="endings")]  # fmt: skip
        return {
            "serving_default": (from_choices, specs),
            "serve_token_ids": self.token_id_function(class_outputs,
                                                      (None, self.num_choices, None)),
        }

    def warmup_requests(self):
        return [{"context": ["A short warm-up sentence."],
                 "endings": [["It ends.", "", "It goes on and on.", "Stop."][: self.num_choices]
                             + ["."] * max(0, self.num_choices - 4)]}]  # fmt: skip

    def get_config(self):
        return {**super().get_config(), "num_choices": self.num_choices, "dropout": self.dropout}
