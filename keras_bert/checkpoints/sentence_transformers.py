"""What a sentence-transformers model folder says about its sentence vectors: where its BERT
weights are (the Transformer module), how token vectors are pooled (the Pooling module's
config.json), whether vectors are normalised (a Normalize module) and the length texts are
cut at (sentence_bert_config.json's max_seq_length)."""

import json
import os

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len")
# The Pooling module's flags (sentence-transformers 2.x to 5.x) and its `pooling_mode` (6.x).
_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
          "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len"}  # fmt: skip
_OTHER_FLAGS = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
_MODES = {"mean": "mean", "cls": "cls", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
          "mean_sqrt_len": "mean_sqrt_len"}  # fmt: skip


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({error})") from None


def _pooling(path):
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object of pooling settings")  # noqa: TRY004
    if isinstance(config.get("pooling_mode"), str):
        modes = [_MODES.get(config["pooling_mode"], config["pooling_mode"])]
    else:
        modes = [mode for key, mode in _FLAGS.items() if config.get(key) is True]
        modes += [key for key in _OTHER_FLAGS if config.get(key) is True]
    if len(modes) != 1 or modes[0] not in POOLINGS:
        raise ValueError(f"{path}: pooling {' + '.join(modes) or 'none'} is not one of "
                         f"{', '.join(POOLINGS)}; pass pooling= to choose one")  # fmt: skip
    return modes[0]


def sentence_settings(folder):
    """{"transformer": the folder of the BERT weights, "pooling": one of POOLINGS (None where
    there is no Pooling module), "normalize": bool, "max_seq_length": int or None} of a
    sentence-transformers model folder; None where `folder` has no modules.json. A module
    other than Transformer, Pooling and Normalize (a Dense projection, say) is refused."""
    modules_file = os.path.join(folder, "modules.json")
    if not os.path.isfile(modules_file):
        return None
    modules = _read_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{modules_file}: expected a JSON list of modules")
    settings = {"transformer": folder, "pooling": None, "normalize": False,
                "max_seq_length": None}  # fmt: skip
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = os.path.join(folder, str(module.get("path", "")))
        if kind == "Transformer":
            settings["transformer"] = path
            config_file = os.path.join(path, "sentence_bert_config.json")
            if os.path.isfile(config_file):
                length = _read_json(config_file).get("max_seq_length")
                if length is not None and (not isinstance(length, int) or length < 3):
                    raise ValueError(f"{config_file}: max_seq_length must be a whole number "
                                     f"of at least 3, got {length!r}")  # fmt: skip
                settings["max_seq_length"] = length
        elif kind == "Pooling":
            settings["pooling"] = _pooling(os.path.join(path, "config.json"))
        elif kind == "Normalize":
            settings["normalize"] = True
        else:
            raise ValueError(f"{modules_file}: module {module.get('name')!r} is a "
                             f"{module.get('type')}, which BertTextEmbedder does not build (it "
                             "builds Transformer, Pooling and Normalize)")  # fmt: skip
    return settings
