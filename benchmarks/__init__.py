"""Throughput and latency scripts; each prints JSON (see README, Speed)."""

import glob

from absl import app


def newest_export(task):
    """The newest version folder under exported/<task>; a usage error when there is none."""
    path = max(glob.glob(f"exported/{task}/[0-9]*"), key=lambda p: int(p.split("/")[-1]),
               default=None)  # fmt: skip
    if not path:
        raise app.UsageError(f"no export found under exported/{task}: pass --export")
    return path
