"""Reading and writing BERT checkpoints.

Three folder layouts are understood:
  google:       bert_config.json, bert_model.ckpt.{index,data-*}, vocab.txt (the original
                release; TF1 variable names such as bert/encoder/layer_0/attention/self/query/kernel)
  huggingface:  config.json, model.safetensors, vocab.txt (never pickled PyTorch files)
  keras:        encoder.keras, keras_bert.json, vocab.txt (this project's own)
A finished fine-tuning run's folder (model.keras: a whole task model, vocabulary inside) is
recognised too (format "run"): `read_config` reads its encoder's config, and the task models'
`from_checkpoint` start from it (keras_bert.models.pretrained.load_pretrained); `load_checkpoint` refuses it.
The masked-LM (cls/predictions/...) and next-sentence (cls/seq_relationship/...) heads are read
when the checkpoint has them, and written when given. Loading is all or nothing: a missing,
unexpected or misshapen variable is an error that names it.
"""

import dataclasses
import glob
import json
import os
import re
import shutil
import zipfile

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from safetensors import SafetensorError

from keras_bert.checkpoints import variable_names
from keras_bert.checkpoints.writing import (
    ASIDE,
    CONFIG_FILES,
    FORMATS,
    FROM_GOOGLE_ACT,
    GOOGLE,
    HUGGING_FACE,
    KERAS,
    RUN,
    move_in,
    undo_interrupted_save,
)
from keras_bert.checkpoints.writing import write_layout as _write_layout
from keras_bert.model.config import BertConfig
from keras_bert.model.encoder import BertEncoder
from keras_bert.model.heads import MaskedLMHead, NextSentenceHead
from keras_bert.text import textfiles
from keras_bert.text.vocabulary import checkpoint_folder as _folder
from keras_bert.text.vocabulary import (
    find_vocabulary,
    read_vocabulary,
    require_bool,
    require_checkpoint,
)
from keras_bert.text.vocabulary import read_json as _read_json

# Training state that Google checkpoints may carry and a model does not need.
_GOOGLE_TRAINING_STATE = re.compile(r"(/adam_[mv]|^global_step|^(good|bad)_steps|loss_scale)$")


@dataclasses.dataclass
class BertCheckpoint:
    """An encoder, its vocabulary, and the pre-training heads when the checkpoint has them."""

    encoder: BertEncoder
    vocab_file: str
    do_lower_case: bool
    masked_lm: MaskedLMHead | None = None
    next_sentence: NextSentenceHead | None = None

    def __post_init__(self):
        require_bool(self.do_lower_case, "BertCheckpoint.do_lower_case")


def _heads_for(encoder, names, masked_lm_prefix, next_sentence_prefix):
    config = encoder.config
    masked_lm = next_sentence = None
    if any(name.startswith(masked_lm_prefix) for name in names):
        masked_lm = MaskedLMHead(
            encoder.embeddings.word_embeddings,
            config.hidden_act,
            config.initializer_range,
            name="masked_lm",
        )
        masked_lm.build((None, None, config.hidden_size))
    if any(name.startswith(next_sentence_prefix) for name in names):
        next_sentence = NextSentenceHead(config.initializer_range, name="next_sentence")
        next_sentence.build((None, config.hidden_size))
    return masked_lm, next_sentence


def detect_format(path):
    """Returns (format, folder) for a checkpoint folder, or a Google checkpoint prefix."""
    require_checkpoint(path)
    folder = _folder(path)
    if os.path.isfile(os.path.join(folder, "keras_bert.json")):
        return KERAS, folder
    if os.path.isfile(os.path.join(folder, "model.keras")):
        return RUN, folder
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return HUGGING_FACE, folder
    if os.path.isfile(os.path.join(folder, "bert_config.json")):
        return GOOGLE, folder
    for name in ("model.safetensors", "bert_config.json", "config.json", "model.keras"):
        link = os.path.join(folder, name)
        if os.path.islink(link) and not os.path.exists(link):
            raise ValueError(f"{link} is a link to {os.readlink(link)}, which does not exist; "
                             "point it at the file, or copy the file there")  # fmt: skip
    if os.path.isfile(os.path.join(folder, "pytorch_model.bin")):
        raise ValueError(
            f"{folder} holds only pytorch_model.bin; keras_bert never unpickles "
            "files. Convert it to model.safetensors first."
        )
    raise ValueError(
        f"{path} is not a BERT checkpoint: expected bert_config.json (Google), "
        "model.safetensors + config.json (Hugging Face), keras_bert.json, or the model.keras of "
        "a finished run"
    )


