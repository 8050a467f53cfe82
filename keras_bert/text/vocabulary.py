"""Reading and checking a BERT vocabulary (vocab.txt), and finding a checkpoint's.

It imports only keras_bert.text.textfiles (a leaf), so the tokenizer and the checkpoint readers both
build on it.
"""

import json
import logging
import os

import numpy as np

from keras_bert.text.textfiles import read_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def read_vocabulary(path):
    """Reads a `vocab.txt` (one token per line, id = line number) into a list of tokens. Lines
    may end in "\\n" or "\\r\\n" (a vocabulary saved on Windows)."""
    text = read_text(path, "vocabulary (vocab.txt)")
    return [line.removesuffix("\r") for line in text.rstrip("\r\n").split("\n")]


def check_vocabulary(vocabulary, source="vocabulary"):
    """Raises ValueError unless the vocabulary is non-empty, unique and holds BERT's specials."""
    if not vocabulary:
        raise ValueError(f"{source} is empty")
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise ValueError(
            f"{source} has no {', '.join(missing)} token(s); BERT needs all of "
            f"{', '.join(SPECIAL_TOKENS)}"
        )
    seen = set()
    for i, token in enumerate(vocabulary):
        if token in seen:
            raise ValueError(f"{source} lists the token {token!r} twice (again at line {i + 1})")
        seen.add(token)


def checkpoint_folder(path):
    """The folder of a checkpoint given as a folder or as a Google checkpoint prefix."""
    return path if os.path.isdir(path) else os.path.dirname(path)


def require_checkpoint(path):
    """Raises FileNotFoundError ("checkpoint not found: PATH") unless `path` is a file, a
    folder or a Google checkpoint prefix (PATH.index is a file)."""
    if not os.path.exists(path) and not os.path.isfile(path + ".index"):
        raise FileNotFoundError(f"checkpoint not found: {path}")


def read_json(path):
    """A JSON file's value; a file that is not JSON is refused with the line of the fault."""
    text = read_text(path, "JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def find_vocabulary(path, do_lower_case=None):
    """Returns (vocab_file, do_lower_case) for a checkpoint.

    Unless given, lower-casing is read from tokenizer_config.json or keras_bert.json, and
    otherwise inferred: a vocabulary without upper-case letters is an uncased one.
    """
    require_checkpoint(path)
    folder = checkpoint_folder(path)
    vocab_file = os.path.join(folder, "vocab.txt")
    if not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"{folder} has no vocab.txt")
    if do_lower_case is not None:
        require_bool(do_lower_case, "do_lower_case")
        if not do_lower_case:  # the only setting a vocabulary can contradict
            check_lower_casing(read_vocabulary(vocab_file), do_lower_case, vocab_file)
        return vocab_file, bool(do_lower_case)
    for name in ("tokenizer_config.json", "keras_bert.json"):
        settings = os.path.join(folder, name)
        if os.path.isfile(settings):
            value = read_json(settings).get("do_lower_case")
            if value is not None:
                require_bool(value, f"{settings}: do_lower_case")
                if not value:
                    check_lower_casing(read_vocabulary(vocab_file), False, vocab_file,
                                       f"{settings} says do_lower_case=false: set it to true "
                                       "there, or pass do_lower_case=True (--do_lower_case)")  # fmt: skip
                return vocab_file, bool(value)
    cased = any(token != token.lower() for token in _words(read_vocabulary(vocab_file)))
    logging.getLogger("absl").info(
        "%s: do_lower_case=%s, inferred from the vocabulary", vocab_file, not cased
    )
    return vocab_file, not cased


def require_bool(value, name):
    """Raises ValueError unless `value` is a bool (a lower-casing setting read from a file or
    given by a caller: a string such as "false" is truthy, and would lower-case)."""
    if isinstance(value, (bool, np.bool_)):
        return
    # A ValueError, as for every bad setting: the binaries report it in one line.
    raise ValueError(f"{name} must be true or false, got {value!r}")


def _words(vocabulary):
    return [token for token in vocabulary if not token.startswith("[")]


def check_lower_casing(vocabulary, do_lower_case, source="vocabulary",
                       remedy="leave do_lower_case unset or pass True"):  # fmt: skip
    """Raises ValueError for do_lower_case=False with an uncased vocabulary (lower-case letters
    and no upper-case ones), where every capitalised word would become [UNK]; the message
    names `source` and ends with `remedy`."""
    words = _words(vocabulary)
    uncased = all(w == w.lower() for w in words) and any(w != w.upper() for w in words)
    if uncased and not do_lower_case:
        raise ValueError(f"do_lower_case=False, but {source} is uncased (it has lower-case "
                         "letters and no upper-case ones): every capitalised word would become "
                         f"[UNK]; {remedy}")  # fmt: skip
