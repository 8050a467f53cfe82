"""keras-bert's absl binaries; run them from the repository root: python -m tasks.<name>.

Importing this package makes TensorFlow quiet, as a healthy run should be: unless the
environment sets TF_CPP_MIN_LOG_LEVEL itself, TensorFlow's C++ logging is limited to fatal
errors (its INFO/WARNING/ERROR lines on a healthy CPU run are notices such as "failed call to
cuInit" and "oneDNN custom operations are on"), and the lines the TensorFlow libraries print
while they load, before their logging starts, are held back; its Python logger keeps warnings. `TF_CPP_MIN_LOG_LEVEL=0 python -m
tasks.<name>` shows all of them again. Errors are reported by the exceptions TensorFlow raises.
"""

import logging
import os
import re
import sys
import tempfile

from absl import logging as absl_logging

# A C++ log line (I/W/E + date, or "I0000 00:00:<seconds>" before logging starts) and the
# banner printed before it, as the TensorFlow libraries write them while they load.
_LOAD_NOISE = re.compile(rb"^([IWE]\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w.]+:\d+\]|WARNING: All log messages "
                         rb"before absl::InitializeLog|To enable the following instructions)")


def _not_tensorflow_info(record):
    """False for an INFO record logged from TensorFlow's own code (e.g. "Sharding callback
    duration", "Writing fingerprint" when a SavedModel is written)."""
    return record.levelno >= logging.WARNING or f"{os.sep}tensorflow{os.sep}" not in record.pathname


def _import_tensorflow_quietly():
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # as keras_bert._use_onednn does
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # its Python INFO lines too,
    absl_logging.get_absl_logger().addFilter(_not_tensorflow_info)  # those it logs via absl
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
            import tensorflow_text  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(True) if not _LOAD_NOISE.match(line)]
            kept = b"".join(kept)
            if kept:
                sys.stderr.write(kept.decode("utf-8", "replace"))
                sys.stderr.flush()


_import_tensorflow_quietly()

from tasks.cli import (  # noqa: E402  (after TensorFlow's quiet import)
    INTERRUPTED_STATUS,
    Interrupted,
    check_at_least_one,
    check_flag_texts,
    check_seed,
    default_checkpoint,
    run_main,
)

__all__ = ["INTERRUPTED_STATUS", "Interrupted", "check_at_least_one", "check_flag_texts",
           "check_seed", "default_checkpoint", "run_main"]
