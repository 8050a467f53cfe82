"""What tasks.extract_features turns a batch of input lines into: every token's activations
(`Extractor`, the original layout) or one sentence vector a text (`SentenceExtractor`), and how
each text's result is written (`jsonl_record`, `text_vector`)."""

import json

import numpy as np
import tensorflow as tf

from keras_bert import BertPacker, BertPreprocessor


class Extractor:
    """Encodes batches of lines; keeps singles and pairs apart (they pack differently)."""

    def __init__(self, encoder, tokenizer, sequence_length, layers):
        packer = BertPacker.from_tokenizer(tokenizer, sequence_length=sequence_length)
        self.single = BertPreprocessor(tokenizer, packer, num_segments=1)
        self.pair = BertPreprocessor(tokenizer, packer, num_segments=2)
        self.vocabulary, self.layers = tokenizer.vocabulary, layers
        self.sequence_length = sequence_length
        # One graph for every batch (its size and length unknown): a run continued after a
        # stop computes its batches as the uninterrupted run does, to the last digit. (Traced
        # for the first batch's shapes, the first batch after a restart ran another graph.)
        ids = tf.TensorSpec([None, None], tf.int32)
        self.encode = tf.function(
            lambda inputs: encoder(inputs)["encoder_outputs"],
            input_signature=[dict.fromkeys(("input_word_ids", "input_mask", "input_type_ids"), ids)])

    def __call__(self, batch):
        """Returns, in the batch's order, (token ids, [num_layers x (tokens, hidden)]) per text
        (real tokens only), and how many texts were truncated."""
        results, truncated = [None] * len(batch), 0
        for indices, preprocess in ((
                [i for i, (_, _, b) in enumerate(batch) if b is None], self.single), (
                [i for i, (_, _, b) in enumerate(batch) if b is not None], self.pair)):  # fmt: skip
            if not indices:
                continue
            if preprocess is self.single:
                texts = tf.constant([batch[i][1] for i in indices])
            else:
                texts = (tf.constant([batch[i][1] for i in indices]),
                         tf.constant([batch[i][2] for i in indices]))  # fmt: skip
            lengths = preprocess.untruncated_lengths(texts).numpy()
            truncated += int(np.sum(lengths > self.sequence_length))
            inputs = preprocess(texts)
            outputs = [o.numpy() for o in self.encode(inputs)]
            real = inputs["input_mask"].numpy().sum(axis=1)
            ids = inputs["input_word_ids"].numpy()
            for row, i in enumerate(indices):
                results[i] = (ids[row, : real[row]], [o[row, : real[row]] for o in outputs])
        return results, truncated


class SentenceExtractor:
    """Encodes batches of single texts into sentence vectors with a `BertTextEmbedder`; returns
    per text (zeros as many as its packed tokens, its vector) and how many texts were cut. The
    npy output reads no token ids: the zeros only carry the count the progress log reports."""

    layers = vocabulary = None  # npy output only

    def __init__(self, embedder):
        self.embedder = embedder
        self.sequence_length = embedder.preprocessor.sequence_length

    def __call__(self, batch):
        texts = [first for _, first, _ in batch]
        lengths = self.embedder.preprocessor.untruncated_lengths(texts).numpy()[:, 0]
        vectors = self.embedder.predict(texts, batch_size=len(texts), verbose=0)
        results = [(np.zeros(min(n, self.sequence_length), "int32"), v)
                   for n, v in zip(lengths, vectors)]  # fmt: skip
        return results, int(np.sum(lengths > self.sequence_length))


def jsonl_record(index, ids, outputs, layers, vocabulary):
    features = [{"token": vocabulary[token],
                 "layers": [{"index": layer,
                             "values": [round(float(x), 6) for x in outputs[layer][t]]}
                            for layer in layers]}
                for t, token in enumerate(ids)]  # fmt: skip
    return json.dumps({"linex_index": index, "features": features}) + "\n"


def text_vector(outputs, pooling):
    if pooling == "sentence":  # SentenceExtractor's vector
        return outputs
    if pooling == "cls":
        return outputs[-1][0]
    if pooling == "mean":
        return outputs[-1].mean(axis=0)
    return np.concatenate([outputs[i].mean(axis=0) for i in (-1, -2, -3, -4)])
