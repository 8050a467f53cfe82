"""Token classification (CoNLL-style named entities) on raw strings.

    model = keras_bert.BertTokenClassifier.from_checkpoint(path, tags=["O", "B-PER", "I-PER"])
    model.fit(["Ann met Bob"], [["B-PER", "O", "B-PER"]], epochs=3)
    model.predict(["Ann met Bob"])["entities"]  # [[{"text": "Ann", "type": "PER", ...}, ...]]

Words are split at white space; each word's tag is learnt and predicted on its first word piece,
and the tags (IOB2) are read as entities with character offsets inside the TensorFlow graph
(keras_bert/models/tagging.py), the same code in `predict` and an export.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_bert import serving
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.model.heads import TokenClassifierHead
from keras_bert.models.pretrained import load_pretrained
from keras_bert.models.static_steps import pad_last_axis
from keras_bert.models.tagging import IGNORE, WordTagger
from keras_bert.models.task import BertTask
from keras_bert.training import batching


@keras.saving.register_keras_serializable(package="keras_bert")
class BertTokenClassifier(BertTask):
    """Dropout and a dense layer on every token: float32 (batch, seq, len(tags)) logits.

    Args:
      encoder: a `BertEncoder`.
      preprocessor: a `WordTagger` (tokenizer, packer and the IOB2 tag set, "O" first or not).
      dropout: before the dense layer (default: the encoder's hidden dropout).

    `fit` takes x, a list of sentences, and y, each sentence's word tags (lists of str).
    """

    ENCODER_OUTPUTS = ("sequence_output",)

    trains_pooler = False
    decodes_predictions = True

    def __init__(self, encoder, preprocessor, dropout=None, **kwargs):
        dropout = encoder.config.hidden_dropout_prob if dropout is None else dropout
        # === Layers ===
        head = TokenClassifierHead(len(preprocessor.tags), dropout,
                                   encoder.config.initializer_range, dtype=encoder.policy,
                                   name="tags")  # fmt: skip
        # === Graph ===
        inputs = {n: keras.Input((None,), dtype="int32", name=n) for n in INPUT_NAMES}
        super().__init__(inputs=inputs, outputs=head(encoder(inputs)["sequence_output"]),
                         **kwargs)  # fmt: skip
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.head = head
        self.dropout = dropout

    @classmethod
    def from_checkpoint(cls, path, tags, *, sequence_length=128, do_lower_case=None,
                        max_windows=1, stride=None, **kwargs):  # fmt: skip
        """A tagger on a pre-trained checkpoint with a new head. With `max_windows` > 1, texts
        of any length are read in up to that many windows of `sequence_length` tokens, each
        `stride` tokens after the one before (`WordTagger`)."""
        encoder, tokenizer, _ = load_pretrained(path, do_lower_case, sequence_length)
        tagger = WordTagger.from_tokenizer(tokenizer, sequence_length, tags=tags,
                                           max_windows=max_windows, stride=stride)  # fmt: skip
        return cls(encoder, tagger, **kwargs)

    @property
    def tags(self):
        return self.preprocessor.tags

    def default_loss(self):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE)

    def encode_targets(self, y):
        return y if isinstance(y, tf.RaggedTensor) else self.tag_ids(y)  # (ids already)

    def check_targets(self, x, y):
        """One line for the first sentence whose tags (int ragged, from `tag_ids`) are not one
        per word."""
        counts = self.preprocessor.word_counts(self.preprocessor.segments(x)[0]).numpy()
        wrong = np.flatnonzero(counts != y.row_lengths().numpy())
        if wrong.size:
            row = int(wrong[0])
            raise ValueError(f"example {row}: {int(y.row_lengths()[row])} tags for "
                             f"{counts[row]} words (words are split at white space)")

    def tag_ids(self, word_tags):
        """Lists of tag strings -> int32 ragged ids; a tag the model lacks is an error."""
        index = {tag: i for i, tag in enumerate(self.tags)}
        for row, tags in enumerate(word_tags):
            if isinstance(tags, (str, bytes)):  # its characters would be read as tags
                raise ValueError(f"example {row}: give its tags as a list, one per word, not "
                                 f"one string ({tags!r})")  # fmt: skip
            unknown = [t for t in tags if t not in index]
            if unknown:
                raise ValueError(f"example {row}: tag {unknown[0]!r} is not one of the model's "
                                 f"tags {self.tags}")  # fmt: skip
        return tf.ragged.constant([[index[t] for t in tags] for tags in word_tags],
                                  dtype=tf.int32, row_splits_dtype=tf.int64)  # fmt: skip

    def preprocess_batch(self, x, y=None, sample_weight=None):
        sentences = self.preprocessor.segments(x)[0]
        if sample_weight is not None:  # a sentence's weight on each of its tokens' losses
            sample_weight = tf.gather(tf.reshape(tf.cast(sample_weight, tf.float32), (-1, 1)),
                                      self.preprocessor.windows_of(sentences))  # fmt: skip
        if y is None:
            return self.preprocessor.encode(sentences), None, sample_weight
        if not isinstance(y, tf.RaggedTensor):  # a Dataset's: a dense one could hold padding
            raise ValueError("a tf.data.Dataset's tags must be ragged, (batch, (words)), one "
                             "per word (tf.ragged.constant), not a tensor of shape "
                             f"{y.shape}")  # fmt: skip
        if y.dtype == tf.string:  # a Dataset's tags, as strings (tags given in memory: tag_ids)
            y = y.with_flat_values(batching.ids_of_names(y.flat_values, self.tags, "tag"))
        inputs, labels = self.preprocessor.encode(sentences, y)
        return inputs, labels, sample_weight

    def pad_targets_for_xla(self, y, sample_weight, length):
        """Tags by position (batch, seq): padded with IGNORE."""
        return (None if y is None else pad_last_axis(y, length, IGNORE)), sample_weight

    def tag(self, sentences):
        """tf.string (batch,) -> `word_tags` (ragged tag ids) and the entities, padded:
        `entity_text`, `entity_type`, `entity_start`, `entity_end` (character offsets, -1 as
        padding), `num_entities`; in the graph."""
        return self.preprocessor.tag(self, sentences)

    def predict(self, x, batch_size=None, verbose="auto", **kwargs):
        """For a list of sentences: {"word_tags": a list of tag lists, "entities": per sentence
        a list of {"text", "type", "start", "end"} (character offsets [start, end))}."""
        names = np.array(self.tags)
        word_tags, entities = [], []
        for found in self.map_batches(self.tag, x, batch_size, verbose, unit="sentence"):
            word_tags += [names[row].tolist() for row in found["word_tags"]]
            for i, count in enumerate(found["num_entities"]):
                entities.append([{"text": found["entity_text"][i, j].decode("utf-8"),
                                  "type": found["entity_type"][i, j].decode("utf-8"),
                                  "start": int(found["entity_start"][i, j]),
                                  "end": int(found["entity_end"][i, j])}
                                 for j in range(count)])  # fmt: skip
        return {"word_tags": word_tags, "entities": entities}

    def serving_functions(self):
        def from_text(sentence):
            result = self.tag(sentence)
            del result["word_tags"]
            return result

        return {"serving_default": (from_text, serving.text_specs(("sentence",)))}

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout}
