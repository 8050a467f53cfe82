"""The preprocessor and the bare encoder as SavedModels in the TF Hub BERT layout.

Code written for TF Hub's BERT models (`hub.KerasLayer(preprocess_url)` then
`hub.KerasLayer(encoder_url)`) works with these unchanged:
  preprocess: strings -> input_word_ids, input_mask, input_type_ids (int32, padded to the
              export's sequence length); also `.tokenize` (strings -> ragged token ids) and
              `.bert_pack_inputs` (a list of one or two tokenized segments -> the same dict).
  encoder:    that dict -> pooled_output, sequence_output, encoder_outputs.
"""

import os
import shutil
import time

import numpy as np
import tensorflow as tf

from keras_bert import serving
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.text.packer import BertPacker


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
    """`encoder` is not an attribute: the module tracks the variables its functions read
    (serving.captured_variables), not the Keras layer, whose variables wrap those."""

    def __init__(self, encoder, signature):
        super().__init__()
        spec = {name.name: name for name in serving.token_id_specs()}
        self.__call__ = tf.function(lambda inputs: encoder(inputs, training=False),
                                    input_signature=[spec])  # fmt: skip
        self.signature = tf.function(signature, input_signature=serving.token_id_specs())
        self.encoder_weights = serving.captured_variables([self.__call__, self.signature])


def save_preprocessor(tokenizer, path, sequence_length):
    module = Preprocessor(tokenizer, sequence_length)
    _write(module, path, module.__call__, serving.text_requests([{"sentences": ["Hi."]}]))


def save_encoder(encoder, path, sequence_length=None):
    """Saves the encoder; its serving signature flattens encoder_outputs to encoder_outputs_<i>."""
    del sequence_length  # the encoder takes any length up to max_position_embeddings

    def flat_outputs(*ids):
        outputs = dict(encoder(dict(zip(INPUT_NAMES, ids)), training=False))
        outputs.pop("pooled_output_only")  # TF Hub's interface has pooled_output alone
        layers = outputs.pop("encoder_outputs")
        return {**outputs, **{f"encoder_outputs_{i}": x for i, x in enumerate(layers)}}

    module = Encoder(encoder, flat_outputs)
    ids = np.array([[2, 3, 4]], np.int32)  # any ids below the vocabulary's size
    _write(module, path, module.signature, [{"input_word_ids": ids, "input_mask":
                                             np.ones_like(ids), "input_type_ids": 0 * ids}])


def _write(module, path, signature, requests):
    """Saves `module` under a temporary name beside `path`, checks its ops and `requests` as TF
    Serving would run them, then puts it in place of any earlier one (the layout has no
    versions). A failed or killed export leaves the earlier one whole."""
    stamp = f"{os.getpid()}-{int(time.time())}"
    tmp, old = f"{path}.tmp-{stamp}", f"{path}.old-{stamp}"
    try:
        serving.save_checked(module, tmp, {"serving_default": signature}, requests)
        if os.path.exists(path):
            os.rename(path, old)
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
