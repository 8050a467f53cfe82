"""A cross-encoder re-ranker on raw strings: each (query, candidate) pair is read together and
scored, and a query's candidates are ranked by their scores.

    model = keras_bert.BertReranker.from_checkpoint(path)
    model.fit((queries, passages), relevant)     # relevant: 1 or 0 (or a grade in [0, 1])
    model.rank(["who wrote it?"], [["Ann wrote it.", "It rained.", "Bob read it."]])
    # {"scores": (1, 3) float32 in [0, 1], "order": (1, 3) int32, best candidate first}
    model.export("exported/reranker")              # query and candidates in, scores out
"""

import keras
import numpy as np
import tensorflow as tf

from keras_bert.models.classifier import BertClassifier
from keras_bert.models.pretrained import load_pretrained
from keras_bert.text.preprocessing import BertPreprocessor


@keras.saving.register_keras_serializable(package="keras_bert")
class BertReranker(BertClassifier):
    """The pair classifier with one output: a (query, candidate) pair's relevance is
    sigmoid(logit), learnt with binary cross-entropy from targets in [0, 1]. `predict` on
    pairs returns the logits, float32 (pairs, 1); `rank` and the export rank candidates.

    Args:
      encoder: a `BertEncoder`.
      preprocessor: a `BertPreprocessor` with `num_segments=2` (query first).
      dropout: dropout before the dense layer (default: the encoder's hidden dropout).
    """

    def __init__(self, encoder, preprocessor, dropout=None, **kwargs):
        if getattr(preprocessor, "num_segments", None) != 2:
            raise ValueError("BertReranker reads (query, candidate) pairs: give a "
                             "preprocessor with num_segments=2")  # fmt: skip
        super().__init__(encoder, preprocessor, num_classes=1, dropout=dropout, **kwargs)

    @classmethod
    def from_checkpoint(cls, path, *, sequence_length=128, do_lower_case=None, **kwargs):
        """A re-ranker on a pre-trained checkpoint (Google, Hugging Face or keras-bert folder)
        with a new head; pairs are cut at `sequence_length` tokens together."""
        encoder, tokenizer, _ = load_pretrained(path, do_lower_case, sequence_length)
        preprocessor = BertPreprocessor.from_tokenizer(tokenizer, sequence_length,
                                                       num_segments=2)  # fmt: skip
        return cls(encoder, preprocessor, **kwargs)

    def check_targets(self, x, y):
        values = np.asarray(y)
        if values.dtype.kind not in "iufb" or not np.isfinite(values.astype("float64")).all() \
                or values.min(initial=0) < 0 or values.max(initial=0) > 1:  # fmt: skip
            raise ValueError("y must be relevances between 0 and 1 (1: the candidate answers "
                             "the query), one a pair")  # fmt: skip
        if values.size != len(values):
            raise ValueError(f"y has shape {values.shape}: give one relevance a pair")

    def default_loss(self):
        return keras.losses.BinaryCrossentropy(from_logits=True)

    def serving_outputs(self, logits):
        return {"score": tf.sigmoid(tf.cast(logits, tf.float32))[:, 0]}

    def ranked(self, queries, candidates):
        """tf.string queries (batch,) and candidates (batch, count) -> `scores` float32
        (batch, count), each pair's relevance, and `order` int32 (batch, count), the
        candidates' indices from the most relevant (ties in the given order); in the graph."""
        count = tf.shape(candidates)[1]
        pairs = [tf.repeat(queries, count), tf.reshape(candidates, [-1])]
        logits = self(self.preprocessor(pairs), training=False)
        scores = tf.reshape(self.serving_outputs(logits)["score"], [-1, count])
        order = tf.argsort(scores, axis=-1, direction="DESCENDING", stable=True)
        return {"scores": scores, "order": tf.cast(order, tf.int32)}

    def rank(self, queries, candidates, batch_size=32):
        """Ranks each query's candidates: queries a list of strings, candidates a list of as
        many lists of strings, each of one length (pad with "" and ignore its place).
        Returns {"scores": float32 (queries, count), "order": int32 (queries, count)}, NumPy;
        `batch_size` pairs are scored at a time."""
        queries = np.asarray(queries, dtype=object)
        if queries.ndim != 1:
            raise ValueError("queries must be a list of strings ([query] for one), got "
                             f"{'a string' if queries.ndim == 0 else f'shape {queries.shape}'}")
        if isinstance(candidates, (str, bytes)) or any(isinstance(c, (str, bytes))
                                                      for c in candidates):  # fmt: skip
            raise ValueError("candidates must be a list of lists of strings, one list a query "
                             "([[a, b, c]] for one query)")  # fmt: skip
        rows = [list(c) for c in candidates]
        if len(rows) != len(queries):
            raise ValueError(f"give one list of candidates a query: {len(queries)} queries, "
                             f"{len(rows)} lists")  # fmt: skip
        if len({len(r) for r in rows}) > 1:
            raise ValueError(f"the candidate lists hold {sorted({len(r) for r in rows})} "
                             "strings: give each query as many (pad with \"\")")  # fmt: skip
        count = len(rows[0]) if rows else 0
        traced = self.traced(self.ranked)
        step = max(1, batch_size // max(count, 1))
        parts = [traced(tf.constant(queries[i : i + step].tolist(), tf.string),
                        tf.constant(rows[i : i + step], tf.string))
                 for i in range(0, len(rows), step)] if count else []  # fmt: skip
        if not parts:
            return {"scores": np.zeros((len(rows), count), "float32"),
                    "order": np.zeros((len(rows), count), "int32")}  # fmt: skip
        return {key: np.concatenate([part[key].numpy() for part in parts])
                for key in ("scores", "order")}  # fmt: skip

    def serving_functions(self):
        specs = [tf.TensorSpec([None], tf.string, name="query"),
                 tf.TensorSpec([None, None], tf.string, name="candidates")]  # fmt: skip
        return {
            "serving_default": (self.ranked, specs),
            "serve_token_ids": self.token_id_function(self.serving_outputs),
        }

    def warmup_requests(self):
        return [{"query": ["Who warms up?"], "candidates": [["The server warms up.", ""]]},
                {"query": ["Who?", "What?"],
                 "candidates": [["A short one.", "Another, longer candidate passage.", ""]] * 2}]  # fmt: skip

    def get_config(self):
        config = super().get_config()
        for key in ("num_classes", "labels", "window_pooling"):
            del config[key]
        return config
