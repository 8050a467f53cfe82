"""What loading an export as TF Serving loads it costs: time and memory, printed as JSON.

    python -m benchmarks.serving_load --exports=exported/sst-2/1[,other/version/folder]
        [--processes 3]

Loads each export in fresh processes, alternating between the exports (the machine is shared
and noisy), with keras_bert/serving/tf_serving.py's LoadedLikeTfServing (one graph in a session,
TensorFlow and tensorflow-text only, as TF Serving runs it), and sends it one request: a short
sentence in every string input. Reports, per export, medians over its processes of the seconds
to load, the seconds to the first answer (the graph optimiser runs then) and the resident memory
the process gained, at the end and at its peak (MiB; read from /proc/self/status, so Linux
only). README, Export and TF Serving, has why an export keeps its weights in variables.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

import benchmarks

FLAGS = flags.FLAGS
flags.DEFINE_list("exports", None, "SavedModel version folders to compare (such as "
                  "exported/sst-2/1).")  # fmt: skip
flags.DEFINE_integer("processes", 3, "Fresh processes per export.")
flags.DEFINE_string("child", None, "Internal: load this export and print one JSON line.")

SENTENCE = "A gripping, beautifully acted film."


def memory_mib(field):
    """A /proc/self/status memory field (VmRSS: resident now; VmHWM: its peak), in MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def load_once(export):
    """{measure: value} of one load and first request of `export`, in this process."""
    import numpy as np
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, which TF Serving bundles)

    from benchmarks import tf_serving_module

    LoadedLikeTfServing = tf_serving_module().LoadedLikeTfServing
    before = memory_mib("VmRSS")
    start = time.perf_counter()
    served = LoadedLikeTfServing(export)
    loaded = time.perf_counter()
    served(**{name: np.array([SENTENCE], object) for name in served.input_names})
    answered = time.perf_counter()
    return {"load_s": loaded - start, "first_answer_s": answered - loaded,
            "rss_added_mib": memory_mib("VmRSS") - before,
            "peak_rss_added_mib": memory_mib("VmHWM") - before}  # fmt: skip


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.child:
        print(json.dumps(load_once(FLAGS.child)))
        return
    if not FLAGS.exports:
        raise app.UsageError("--exports is required: one or more SavedModel version folders")
    for export in FLAGS.exports:  # before any process starts
        if not os.path.isfile(os.path.join(export, "saved_model.pb")):
            raise app.UsageError(f"--exports: {export} holds no saved_model.pb; give SavedModel "
                                 "version folders, such as exported/sst-2/1")  # fmt: skip
    runs = {export: [] for export in FLAGS.exports}
    for p in range(FLAGS.processes):
        for export in FLAGS.exports if p % 2 == 0 else FLAGS.exports[::-1]:
            command = [sys.executable, "-m", "benchmarks.serving_load", f"--child={export}"]
            child = subprocess.run(command, capture_output=True, text=True)
            if child.returncode:
                raise app.UsageError(f"loading {export} failed: "
                                     f"{(child.stderr.strip().splitlines() or ['?'])[-1]}")
            runs[export].append(json.loads(child.stdout.strip().splitlines()[-1]))
    report = {"processes": FLAGS.processes,
              "results": {export: {key: statistics.median(run[key] for run in done)
                                   for key in done[0]}
                          for export, done in runs.items()}}  # fmt: skip
    benchmarks.print_report(report)


if __name__ == "__main__":
    flags.adopt_module_key_flags(benchmarks)  # --help lists --results
    app.run(main)
