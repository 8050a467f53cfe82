"""Op times and each session call's ops by thread from a TensorFlow profiler trace, and oneDNN's
kernel times from its verbose lines (no flags: tests import it too)."""

import bisect
import collections
import glob

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


def kernel_times(lines, steps, top):
    """oneDNN's verbose lines between the markers as per-step sums (the `top` shapes), and its
    CPU line."""
    by_kind, by_implementation, by_shape = (collections.Counter() for _ in range(3))
    calls = collections.Counter()
    isa, inside = None, False
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
        shape, ms = fields[-2], float(fields[-1])
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
