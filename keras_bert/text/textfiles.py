"""Reading a user's text file, with errors that name the file and the line.

A leaf module (it imports nothing of keras_bert): the vocabulary reader and every binary's data
reader build on it, so that a folder where a file is expected, a missing file and a byte that is
not UTF-8 get the same one-line answer everywhere.
"""

import errno
import os


def check_file(path, what="file"):
    """Raises FileNotFoundError or ValueError unless `path` is an existing file."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder, not a file: pass the {what} itself")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (the {what})")


def check_folder(path, flag):
    """Raises FileNotFoundError or ValueError unless `path` (given by `flag`) is a folder."""
    if os.path.isfile(path):
        raise ValueError(f"{flag}={path} is a file, not a folder")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{flag}={path}: no such folder")


def make_folder(path, what):
    """Creates the folder `path` with its parents, unless it exists; `what` (the flag that gave
    it) names it when it cannot be made or written in."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{what}: {path} is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what}: cannot create the folder {path} ({e.strerror}); pass a place "
                         "you can write to") from None  # fmt: skip
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: cannot write in the folder {path}; pass a place you can write "
                         "to")  # fmt: skip


def decode(data, path, encoding="utf-8", errors="strict", hint=None, first_line=1):
    """`data` (bytes read from `path`, starting at line `first_line`) as text; a byte the
    encoding cannot read is reported with its line and its position in that line (both counted
    from 1), and `hint` (what to do)."""
    try:
        return data.decode(encoding, errors=errors)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + first_line
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(f"{path}:{line}: byte {column} of the line (0x{data[e.start]:02x}) is "
                         f"not valid {encoding}; {hint or f'save the file as {encoding}'}") from None  # fmt: skip
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r}") from None


def read_text(path, what="file", encoding="utf-8", errors="strict", hint=None):
    """The whole text of a file (a UTF-8 byte-order mark dropped); see `decode`."""
    check_file(path, what)
    with open(path, "rb") as f:
        data = f.read()
    return decode(data, path, encoding, errors, hint).removeprefix("\ufeff")


def write_failure(error):
    """What stopped a write, in a few words: a full disk or file-size limit by name, otherwise
    the first line of the error (h5py and TensorFlow name the errno deep inside a long message)."""
    text = str(error)
    full = out_of_space(error)
    if full:
        return full
    line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return line if len(line) <= 200 else line[:200] + "..."


DISK_FULL = "the disk is full"
FILE_SIZE_LIMIT = "the file grew past the file-size limit (ulimit -f)"


def out_of_space(error):
    """DISK_FULL or FILE_SIZE_LIMIT when that is what stopped a write (an OSError, h5py's or
    TensorFlow's error, or an error that already says so in these words), else None."""
    text, code = str(error), getattr(error, "errno", None)
    if code == errno.ENOSPC or any(s in text for s in ("errno = 28", "No space left", DISK_FULL)):
        return DISK_FULL
    if code == errno.EFBIG or any(s in text for s in ("errno = 27", "File too large",
                                                      FILE_SIZE_LIMIT)):  # fmt: skip
        return FILE_SIZE_LIMIT
    return None
