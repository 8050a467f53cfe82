"""The ops TensorFlow's executor ran, read from a profiler trace: which ops a graph ran after
Grappler and oneDNN rewrote it (not a timing). Importable without pytest, so that a test's
clean process can use it too."""

import pathlib


def ops_run(logdir):
    """The op types the executor ran, one entry a run, from the newest profiler trace under
    `logdir` (events named "node:OpType" on its tf_Compute threads)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    trace = max(pathlib.Path(logdir).glob("**/*.xplane.pb"))
    space.ParseFromString(trace.read_bytes())
    names = [plane.event_metadata[event.metadata_id].name for plane in space.planes
             for line in plane.lines if line.name.startswith("tf_Compute")
             for event in line.events]  # fmt: skip
    return [name.rsplit(":", 1)[1] for name in names if ":" in name and "::" not in name]
