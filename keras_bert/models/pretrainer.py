"""Masked-LM + next-sentence pre-training as a task model, on raw sentence pairs.

    model = keras_bert.BertPretrainer.from_checkpoint(path)     # heads kept when it has them
    a, b, is_random = keras_bert.sentence_pairs(documents, seed=0)
    model.fit((a, b), is_random, epochs=1)
    model.save_checkpoint("pretrained", format="huggingface")  # for any task's from_checkpoint

Masks are drawn in the input pipeline each time a pair is seen (new masks every epoch, as
RoBERTa's dynamic masking); pre-made instances (tasks.create_pretraining_data) go to `fit` as
batches of token ids and are used as they are.
"""

import os
import tempfile

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from keras_bert import checkpoints
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.model.heads import MaskedLMHead, NextSentenceHead
from keras_bert.models.pretrained import check_sequence_length
from keras_bert.models.static_steps import pad_last_axis
from keras_bert.models.task import BertTask
from keras_bert.text.preprocessing import BertPreprocessor
from keras_bert.text.tokenizer import BertTokenizer
from keras_bert.training import losses
from keras_bert.training.batching import check_class_ids, class_ids
from keras_bert.training.metrics import SparseAccuracyFromLogits

_SERIALIZABLE = keras.saving.register_keras_serializable(package="keras_bert")
MASKED_LM_INPUTS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


@_SERIALIZABLE
class BertPretrainingPreprocessor(BertPreprocessor):
    """Packs (A, B) text pairs and chooses the tokens to predict: `masked_lm_prob` of the real
    tokens (never [CLS], [SEP] or padding), at most `max_predictions` per sequence; of those,
    80% become [MASK], 10% a random token and 10% stay, as in the original recipe.

    Call with (first texts, second texts), tf.string (batch,) each; returns the encoder inputs
    (the word ids corrupted) plus `masked_lm_positions`, `masked_lm_ids` (the original ids
    there), int32 (batch, predictions), and `masked_lm_weights`, float32 (0 at padded slots).
    """

    # Called eagerly, it runs op by op: a traced graph would keep drawing from its random ops'
    # own state, and masking would no longer repeat after keras.utils.set_random_seed.
    traced_when_eager = False

    def __init__(self, tokenizer, packer, masked_lm_prob=0.15, max_predictions=20, **kwargs):
        kwargs["num_segments"] = 2
        super().__init__(tokenizer, packer, **kwargs)
        if not 0 < masked_lm_prob < 1 or max_predictions < 1:
            raise ValueError(f"masked_lm_prob must be in (0, 1) and max_predictions at least 1; "
                             f"got {masked_lm_prob} and {max_predictions}")  # fmt: skip
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions = max_predictions

    def call(self, x):
        inputs = super().call(x)
        lengths = tf.reduce_sum(inputs["input_mask"], axis=1)
        word_ids = tf.RaggedTensor.from_tensor(inputs["input_word_ids"], lengths=lengths)
        special = [self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id]
        selector = tf_text.RandomItemSelector(self.max_predictions, self.masked_lm_prob,
                                              unselectable_ids=special)  # fmt: skip
        chooser = tf_text.MaskValuesChooser(len(self.tokenizer.vocabulary),
                                            self.tokenizer.mask_id, 0.8, 0.1)  # fmt: skip
        corrupted, positions, originals = tf_text.mask_language_model(word_ids, selector, chooser)
        inputs["input_word_ids"] = corrupted.to_tensor(
            self.tokenizer.pad_id, shape=tf.shape(inputs["input_word_ids"]))
        inputs["masked_lm_positions"] = tf.cast(positions.to_tensor(0), tf.int32)
        inputs["masked_lm_ids"] = tf.cast(originals.to_tensor(0), tf.int32)
        inputs["masked_lm_weights"] = tf.ones_like(positions, tf.float32).to_tensor(0.0)
        return inputs

    def get_config(self):
        config = {**super().get_config(), "masked_lm_prob": self.masked_lm_prob,
                  "max_predictions": self.max_predictions}  # fmt: skip
        del config["num_segments"]
        return config


