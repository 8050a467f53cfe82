"""Throughput and latency scripts; each prints JSON (see README, Speed)."""

import glob
import os
import time

from absl import app


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


def tf_serving_module():
    """keras_bert/tf_serving.py, loaded by its path: importing the package would import Keras."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "keras_bert", "tf_serving.py")
    spec = importlib.util.spec_from_file_location("tf_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
