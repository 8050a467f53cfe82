"""Sentence embeddings on raw strings: texts in, float32 vectors out, pooled as the checkpoint
was trained to pool them (sentence-transformers' files, where the folder has them).

    model = keras_bert.BertTextEmbedder.from_checkpoint(path)   # all-MiniLM-L6-v2, say
    vectors = model.predict(["A man plays a guitar.", "Stocks fell."])   # (2, 384), unit length
    model.similarity(["A man plays a guitar."], ["Someone plays music.", "Stocks fell."])
    model.fit((anchors, positives), epochs=1)          # in-batch negatives
    model.compile(loss=keras_bert.CoSENTLoss()); model.fit((texts1, texts2), scores)
    model.export("exported/embedder")                  # strings in, `embedding` out
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_bert import serving
from keras_bert.checkpoints import read_config
from keras_bert.checkpoints.sentence_transformers import sentence_settings
from keras_bert.model.config import whole_number
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.model.heads import FoldChoices
from keras_bert.model.pooling import SentenceVectors
from keras_bert.models.pretrained import load_pretrained
from keras_bert.models.task import BertTask
from keras_bert.text.preprocessing import BertTextsPreprocessor
from keras_bert.training.losses import CoSENTLoss, MultipleNegativesRankingLoss


@keras.saving.register_keras_serializable(package="keras_bert")
class BertTextEmbedder(BertTask):
    """The encoder's token vectors pooled into one float32 vector a text (`SentenceVectors`):
    the mean, max or first ([CLS]) token's vector, or the sum over the root of the count, and
    by default scaled to unit length.

    Inputs are int32 (batch, texts, seq), each text of an example packed on its own
    (`BertTextsPreprocessor`); outputs float32 (batch, texts, hidden). `predict` on a list of
    texts returns (texts, hidden); `similarity(a, b)` their cosine similarities.

    Training takes the texts of an example together: `fit((anchors, positives))` learns with
    in-batch negatives (`MultipleNegativesRankingLoss`, the default loss; hard negatives may
    follow as further lists), and `compile(loss=CoSENTLoss())` then `fit((first, second),
    scores)` from scored pairs.

    Args:
      encoder: a `BertEncoder`.
      preprocessor: a `BertTextsPreprocessor`.
      pooling: "mean", "max", "cls" or "mean_sqrt_len".
      normalize: whether vectors are scaled to unit length.
    """

    ENCODER_OUTPUTS = ("sequence_output",)

    trains_pooler = False  # "cls" pooling reads the first token's vector, not the pooler

    def __init__(self, encoder, preprocessor, pooling="mean", normalize=True, **kwargs):
        if not isinstance(normalize, (bool, np.bool_)):  # bool("no") is True
            raise TypeError(f"normalize must be True or False, got {normalize!r}")
        # === Layers ===
        vectors = SentenceVectors(pooling, normalize, dtype="float32", name="pooling")
        # === Graph ===
        inputs = {n: keras.Input((None, None), dtype="int32", name=n) for n in INPUT_NAMES}
        folded = {n: FoldChoices(name=f"fold_{n}")(x) for n, x in inputs.items()}
        outputs = vectors(encoder(folded)["sequence_output"], inputs["input_mask"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.pooling = pooling
        self.normalize = bool(normalize)

    @classmethod
    def from_checkpoint(cls, path, *, pooling=None, normalize=None, sequence_length=None,
                        do_lower_case=None, **kwargs):  # fmt: skip
        """An embedder on a Google, Hugging Face, keras-bert or sentence-transformers folder.

        Where the folder is a sentence-transformers model (modules.json), its pooling, its
        normalisation and its max_seq_length are the defaults; `pooling`, `normalize` and
        `sequence_length` override them. From a finished run's folder (its model.keras) the
        run's pooling and normalisation are. Elsewhere the defaults are "mean", True and the
        checkpoint's max_position_embeddings. Longer texts are cut at `sequence_length`."""
        settings = (sentence_settings(path) if os.path.isdir(path) else None) or {}
        path = settings.get("transformer", path)
        if sequence_length is None:
            sequence_length = settings.get("max_seq_length")
        if sequence_length is None:
            sequence_length = read_config(path).max_position_embeddings
        sequence_length = whole_number(sequence_length, 3, "sequence_length")
        encoder, tokenizer, run = load_pretrained(path, do_lower_case, sequence_length)
        if isinstance(run, BertTextEmbedder):  # a run's folder: its embedder's settings
            settings = {**settings, "pooling": run.pooling, "normalize": run.normalize}
        if pooling is None:
            pooling = settings.get("pooling") or "mean"
        if normalize is None:
            normalize = settings.get("normalize", True)
        preprocessor = BertTextsPreprocessor.from_tokenizer(tokenizer, sequence_length)
        return cls(encoder, preprocessor, pooling=pooling, normalize=normalize, **kwargs)

    # --- training ---

    def default_loss(self):
        return MultipleNegativesRankingLoss()

    def _require_targets(self, entry, x, y, name="x"):
        # Both losses compare texts that go together: one list of texts gave in-batch
        # negatives no positive, and TensorFlow's "Must have at least one class" mid-step.
        if isinstance(x, (list, np.ndarray)) and np.asarray(x, dtype=object).ndim == 1:
            raise ValueError(f"{entry} takes texts that go together: {name} as a tuple of lists "
                             "(anchors, positives[, negatives]), or pairs with their scores as "
                             "y for CoSENTLoss; got one list of texts")  # fmt: skip
        # In-batch negatives need no targets; scored pairs (CoSENT) do.
        if isinstance(self.loss, CoSENTLoss):
            super()._require_targets(entry, x, y, name=name)

    def check_targets(self, x, y):
        values = np.asarray(y)
        if values.dtype.kind not in "iuf" or not np.isfinite(values.astype("float64")).all():
            raise ValueError("y must be finite numbers (each pair's similarity score)")
        if values.size != len(values):
            raise ValueError(f"y has shape {values.shape}: give one score per pair")

    def preprocess_batch(self, x, y=None, sample_weight=None):
        inputs = self.preprocessor(x)
        if y is None:  # in-batch negatives read no targets; Keras's loss wants a tensor
            y = tf.zeros(tf.shape(inputs["input_word_ids"])[:1], tf.float32)
        else:
            y = tf.reshape(tf.cast(y, tf.float32), [-1])
        return inputs, y, sample_weight

    # --- vectors ---

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """Raw texts -> float32 vectors: (texts, hidden) for a list of texts, and
        (examples, texts, hidden) for a tuple of two or more lists (texts that go together).

        Texts in memory (lists, arrays) go through `map_batches`, one traced graph a batch
        of `batch_size` (default 32) called from Python, where Keras's `predict` would build
        a dataset and its loop on every call (the cost that dominates one text a call); a
        tf.data.Dataset, a tf.distribute strategy or an XLA-compiled model takes Keras's
        `predict`."""
        if isinstance(x, (list, tuple, np.ndarray)) and not kwargs and (
                self._preprocesses_in_step()):  # fmt: skip
            vectors = np.concatenate(list(self.map_batches(self._vectors_of, x, batch_size,
                                                           verbose, unit="text")))  # fmt: skip
        else:
            vectors = super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        return vectors[:, 0] if vectors.shape[1] == 1 else vectors

    def _vectors_of(self, *texts):
        """tf.string (batch,) tensors, one for each text of an example -> float32
        (batch, texts, hidden), in the graph."""
        return self(self.preprocessor(list(texts)), training=False)

    def embed(self, texts):
        """tf.string (batch,) -> {"embedding": float32 (batch, hidden)}, in the graph."""
        return {"embedding": self._vectors_of(texts)[:, 0]}

    def similarity(self, a, b, batch_size=None):
        """Cosine similarities, float32 (len(a), len(b)), of texts a and texts b (lists of
        strings, or vectors that `predict` returned)."""
        a, b = (self._vectors(v, batch_size) for v in (a, b))
        a, b = (v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in (a, b))
        return (a @ b.T).astype("float32")

    def _vectors(self, values, batch_size):
        array = np.asarray(values) if not isinstance(values, tf.Tensor) else values.numpy()
        if array.dtype.kind == "f":
            if array.ndim != 2 or array.shape[1] != self.encoder.config.hidden_size:
                raise ValueError(f"vectors of shape {array.shape}: give (count, "
                                 f"{self.encoder.config.hidden_size}), or texts")  # fmt: skip
            return array
        return self.predict(values, batch_size=batch_size, verbose=0)

    # --- export ---

    def head_is_untrained(self):
        """False: the embedder adds no weights to its encoder, whose vectors are its answers."""
        return False

    def serving_functions(self):
        return {
            "serving_default": (self.embed, serving.text_specs(("sentence",))),
            "serve_token_ids": self.token_id_function(lambda v: {"embedding": v[:, 0]},
                                                      (None, None, None)),
        }

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling, "normalize": self.normalize}