@_SERIALIZABLE
class BertPretrainer(BertTask):
    """Encoder + masked-LM head (tied to the token embedding) + next-sentence head.

    Inputs: the encoder's three inputs and `masked_lm_positions`, int32 (batch, predictions).
    Outputs: `masked_lm` float32 (batch, predictions, vocab_size) logits at those positions and
    `next_sentence` float32 (batch, 2) logits (0: B follows A, 1: B is random). The loss is the
    sum of the two cross-entropies, the masked-LM one weighted by `masked_lm_weights`.

    `fit` takes x = (first texts, second texts) and y = next-sentence labels (see
    `sentence_pairs`), or batches of pre-made instances: (inputs, {"masked_lm": ids,
    "next_sentence": labels}, {"masked_lm": weights, ...}) with `masked_lm_positions` in inputs.
    `preprocessor` may be None for the latter.
    """

    def __init__(self, encoder, preprocessor=None, **kwargs):
        config = encoder.config
        # === Layers ===
        masked_lm = MaskedLMHead(encoder.embeddings.word_embeddings, config.hidden_act,
                                 config.initializer_range, name="masked_lm")  # fmt: skip
        next_sentence = NextSentenceHead(config.initializer_range, name="next_sentence")
        # === Graph ===
        inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in INPUT_NAMES}
        inputs["masked_lm_positions"] = keras.Input(
            (None,), dtype="int32", name="masked_lm_positions"
        )
        outputs = encoder({name: inputs[name] for name in INPUT_NAMES})
        super().__init__(inputs=inputs, outputs={
            "masked_lm": masked_lm(outputs["sequence_output"], inputs["masked_lm_positions"]),
            "next_sentence": next_sentence(outputs["pooled_output"]),
        }, **kwargs)  # fmt: skip
        # === Config ===
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.masked_lm = masked_lm
        self.next_sentence = next_sentence

    @classmethod
    def from_checkpoint(cls, path, *, sequence_length=128, masked_lm_prob=0.15,
                        max_predictions=20, do_lower_case=None, **kwargs):  # fmt: skip
        """A pretrainer on a checkpoint, with its masked-LM and next-sentence heads when it has
        them (fresh heads otherwise)."""
        check_sequence_length(sequence_length, checkpoints.read_config(path))
        checkpoint = checkpoints.load_checkpoint(path, do_lower_case)
        tokenizer = BertTokenizer(checkpoint.vocab_file, checkpoint.do_lower_case)
        preprocessor = BertPretrainingPreprocessor.from_tokenizer(
            tokenizer, sequence_length, masked_lm_prob=masked_lm_prob,
            max_predictions=max_predictions)  # fmt: skip
        model = cls(checkpoint.encoder, preprocessor, **kwargs)
        for ours, theirs in ((model.masked_lm, checkpoint.masked_lm),
                             (model.next_sentence, checkpoint.next_sentence)):  # fmt: skip
            if theirs is not None:
                ours.set_weights(theirs.get_weights())
        return model

    def preprocess_batch(self, x, y=None, sample_weight=None):
        if self.preprocessor is None:
            raise ValueError("this pretrainer has no preprocessor: pass batches of token ids "
                             "(pre-made instances), or build it with from_checkpoint")  # fmt: skip
        if sample_weight is not None:
            raise ValueError("BertPretrainer weighs its predictions itself; pass no sample_weight")
        inputs = self.preprocessor(x)
        x = {name: inputs[name] for name in (*INPUT_NAMES, "masked_lm_positions")}
        if y is None:
            return x, None, None
        labels = class_ids(y, 2, what="next-sentence label")
        weights = inputs["masked_lm_weights"]
        return (x, {"masked_lm": inputs["masked_lm_ids"], "next_sentence": labels},
                {"masked_lm": weights, "next_sentence": tf.ones_like(weights[:, 0])})  # fmt: skip

    takes_sample_weight = False

    def pad_for_xla(self, x, y, sample_weight):
        """Also the masked-LM predictions, to max_predictions a sequence (padded ones weigh 0),
        as the original's TPU recipe (max_predictions_per_seq)."""
        x, y, sample_weight = super().pad_for_xla(x, y, sample_weight)
        count = getattr(self.preprocessor, "max_predictions", None)
        if count is None:  # pre-made instances: padded when they were made
            return x, y, sample_weight
        x = {**x, "masked_lm_positions": pad_last_axis(x["masked_lm_positions"], count)}
        if y is not None:
            y = {**y, "masked_lm": pad_last_axis(y["masked_lm"], count)}
            sample_weight = {**sample_weight,
                             "masked_lm": pad_last_axis(sample_weight["masked_lm"], count)}
        return x, y, sample_weight

    def check_targets(self, x, y):
        if not isinstance(y, dict):  # pre-made instances bring their masked-LM targets too
            check_class_ids(y, 2, what="next-sentence label")

    def fit(self, x=None, y=None, *args, **kwargs):
        if y is None and not isinstance(x, tf.data.Dataset):
            raise ValueError("BertPretrainer.fit needs y: the next-sentence labels, 0 where the "
                             "second text follows the first, 1 where it is random")  # fmt: skip
        return super().fit(x, y, *args, **kwargs)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        if metrics == "auto":  # accuracy over real predictions only, so weighted
            metrics = None
            # Over the vocabulary, keras_bert's form of Keras's accuracy is the faster.
            kwargs.setdefault("weighted_metrics", {
                "masked_lm": [SparseAccuracyFromLogits("accuracy")],
                "next_sentence": [keras.metrics.SparseCategoricalAccuracy("accuracy")],
            })  # fmt: skip
        super().compile(optimizer, loss, metrics, **kwargs)

    def default_loss(self):
        # The masked-LM loss is averaged over real predictions, not over padded slots too; over
        # the vocabulary, keras_bert's form of Keras's loss is the faster (losses.py).
        return {
            "masked_lm": losses.SparseCrossEntropyFromLogits(reduction="mean_with_sample_weight"),
            "next_sentence": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        }

    def save_checkpoint(self, folder, format=checkpoints.HUGGING_FACE):
        """Writes the encoder and both heads as a Google or Hugging Face checkpoint (with the
        vocabulary), which every task model's `from_checkpoint` takes."""
        if self.preprocessor is None:
            raise ValueError("this pretrainer has no preprocessor, so no vocabulary to save; "
                             "use keras_bert.save_checkpoint with the vocabulary file")  # fmt: skip
        tokenizer = self.preprocessor.tokenizer
        with tempfile.TemporaryDirectory() as assets:
            tokenizer.save_assets(assets)
            checkpoints.save_checkpoint(checkpoints.BertCheckpoint(
                self.encoder, os.path.join(assets, "vocab.txt"), tokenizer.do_lower_case,
                self.masked_lm, self.next_sentence), folder, format)  # fmt: skip

    def export(self, filepath, version=None, **kwargs):
        raise ValueError("a pretrainer has nothing to serve: write it with save_checkpoint and "
                         "fine-tune a task model from that checkpoint")  # fmt: skip