def _google_prefix(path):
    if not os.path.isdir(path):
        return path
    latest = tf.train.latest_checkpoint(path)
    if latest:
        return latest
    indexes = sorted(glob.glob(os.path.join(path, "*.index")))
    if len(indexes) != 1:
        raise ValueError(
            f"{path} should hold exactly one TF checkpoint (*.index), found "
            f"{len(indexes)}; pass the checkpoint prefix instead"
        )
    return indexes[0][: -len(".index")]


def read_config(path):
    """The `BertConfig` of a checkpoint in any of the three layouts, read without its weights."""
    fmt, folder = detect_format(path)
    if fmt in (KERAS, RUN):
        source = os.path.join(folder, "encoder.keras" if fmt == KERAS else "model.keras")
        try:
            with zipfile.ZipFile(source) as archive:
                values = json.loads(archive.read("config.json"))["config"]
            if fmt == RUN:
                values = values["encoder"]["config"]
        except (OSError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as e:
            what = "encoder" if fmt == KERAS else "task model"
            raise ValueError(f"{source} is not a saved keras-bert {what}: {e}") from None
    elif fmt == GOOGLE:
        source = os.path.join(folder, "bert_config.json")
        values = _read_json(source)
        values["hidden_act"] = FROM_GOOGLE_ACT.get(values.get("hidden_act"),
                                                    values.get("hidden_act"))  # fmt: skip
    else:
        source = os.path.join(folder, "config.json")
        values = _read_json(source)
        if values.get("model_type", "bert") != "bert":
            raise ValueError(f"{source}: model_type {values['model_type']!r} is not 'bert'")
    return BertConfig.from_dict(values, source=source)


def _load_google(path, folder):
    encoder = BertEncoder(**read_config(path).to_dict())
    prefix = _google_prefix(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as e:
        raise ValueError(f"could not open the TF checkpoint {prefix}: {e}") from e
    shapes = reader.get_variable_to_shape_map()
    skipped = [name for name in shapes if _GOOGLE_TRAINING_STATE.search(name)]
    if skipped:
        logging.info("%s: ignoring %d optimizer/step variables", prefix, len(skipped))
    shapes = {name: shape for name, shape in shapes.items() if name not in skipped}
    masked_lm, next_sentence = _heads_for(
        encoder, shapes, "cls/predictions/", "cls/seq_relationship/"
    )
    entries = variable_names.entries(encoder, masked_lm, next_sentence)
    variable_names.assign(entries, shapes, reader.get_tensor, "google", prefix)
    return encoder, masked_lm, next_sentence


def _hf_keys(names):
    """Maps a file's keys to BertForPreTraining names: adds the `bert.` prefix that BertModel
    files lack and renames the old LayerNorm gamma/beta."""
    prefixed = any(name.startswith("bert.") for name in names)
    mapping = {}
    for name in names:
        canonical = name if prefixed or name.startswith("cls.") else "bert." + name
        canonical = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", canonical)
        mapping[re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", canonical)] = name
    return mapping


def _load_hugging_face(folder):
    from safetensors import safe_open

    encoder = BertEncoder(**read_config(folder).to_dict())
    weights_file = os.path.join(folder, "model.safetensors")
    try:
        with open(weights_file, "rb") as f:
            f.read(1)
    except OSError as e:  # not its format: the file itself (permissions, a disk error)
        raise ValueError(f"cannot read {weights_file}: {e.strerror or e}; check that this user "
                         "may read it") from None  # fmt: skip
    try:
        weights = safe_open(weights_file, framework="np")
    except Exception as e:
        raise ValueError(f"{weights_file} is not a whole safetensors file (truncated, or "
                         f"another format): {e}") from None  # fmt: skip
    keys = _hf_keys(weights.keys())
    read = lambda name: weights.get_tensor(keys[name])
    shapes = {name: weights.get_slice(key).get_shape() for name, key in keys.items()}
    # Buffers and tied copies that carry no weights of their own.
    shapes.pop("bert.embeddings.position_ids", None)
    for tied, source in (
        ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
        ("cls.predictions.decoder.bias", "cls.predictions.bias"),
    ):
        if shapes.pop(tied, None) is not None and not np.array_equal(read(tied), read(source)):
            raise ValueError(f"{weights_file}: {tied} differs from {source}; BERT ties them")
    masked_lm, next_sentence = _heads_for(
        encoder, shapes, "cls.predictions.", "cls.seq_relationship."
    )
    entries = variable_names.entries(encoder, masked_lm, next_sentence)
    variable_names.assign(entries, shapes, read, "hf", weights_file, file_names=keys)
    return encoder, masked_lm, next_sentence


# Word embedding tables are often rounded up past their vocabulary to a multiple of 8 (or 64,
# 128) rows for faster products: up to this many rows past it are taken as that padding.
PADDING_ROWS = 128


def check_vocabulary_fits(vocab_file, vocab_size, rows):
    """Raises ValueError unless the vocabulary has a token for each of the checkpoint's `rows`
    word embeddings (or all but padding rows, fewer than PADDING_ROWS up to a multiple of 8):
    another model's vocabulary maps every token to the wrong row."""
    padding = rows - vocab_size
    if padding == 0 or (0 < padding < PADDING_ROWS and rows % 8 == 0):
        return
    raise ValueError(f"{vocab_file} has {vocab_size:,} tokens but the checkpoint has {rows:,} word "
                     "embeddings: it is not the checkpoint's vocabulary, and every token would "
                     "map to another token's row; put the checkpoint's own vocab.txt beside "
                     "it")  # fmt: skip


def load_checkpoint(path, do_lower_case=None):
    """Loads a checkpoint in any of the three layouts into a `BertCheckpoint`; a folder that
    a save was killed in gets its previous checkpoint back first."""
    if os.path.isdir(path) and glob.glob(os.path.join(path, ASIDE + "*")):
        undo_interrupted_save(path)
    fmt, folder = detect_format(path)
    if fmt == RUN:
        raise ValueError(f"{folder} is a fine-tuned task model (model.keras), not a checkpoint: "
                         "a task model's from_checkpoint (a task's --init_checkpoint) starts from "
                         "it, or take keras.saving.load_model(...).encoder")  # fmt: skip
    vocab_file, lower_case = find_vocabulary(folder, do_lower_case)
    masked_lm = next_sentence = None
    if fmt == KERAS:
        encoder = keras.saving.load_model(os.path.join(folder, "encoder.keras"))
    elif fmt == GOOGLE:
        encoder, masked_lm, next_sentence = _load_google(path, folder)
    else:
        encoder, masked_lm, next_sentence = _load_hugging_face(folder)
    check_vocabulary_fits(vocab_file, len(read_vocabulary(vocab_file)), encoder.config.vocab_size)
    logging.info("loaded a %s checkpoint from %s", fmt, path)
    return BertCheckpoint(encoder, vocab_file, lower_case, masked_lm, next_sentence)


_WORK = ".save-tmp-"  # save_checkpoint's folder for the files it has not moved into place yet


def save_checkpoint(checkpoint, folder, format=HUGGING_FACE):
    """Writes a `BertCheckpoint` to `folder` in the given layout.

    Every file is written first into a folder of this save's own inside `folder`; then the
    old checkpoint's files of the same names are moved aside, its config first, and the new
    ones moved in, the config last. A save that fails while it writes (a full disk) leaves the
    checkpoint that was there whole; one killed while it moves files leaves the old files
    aside, and the next save or load in `folder` puts them back (`undo_interrupted_save`).
    A folder never holds new weights under an old config. Files of `folder` that the layout
    does not write are left as they are.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; use one of {FORMATS}")
    if not isinstance(checkpoint, BertCheckpoint):
        raise TypeError(f"save_checkpoint takes a BertCheckpoint (an encoder with its "
                        f"vocabulary), got {type(checkpoint).__name__}: "
                        "BertCheckpoint(encoder, vocab_file, do_lower_case)")  # fmt: skip
    if os.path.isfile(folder):
        raise ValueError(f"{folder} is a file; save_checkpoint writes a folder")
    heads = checkpoint.masked_lm is not None or checkpoint.next_sentence is not None
    if format == KERAS and heads:
        raise ValueError("the keras format holds the encoder only; write the pre-training heads "
                         "in the google or huggingface format")  # fmt: skip
    os.makedirs(folder, exist_ok=True)
    for stale in glob.glob(os.path.join(folder, _WORK + "*")):
        shutil.rmtree(stale, ignore_errors=True)  # a save killed while it wrote left it
    undo_interrupted_save(folder)
    work = os.path.join(folder, f"{_WORK}{os.getpid()}")
    os.makedirs(work)
    try:
        try:
            vocab_target = os.path.join(folder, "vocab.txt")
            if not os.path.exists(vocab_target) or not os.path.samefile(checkpoint.vocab_file,
                                                                        vocab_target):  # fmt: skip
                shutil.copyfile(checkpoint.vocab_file, os.path.join(work, "vocab.txt"))
            _write_layout(checkpoint, work, format)
        except (OSError, tf.errors.OpError, SafetensorError) as e:  # each reports a failed write
            full = textfiles.out_of_space(e)
            if full is None:
                raise
            raise OSError(f"could not write the checkpoint in {folder} ({full}); the one there "
                          "is as it was: make room, then save again") from None  # fmt: skip
        move_in(work, folder, CONFIG_FILES[format])
    finally:
        shutil.rmtree(work, ignore_errors=True)


