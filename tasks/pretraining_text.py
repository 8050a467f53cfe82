"""Plain text for pre-training: files to documents to sentences to word pieces.

Shared by tasks/create_pretraining_data.py (offline TFRecords) and tasks/pretrain.py (instances
built on the fly, new masks every epoch).
"""

import glob
import re

import numpy as np
import tensorflow as tf

from keras_bert.text import textfiles
from keras_bert.training import pretraining

# A sentence ends at . ! or ? (and closing quotes/brackets) followed by white space and an
# upper-case letter, a digit or an opening quote; common abbreviations do not end one.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATION = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|e\.g|i\.e|No|Vol|Ch)\.$")


def split_sentences(paragraph):
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(paragraph):
        candidate = paragraph[start : match.start()]
        if _ABBREVIATION.search(candidate):
            continue
        sentences.append(paragraph[start : match.end()].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def read_documents(path, input_format="lines", encoding="utf-8", errors="strict"):
    """A file's documents, each a list of sentence strings (empty documents dropped).

    input_format "lines": one sentence per line, a blank line between documents (the original
    BERT format); "text": prose, each blank-line-separated paragraph a document, split into
    sentences here. Windows and old Mac line endings count as line ends.
    """
    text = textfiles.read_text(path, "text file", encoding, errors, hint="pass its encoding "
                               "(--input_encoding / --text_encoding) or --encoding_errors=replace")
    blocks = re.split(r"\n\s*\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    if input_format == "lines":
        documents = [
            [line.strip() for line in block.split("\n") if line.strip()] for block in blocks
        ]
    else:
        documents = [split_sentences(" ".join(block.split())) for block in blocks]
    return [d for d in documents if d]


def input_files(spec, flag="--input_file"):
    """The files a comma-separated list of paths or globs names, in order."""
    files = []
    for pattern in spec.split(","):
        matches = sorted(glob.glob(pattern.strip()))
        if not matches:
            raise FileNotFoundError(f"{flag}={spec} matches no file ({pattern.strip()!r})")
        for match in matches:
            textfiles.check_file(match, f"file of {flag}")
        files.extend(matches)
    return files


def tokenize_documents(documents, tokenizer):
    """Documents of sentence strings -> documents of sentences of (id, starts_word) pairs."""
    sentences = [s for d in documents for s in d]
    ids = tokenizer(tf.constant(sentences)).to_list() if sentences else []
    vocabulary = tokenizer.vocabulary
    tokenized, k = [], 0
    for document in documents:
        doc = []
        for _ in document:
            if ids[k]:
                doc.append([(i, not vocabulary[i].startswith("##")) for i in ids[k]])
            k += 1
        if doc:
            tokenized.append(doc)
    return tokenized


def padded_features(instance, max_seq_length, max_predictions):
    """An Instance as the fixed-length features of the TFRecord schema (numpy arrays)."""

    def pad(values, length, dtype="int64"):
        array = np.zeros(length, dtype)
        array[: len(values)] = values
        return array

    n = len(instance.masked_lm_positions)
    return {
        "input_ids": pad(instance.input_ids, max_seq_length),
        "input_mask": pad([1] * len(instance.input_ids), max_seq_length),
        "segment_ids": pad(instance.segment_ids, max_seq_length),
        "masked_lm_positions": pad(instance.masked_lm_positions, max_predictions),
        "masked_lm_ids": pad(instance.masked_lm_ids, max_predictions),
        "masked_lm_weights": pad([1.0] * n, max_predictions, "float32"),
        "next_sentence_labels": np.array([int(instance.is_random_next)], "int64"),
    }


def check_pairs(documents, source):
    """Refuses text that can make no next-sentence pair: a pair needs a document of at least two
    sentences (a one-sentence document only lends random second sentences to others)."""
    if not any(len(document) >= 2 for document in documents):
        raise ValueError(f"{source} makes no pre-training pair: it needs a document of at least "
                         "two sentences (in the lines format, one sentence per line and a blank "
                         "line between documents)")  # fmt: skip


def passes(documents, special, seed, **settings):
    """Yields, pass after pass forever, the list of instances of one pass over the documents in
    a new random order, with new pairs and masks (the recipe of the offline files)."""
    for number in range(2**62):
        rng = np.random.default_rng([seed, number])
        yield [instance for index in rng.permutation(len(documents))
               for instance in pretraining.instances_from_document(
                   documents, int(index), special, rng, **settings)]  # fmt: skip


def streaming_dataset(documents, special, seed, max_seq_length, max_predictions, **settings):
    """A tf.data pipeline of padded feature dicts from `passes`, built on the fly."""

    def generate():
        for instances in passes(documents, special, seed, max_seq_length=max_seq_length,
                                max_predictions=max_predictions, **settings):  # fmt: skip
            for instance in instances:
                yield padded_features(instance, max_seq_length, max_predictions)

    lengths = {"masked_lm_positions": max_predictions, "masked_lm_ids": max_predictions,
               "masked_lm_weights": max_predictions, "next_sentence_labels": 1}  # fmt: skip
    signature = {
        name: tf.TensorSpec([lengths.get(name, max_seq_length)],
                            tf.float32 if name == "masked_lm_weights" else tf.int64)
        for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                     "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
    }  # fmt: skip
    return tf.data.Dataset.from_generator(generate, output_signature=signature)
