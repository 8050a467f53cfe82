"""Starting a task model from pretrained weights: a Google, Hugging Face or keras-bert
checkpoint folder, or a finished run's folder."""

import os

import keras

from keras_bert import checkpoints
from keras_bert.models.task import BertTask
from keras_bert.text.tokenizer import BertTokenizer


def check_sequence_length(sequence_length, config, what="sequence_length"):
    """Refuses a length the checkpoint has no position embeddings for (or below 3)."""
    if not 3 <= sequence_length <= config.max_position_embeddings:
        raise ValueError(f"{what}={sequence_length} must be between 3 and the checkpoint's "
                         f"max_position_embeddings={config.max_position_embeddings}")  # fmt: skip


def load_pretrained(path, do_lower_case=None, sequence_length=None):
    """(encoder, tokenizer, task model) of a Google, Hugging Face or keras-bert checkpoint
    folder, or of a finished run's folder (its model.keras); with `sequence_length`, checked
    against the checkpoint before its weights load.

    From a run, the encoder is a copy of the run's (fine-tuned weights, computing in today's
    Keras dtype policy) with the run's tokenizer, and the third item is the run's task model, so
    that a model of the same kind can keep its head (SQuAD v2.0 from a v1.1 run, say). From a
    checkpoint, the third item is None."""
    if sequence_length is not None:
        check_sequence_length(sequence_length, checkpoints.read_config(path))
    fmt, folder = checkpoints.detect_format(path)
    if fmt != checkpoints.RUN:
        checkpoint = checkpoints.load_checkpoint(path, do_lower_case)
        tokenizer = BertTokenizer(checkpoint.vocab_file, checkpoint.do_lower_case)
        return checkpoint.encoder, tokenizer, None
    run = keras.saving.load_model(os.path.join(folder, "model.keras"))
    if not isinstance(run, BertTask):
        raise ValueError(f"{folder}/model.keras is a {type(run).__name__}, not a keras_bert task "
                         "model: pass a checkpoint folder or a keras_bert run's output folder")
    tokenizer = run.preprocessor.tokenizer
    if do_lower_case is not None and do_lower_case != tokenizer.do_lower_case:
        raise ValueError(f"{path} was fine-tuned with do_lower_case={tokenizer.do_lower_case}; "
                         f"its vocabulary cannot be used with do_lower_case={do_lower_case}")
    config = {**run.encoder.get_config(), "dtype": None}  # None: today's global policy
    encoder = type(run.encoder).from_config(config)
    encoder.set_weights(run.encoder.get_weights())
    return encoder, tokenizer, run
