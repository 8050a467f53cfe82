"""Op times and each session call's ops by thread from a TensorFlow profiler trace, and oneDNN's
kernel times from its verbose lines (no flags: tests import it too)."""

import bisect
import collections
import glob
import re

import numpy as np
from tensorflow.tsl.profiler.protobuf import xplane_pb2


def _trace(logdir):
    """The newest profiler trace in `logdir`, as an XSpace."""
    space = xplane_pb2.XSpace()
    with open(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1], "rb") as f:
        space.ParseFromString(f.read())
    return space


def _is_op(name):
    return ":" in name and "::" not in name  # "node:OpType", not the executor's own spans


def op_times(logdir, steps):
    """{(node name, op type): ms per step} from the profiler's trace in `logdir`."""
    space = _trace(logdir)
    times = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # the executor's threads
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if _is_op(name):
                    times[tuple(name.rsplit(":", 1))] += event.duration_ps / 1e9 / steps
    return times


def session_calls(logdir):
    """Each `Session.run` call in the profiler's trace in `logdir`, in order, as (start, end,
    ops), in microseconds on the trace's clock; `ops`: (start, end, thread, node name, op type)
    of each op that TensorFlow's inter-op threads started during the call, in order, `thread`
    the index of the thread that ran it."""
    calls, ops = [], []
    for plane in _trace(logdir).planes:
        threads = [line.name for line in plane.lines if line.name.startswith("tf_Compute")]
        for line in plane.lines:
            thread = threads.index(line.name) if line.name in threads else None
            base = line.timestamp_ns * 1000  # picoseconds, as the events' offsets
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                start = (base + event.offset_ps) / 1e6
                end = start + event.duration_ps / 1e6
                if thread is not None and _is_op(name):
                    node, op_type = name.rsplit(":", 1)
                    ops.append((start, end, thread, node, op_type))
                elif name.startswith("SessionRun"):
                    calls.append((start, end))
    calls.sort()
    ops.sort()
    starts = [op[0] for op in ops]
    return [(start, end, ops[bisect.bisect_left(starts, start) : bisect.bisect_left(starts, end)])
            for start, end in calls]  # fmt: skip


# Printed around the steps whose oneDNN lines count (onednn_kernels.py).
START, END = "onednn_kernels: start", "onednn_kernels: end"


def _kernel_runs(lines):
    """(CPU line, [(kind, implementation, post-ops, shape, milliseconds)] of each kernel run
    between the markers) from oneDNN's verbose lines."""
    runs, isa, inside = [], None, False
    for line in lines:
        line = line.strip()
        if line in (START, END):
            inside = line == START
            continue
        fields = line.split(",")
        if fields[0] != "onednn_verbose":
            continue
        if "info" in fields and "isa:" in line:
            # The rest of the line: an ISA's name can hold commas ("Intel AVX-512 with
            # float16, Intel DL Boost and bfloat16 support and Intel AMX ...").
            isa = line[line.index("isa:") + len("isa:"):]
        if not inside or "exec" not in fields:
            continue
        # ...,exec,<engine>,<kind>,<implementation>,<propagation>,<memory>,<attributes>,
        # <auxiliary>,<shape>,<milliseconds>
        at = fields.index("exec")
        kind, implementation, attributes = fields[at + 2], fields[at + 3], fields[at + 6]
        post_ops = [a[len("attr-post-ops:"):] for a in attributes.split()
                    if a.startswith("attr-post-ops:")]  # fmt: skip
        runs.append((kind, implementation, post_ops, fields[-2], float(fields[-1])))
    return isa, runs


def kernel_times(lines, steps, top):
    """oneDNN's verbose lines between the markers as per-step sums (the `top` shapes), and its
    CPU line."""
    by_kind, by_implementation, by_shape = (collections.Counter() for _ in range(3))
    calls = collections.Counter()
    isa, runs = _kernel_runs(lines)
    for kind, implementation, post_ops, shape, ms in runs:
        named = " ".join(name for name in (kind, implementation) if name)  # gemm_api has none
        row = " ".join([named, shape, *post_ops])
        for times, key in ((by_kind, kind), (by_implementation, named), (by_shape, row)):
            times[key] += ms
            calls[key] += 1

    def table(times, top=None):
        return {key: {"ms_per_step": round(ms / steps, 3), "calls_per_step": calls[key] / steps}
                for key, ms in times.most_common(top)}  # fmt: skip

    return {"cpu_isa": isa, "ms_per_step": round(sum(by_kind.values()) / steps, 3),
            "by_kind": table(by_kind), "by_implementation": table(by_implementation),
            "by_shape": table(by_shape, top)}  # fmt: skip


def inner_product_rows(lines, steps):
    """oneDNN's inner products between the markers, by their weights' shape and post-ops
    ("ic384oc768 eltwise_gelu_erf"), each fitted over the rows it ran on (its `mb`, a served
    sentence's tokens): {shape: {"calls_per_step", "mean_rows", "mean_us", "fixed_us",
    "us_per_row", "fixed_share"}}. The fit is a line through each row count's median time,
    weighted by that count's calls: `fixed_us` what a product costs whatever its rows (reading
    its weights, starting the kernel), `us_per_row` what each row adds, `fixed_share` the fixed
    cost over the mean product's time. Both are None for a shape seen at one row count."""
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    for kind, _, post_ops, shape, ms in _kernel_runs(lines)[1]:
        match = re.fullmatch(r"mb(\d+)(\D.*)", shape)
        if kind == "inner_product" and match:
            weights = " ".join([match.group(2), *post_ops])
            times[weights][int(match.group(1))].append(ms * 1e3)
    report = {}
    for weights, by_rows in sorted(times.items()):
        counts = sorted(by_rows)
        rows = np.array(counts, dtype=float)
        calls = np.array([len(by_rows[n]) for n in counts], dtype=float)
        medians = np.array([np.median(by_rows[n]) for n in counts])
        mean_rows = float(np.average(rows, weights=calls))
        mean_us = sum(sum(us) for us in by_rows.values()) / calls.sum()
        fixed = per_row = share = None
        if len(rows) > 1:
            weight = np.sqrt(calls)
            fit = np.linalg.lstsq(np.stack([weight, rows * weight], axis=1), medians * weight,
                                  rcond=None)[0]  # fmt: skip
            fixed, per_row = round(float(fit[0]), 2), round(float(fit[1]), 3)
            share = round(float(fit[0]) / mean_us, 3)
        report[weights] = {"calls_per_step": float(calls.sum() / steps),
                           "mean_rows": round(mean_rows, 1), "mean_us": round(mean_us, 2),
                           "fixed_us": fixed, "us_per_row": per_row,
                           "fixed_share": share}  # fmt: skip
    return report
