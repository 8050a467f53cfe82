"""Throughput and latency scripts; each prints JSON (see README, Speed)."""

import functools
import glob
import os
import statistics
import time

from absl import app, flags


def time_alternating(jobs, rounds):
    """{name: [seconds of each round]} for `jobs` ({name: function}), run `rounds` times, every
    other round in reverse order, so that no job always runs first on a shared, noisy machine."""
    seconds = {name: [] for name in jobs}
    for r in range(rounds):
        for name in list(jobs) if r % 2 == 0 else list(jobs)[::-1]:
            start = time.perf_counter()
            jobs[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def newest_export(task):
    """The newest version folder under exported/<task>; a usage error when there is none."""
    path = max(glob.glob(f"exported/{task}/[0-9]*"), key=lambda p: int(p.split("/")[-1]),
               default=None)  # fmt: skip
    if not path:
        raise app.UsageError(f"no export found under exported/{task}: pass --export")
    return path


def onednn_enabled():
    """Whether TensorFlow runs oneDNN's kernels in this process (TF_ENABLE_ONEDNN_OPTS, or the
    CPU's default)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def checked_column_parts(config):
    """--column_parts, checked as an export checks its own (the parts must share `config`'s heads
    and sizes); a usage error naming the flag where they cannot."""
    from keras_bert.column_parts import check_column_parts

    count = flags.FLAGS.column_parts
    try:
        return check_column_parts(config, count)
    except ValueError as e:
        raise app.UsageError(f"--column_parts={count}: {e}") from None


def positive_integers(name, hint):
    """The list flag `name` as ints, each at least 1; a usage error naming the flag and `hint`
    (what to give) where one is not, or where the list is empty."""
    values = getattr(flags.FLAGS, name)
    try:
        numbers = [int(n) for n in values]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 1:
        raise app.UsageError(f"--{name}={','.join(values)}: {hint}")
    return numbers


def tf_serving_module():
    """keras_bert/tf_serving.py, loaded by its path: importing the package would import Keras."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "keras_bert", "tf_serving.py")
    spec = importlib.util.spec_from_file_location("tf_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def define_served_export_flags(kind, sentences, per):
    """The flags of `served_sentence_export` and of the SST-2 dev sentences served to it: --export,
    a `kind` classifier's export, and --sentences (default `sentences`), one a call, per `per`."""
    flags.DEFINE_string("export", None, f"The SavedModel version folder of a {kind} classifier's "
                        "export (default: the newest under exported/sst-2, the quick start's).")
    flags.DEFINE_integer("sentences", sentences, f"SST-2 dev sentences served, one a call, per "
                         f"{per}.", lower_bound=1)  # fmt: skip


def served_export_path():
    """--export, or the quick start's newest export; a usage error unless it is a SavedModel."""
    import tensorflow as tf

    export = flags.FLAGS.export or newest_export("sst-2")
    if not tf.saved_model.contains_saved_model(export):
        raise app.UsageError(f"--export={export} holds no SavedModel (saved_model.pb)")
    return export


def served_sentence_export():
    """--export (`served_export_path`) loaded as TF Serving loads it, one thread an op
    (`keras_bert/tf_serving.py`), and the first --sentences SST-2 dev sentences as its
    requests: (its path, the loaded export, [one-sentence string array]); a usage error unless
    it is a SavedModel that takes one sentence."""
    import numpy as np

    from benchmarks import peer_worker

    export = served_export_path()
    served = tf_serving_module().LoadedLikeTfServing(export, intra_op_threads=1)
    if served.input_names != ["sentence"]:
        raise app.UsageError(f"--export={export} takes {served.input_names}, not one sentence: "
                             "export a single-sentence classifier, such as the quick start's")
    sentences = peer_worker.sst2("dev")[0][: flags.FLAGS.sentences]
    return export, served, [np.array([sentence], dtype=object) for sentence in sentences]


def define_shape_flags():
    """The flags of a BERT forward pass's precision and input shape."""
    flags.DEFINE_enum("precision", "bfloat16", ["float32", "bfloat16"], "Compute precision.")
    flags.DEFINE_integer("batch_size", 8, "Sequences per step.")
    flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (no padding).")


def define_forward_flags():
    """The flags of the scripts that time or profile a random BERT-base encoder's forward pass
    (`random_encoder`)."""
    define_shape_flags()
    flags.DEFINE_bool("stored_weights", False, "bfloat16 only: the weights stored in bfloat16 "
                      "(what a bfloat16 export runs) rather than float32 weights cast on every "
                      "call.")  # fmt: skip


def define_forms_flags(layers=True):
    """The flags of the scripts that time forms of one computation side by side (`time_forms`);
    `layers=False` for a script that times no encoder (no --layers)."""
    flags.DEFINE_integer("rounds", 11, "Rounds; each times every form.")
    flags.DEFINE_integer("steps", 3, "Calls a form is timed over, per round.")
    if layers:
        flags.DEFINE_integer("layers", 12, "Encoder blocks (BERT-base has 12).")


def time_calls(jobs, rounds):
    """{name: median seconds a call} of `jobs` ({name: (function, calls a round)}): each called
    once first (TensorFlow prepares a graph, and oneDNN builds its kernels, on its first run),
    then its calls a round, the jobs in alternating order, `rounds` rounds."""

    def repeated(run, calls):
        for _ in range(calls):
            run()

    for run, _ in jobs.values():
        run()
    seconds = time_alternating({name: functools.partial(repeated, run, calls)
                                for name, (run, calls) in jobs.items()}, rounds)  # fmt: skip
    return {name: statistics.median(times) / jobs[name][1] for name, times in seconds.items()}


def time_forms(forms):
    """{name: median seconds a call} of `forms` ({name: function returning a tensor}), as the
    flags of `define_forms_flags` ask: `--steps` calls a round, `--rounds` rounds (time_calls)."""
    steps = flags.FLAGS.steps
    return time_calls({name: (lambda form=form: form().numpy(), steps)
                       for name, form in forms.items()}, flags.FLAGS.rounds)  # fmt: skip


def random_token_ids(rng, batch, seq):
    """Encoder inputs for `batch` sequences of `seq` random token ids each, without padding."""
    import tensorflow as tf

    shape = (batch, seq)
    return {"input_word_ids": tf.constant(rng.integers(1000, 30000, shape), tf.int32),
            "input_mask": tf.ones(shape, tf.int32), "input_type_ids": tf.zeros(shape, tf.int32)}


def stored_weights():
    """Whether `random_encoder` stores its weights in bfloat16: --stored_weights, which only a
    bfloat16 forward has."""
    FLAGS = flags.FLAGS
    return FLAGS.stored_weights and FLAGS.precision == "bfloat16"


def random_encoder(num_hidden_layers=12):
    """A random BERT-base encoder (with `num_hidden_layers` blocks) as `define_forward_flags`
    asks, and a batch of token ids for it, without padding."""
    import keras
    import numpy as np

    from keras_bert import BertConfig, BertEncoder

    FLAGS = flags.FLAGS
    keras.config.set_dtype_policy("float32" if FLAGS.precision == "float32" else "mixed_bfloat16")
    config = BertConfig(num_hidden_layers=num_hidden_layers)
    encoder = BertEncoder(**config.to_dict(), dtype="bfloat16" if stored_weights() else None)
    x = random_token_ids(np.random.default_rng(0), FLAGS.batch_size, FLAGS.seq_length)
    return encoder, x
