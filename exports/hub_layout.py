"""The preprocessor and the bare encoder as SavedModels in the TF Hub BERT layout.

Code written for TF Hub's BERT models (`hub.KerasLayer(preprocess_url)` then
`hub.KerasLayer(encoder_url)`) works with these unchanged:
  preprocess: strings -> input_word_ids, input_mask, input_type_ids (int32, padded to the
              export's sequence length); also `.tokenize` (strings -> ragged token ids) and
              `.bert_pack_inputs` (a list of one or two tokenized segments -> the same dict).
  encoder:    that dict -> pooled_output, sequence_output, encoder_outputs.
"""

import tensorflow as tf

from keras_bert import serving
from keras_bert.tokenizer import BertPacker


class Preprocessor(tf.Module):
    def __init__(self, tokenizer, sequence_length):
        super().__init__()
        self.tokenizer = tokenizer
        self.packer = BertPacker.from_tokenizer(tokenizer, sequence_length=sequence_length,
                                                pad_to_sequence_length=True)  # fmt: skip
        strings = serving.text_specs(["sentences"])
        segment = tf.RaggedTensorSpec([None, None], tf.int32)
        self.__call__ = tf.function(
            lambda s: self.packer(self.tokenizer(s)), input_signature=strings
        )
        self.tokenize = tf.function(self.tokenizer.__call__, input_signature=strings)
        self.bert_pack_inputs = tf.function(lambda segments: self.packer(*segments))
        for count in (1, 2):  # trace both arities so the reloaded model has them
            self.bert_pack_inputs.get_concrete_function([segment] * count)


class Encoder(tf.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        spec = {name.name: name for name in serving.token_id_specs()}
        self.__call__ = tf.function(lambda inputs: self.encoder(inputs, training=False),
                                    input_signature=[spec])  # fmt: skip


def save_preprocessor(tokenizer, path, sequence_length):
    module = Preprocessor(tokenizer, sequence_length)
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    serving.check_serving_ops(path)


def save_encoder(encoder, path, sequence_length=None):
    """Saves the encoder; its serving signature flattens encoder_outputs to encoder_outputs_<i>."""
    del sequence_length  # the encoder takes any length up to max_position_embeddings
    module = Encoder(encoder)

    def flat_outputs(**inputs):
        outputs = dict(module.encoder(inputs, training=False))
        outputs.pop("pooled_output_only")  # TF Hub's interface has pooled_output alone
        layers = outputs.pop("encoder_outputs")
        return {**outputs, **{f"encoder_outputs_{i}": x for i, x in enumerate(layers)}}

    specs = {spec.name: spec for spec in serving.token_id_specs()}
    signature = tf.function(flat_outputs).get_concrete_function(**specs)
    tf.saved_model.save(module, path, signatures={"serving_default": signature})
    serving.check_serving_ops(path)
