"""The canonical benches: each prints its report as JSON (README, Speed), and with
`--results=benchmarks/results.jsonl` also appends it there, one line a run."""

import datetime
import functools
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from absl import app, flags

flags.DEFINE_string("results", None, "Also append the report, with the date, the CPU, the "
                    "commit and the command, as one line of this JSON-lines file (the "
                    "project's record: benchmarks/results.jsonl).")


def cpu_name():
    """The CPU's model name and its bfloat16 and AVX-512 flags, as /proc/cpuinfo gives them
    (the machine's processor name where there is no /proc/cpuinfo)."""
    from keras_bert.training.distribute import cpu_fields  # not at import: workers of PyTorch

    fields = cpu_fields()
    if fields is None:
        return platform.processor() or platform.machine()
    cpu_flags = set(fields.get("flags", "").split())
    isa = [name for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if name in cpu_flags]
    return f"{fields.get('model name', 'unknown')} ({', '.join(isa)}; {os.cpu_count()} cores)"


def _commit():
    """The short hash of HEAD, "-dirty" added where tracked files differ from it; "" without
    git."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head, status = (subprocess.run(["git", *args], capture_output=True, text=True,
                                       timeout=10, check=False, cwd=here).stdout.strip()
                        for args in (("rev-parse", "--short", "HEAD"),
                                     ("status", "--porcelain", "--untracked-files=no")))  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}-dirty" if head and status else head


_COMMIT = _commit()  # read as the run starts: the code may be committed again before it ends


def _command():
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"python -m {spec.name}" if spec else f"python {sys.argv[0]}"
    return " ".join([program] + sys.argv[1:])


def print_report(report):
    """Prints `report` (a JSON-able dict) as indented JSON; with --results, also appends it to
    that file as one line: {"date", "cpu", "commit", "command", "report"}."""
    print(json.dumps(report, indent=2), flush=True)
    if flags.FLAGS.results:
        line = {"date": datetime.date.today().isoformat(), "cpu": cpu_name(),
                "commit": _COMMIT, "command": _command(),
                "report": report}  # fmt: skip
        with open(flags.FLAGS.results, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")  # one write: lines of two runs never interleave


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
    from keras_bert.model.column_parts import check_column_parts

    count = flags.FLAGS.column_parts
    try:
        return check_column_parts(config, count)
    except ValueError as e:
        raise app.UsageError(f"--column_parts={count}: {e}") from None




def tf_serving_module():
    """keras_bert/serving/tf_serving.py, loaded by its path: importing the package would import Keras."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "keras_bert", "serving", "tf_serving.py")
    spec = importlib.util.spec_from_file_location("tf_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module








def define_shape_flags():
    """The flags of a BERT forward pass's precision and input shape."""
    flags.DEFINE_enum("precision", "bfloat16", ["float32", "bfloat16"], "Compute precision.")
    flags.DEFINE_integer("batch_size", 8, "Sequences per step.")
    flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (no padding).")




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
