"""Op times from a TensorFlow profiler trace (no flags: tests import it too)."""

import collections
import glob

from tensorflow.tsl.profiler.protobuf import xplane_pb2


def op_times(logdir, steps):
    """{(node name, op type): ms per step} from the profiler's trace in `logdir`."""
    space = xplane_pb2.XSpace()
    with open(sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1], "rb") as f:
        space.ParseFromString(f.read())
    times = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # the executor's threads
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and "::" not in name:  # "node:OpType", not the executor's spans
                    times[tuple(name.rsplit(":", 1))] += event.duration_ps / 1e9 / steps
    return times
