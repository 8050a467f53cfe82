"""Where each weight of the encoder and the pre-training heads lives in a Google (TF1 names) and a
Hugging Face (PyTorch names) checkpoint, and the checked, all-or-nothing assignment of a file's
values to the Keras variables. Works on built layers; imports nothing of ours.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Entry:
    """One weight: its Google name, its Hugging Face name, and the Keras variable."""

    google: str
    hf: str
    variable: object
    transpose_google: bool = False
    transpose_hf: bool = False


def entries(encoder, masked_lm=None, next_sentence=None):
    """Every weight of `encoder` (and of the heads given) as an `Entry`, in a fixed order."""
    found = []

    def dense(google, hf, layer):
        found.append(Entry(f"{google}/kernel", f"{hf}.weight", layer.kernel, transpose_hf=True))
        found.append(Entry(f"{google}/bias", f"{hf}.bias", layer.bias))

    def norm(google, hf, layer):
        found.append(Entry(f"{google}/gamma", f"{hf}.weight", layer.gamma))
        found.append(Entry(f"{google}/beta", f"{hf}.bias", layer.beta))

    emb = encoder.embeddings
    for name, variable in (
        ("word_embeddings", emb.word_embeddings.embeddings),
        ("token_type_embeddings", emb.token_type_embeddings.embeddings),
        ("position_embeddings", emb.position_embeddings),
    ):
        found.append(
            Entry(f"bert/embeddings/{name}", f"bert.embeddings.{name}.weight", variable)
        )
    norm("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm", emb.layer_norm)
    for i, block in enumerate(encoder.transformer_layers):
        google, hf = f"bert/encoder/layer_{i}", f"bert.encoder.layer.{i}"
        for part in ("query", "key", "value"):
            dense(
                f"{google}/attention/self/{part}",
                f"{hf}.attention.self.{part}",
                getattr(block.attention, part),
            )
        dense(
            f"{google}/attention/output/dense",
            f"{hf}.attention.output.dense",
            block.attention.output_dense,
        )
        norm(
            f"{google}/attention/output/LayerNorm",
            f"{hf}.attention.output.LayerNorm",
            block.attention_layer_norm,
        )
        dense(f"{google}/intermediate/dense", f"{hf}.intermediate.dense", block.intermediate)
        dense(f"{google}/output/dense", f"{hf}.output.dense", block.output_dense)
        norm(f"{google}/output/LayerNorm", f"{hf}.output.LayerNorm", block.output_layer_norm)
    dense("bert/pooler/dense", "bert.pooler.dense", encoder.pooler.dense)
    if masked_lm is not None:
        dense("cls/predictions/transform/dense", "cls.predictions.transform.dense", masked_lm.dense)
        norm(
            "cls/predictions/transform/LayerNorm",
            "cls.predictions.transform.LayerNorm",
            masked_lm.layer_norm,
        )
        found.append(
            Entry("cls/predictions/output_bias", "cls.predictions.bias", masked_lm.output_bias)
        )
    if next_sentence is not None:
        # Google and Hugging Face both store this kernel as (2, hidden).
        kernel, bias = next_sentence.dense.kernel, next_sentence.dense.bias
        found.append(
            Entry(
                "cls/seq_relationship/output_weights",
                "cls.seq_relationship.weight",
                kernel,
                transpose_google=True,
                transpose_hf=True,
            )
        )
        found.append(
            Entry("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", bias)
        )
    return found


def _some(names):
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")


def assign(entries, shapes, read, key, source, file_names=None):
    """Checks every name and shape first, then reads and assigns: all or nothing.

    `shapes` and `read` use the names of `key` ("google" or "hf"); `file_names` maps them to
    the names the file itself uses, for the messages.
    """
    spell = (file_names or {}).get
    expected = {getattr(e, key): e for e in entries}
    missing = sorted(set(expected) - set(shapes))
    unexpected = sorted(spell(name, name) for name in set(shapes) - set(expected))
    if missing:
        raise ValueError(
            f"{source} lacks {len(missing)} variable(s) the model needs: {_some(missing)}"
        )
    if unexpected:
        raise ValueError(
            f"{source} has {len(unexpected)} variable(s) this model has no place for: "
            f"{_some(unexpected)}"
        )
    transpose = f"transpose_{key}"
    for name, entry in expected.items():
        shape = tuple(shapes[name])[:: -1 if getattr(entry, transpose) else 1]
        if shape != tuple(entry.variable.shape):
            raise ValueError(
                f"{source}: variable {spell(name, name)} has shape {tuple(shapes[name])}, but "
                f"the config asks for {tuple(entry.variable.shape)[:: -1 if getattr(entry, transpose) else 1]}"
            )
    for name, entry in expected.items():
        try:
            value = np.asarray(read(name), dtype=np.float32)
        except Exception as e:  # a truncated or corrupt file surfaces here, per variable
            raise ValueError(f"{source}: could not read variable {spell(name, name)}: {e}") from e
        entry.variable.assign(value.T if getattr(entry, transpose) else value)
