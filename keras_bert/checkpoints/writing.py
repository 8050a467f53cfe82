"""The three checkpoint layouts, how each is written, and how a save's files replace an old
checkpoint's in one folder (`save_checkpoint` in keras_bert/checkpoints/__init__.py)."""

import glob
import json
import os
import shutil

import numpy as np
import tensorflow as tf

from keras_bert.checkpoints.variable_names import entries as variable_entries
from keras_bert.model.config import LAYER_NORM_EPSILON

GOOGLE, HUGGING_FACE, KERAS = "google", "huggingface", "keras"
FORMATS = (GOOGLE, HUGGING_FACE, KERAS)
RUN = "run"  # a fine-tuned task model's folder (model.keras); read, never written here

# Google's code computes "gelu" with the tanh approximation; it has no exact-erf GELU, which we
# write as "gelu_exact" so that Google's code refuses it rather than computing other numbers.
FROM_GOOGLE_ACT = {"gelu": "gelu_new", "gelu_exact": "gelu"}
TO_GOOGLE_ACT = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact"}

# Each layout's config file: moved into place last, so that a folder without it is unfinished.
CONFIG_FILES = {GOOGLE: "bert_config.json", HUGGING_FACE: "config.json", KERAS: "keras_bert.json"}


# The writers below write into save_checkpoint's own work folder, whose files `move_in` then
# puts in place: each writes its files directly.
def write_json(path, values):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True) + "\n")


def write_google(checkpoint, folder, entries):
    prefix = os.path.join(folder, "bert_model.ckpt")
    names = [e.google for e in entries]
    tensors = [e.variable.numpy().T if e.transpose_google else e.variable.numpy() for e in entries]
    tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors
    )
    config = checkpoint.encoder.config.to_dict()
    config["hidden_act"] = TO_GOOGLE_ACT.get(config["hidden_act"], config["hidden_act"])
    write_json(os.path.join(folder, "bert_config.json"), config)


def write_hugging_face(checkpoint, folder, entries):
    from safetensors.numpy import save_file

    heads = checkpoint.masked_lm is not None or checkpoint.next_sentence is not None
    tensors = {}
    for e in entries:
        name = e.hf if heads else e.hf[len("bert.") :]
        value = e.variable.numpy()
        tensors[name] = np.ascontiguousarray(value.T if e.transpose_hf else value)
    path = os.path.join(folder, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    architecture = "BertForPreTraining" if heads else "BertModel"
    write_json(
        os.path.join(folder, "tokenizer_config.json"),
        {"do_lower_case": checkpoint.do_lower_case, "tokenizer_class": "BertTokenizer"},
    )
    write_json(
        os.path.join(folder, "config.json"),
        {
            **checkpoint.encoder.config.to_dict(),
            "model_type": "bert",
            "architectures": [architecture],
            "layer_norm_eps": LAYER_NORM_EPSILON,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
        },
    )


def write_layout(checkpoint, folder, format):
    entries = variable_entries(checkpoint.encoder, checkpoint.masked_lm, checkpoint.next_sentence)
    if format == GOOGLE:
        write_google(checkpoint, folder, entries)
    elif format == HUGGING_FACE:
        write_hugging_face(checkpoint, folder, entries)
    else:
        checkpoint.encoder.save(os.path.join(folder, "encoder.keras"))
        write_json(os.path.join(folder, "keras_bert.json"),
                    {"do_lower_case": checkpoint.do_lower_case, "format_version": 1})  # fmt: skip


ASIDE = ".save-old-"  # where a save puts the old checkpoint's files while it moves its own in
PLAN = "save.json"  # in that folder: the new files' names and its config's, and the phase


def move_in(work, folder, config):
    """Moves every file of `work` into `folder`, the config last, after moving the files of
    the same names aside (the old config first); then forgets the old ones."""
    names = sorted(os.listdir(work), key=lambda n: n == config)  # the config last
    aside = os.path.join(folder, f"{ASIDE}{os.getpid()}")
    os.makedirs(aside)
    plan = {"config": config, "names": names, "moving_in": False}

    def write_plan(values):  # whole or not there: read by undo_interrupted_save
        write_json(os.path.join(aside, PLAN + ".tmp"), values)
        os.replace(os.path.join(aside, PLAN + ".tmp"), os.path.join(aside, PLAN))

    write_plan(plan)
    for name in sorted(names, key=lambda n: n != config):  # the old config first
        if os.path.lexists(os.path.join(folder, name)):
            os.replace(os.path.join(folder, name), os.path.join(aside, name))
    write_plan({**plan, "moving_in": True})
    for name in names:
        os.replace(os.path.join(work, name), os.path.join(folder, name))
    shutil.rmtree(aside)


def undo_interrupted_save(folder):
    """Where a save was killed while it moved files (`move_in`), puts the old checkpoint back:
    the new files it had moved in are removed and the old ones return. Where it had finished
    (its config is in place), only the old files are removed."""
    for aside in glob.glob(os.path.join(folder, ASIDE + "*")):
        try:
            with open(os.path.join(aside, PLAN), encoding="utf-8") as f:
                plan = json.load(f)
        except FileNotFoundError:  # killed before its plan was in place: nothing moved
            plan = None
        if plan and not os.path.exists(os.path.join(folder, plan["config"])):
            if plan["moving_in"]:
                for name in plan["names"]:
                    if os.path.lexists(os.path.join(folder, name)):
                        os.remove(os.path.join(folder, name))
            for name in os.listdir(aside):
                if not name.startswith(PLAN):
                    os.replace(os.path.join(aside, name), os.path.join(folder, name))
        shutil.rmtree(aside, ignore_errors=True)
