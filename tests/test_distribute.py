"""Training under tf.distribute strategies, and resuming a killed run. Each case runs the GLUE
binary in processes of its own (forked by conftest.run_binary, or started afresh): logical CPU
devices and TF_CONFIG must be set before TensorFlow's runtime starts."""

import json
import os
import re
import signal
import socket
import sys

import keras
import numpy as np
import pytest
from conftest import DATA, run_binary, run_signalled, run_together


def glue_command(checkpoint, output_dir, *extra):
    return [sys.executable, "-m", "tasks.glue", "--task_name=SST-2",
            f"--data_dir={os.path.join(DATA, 'glue', 'SST-2')}", f"--init_checkpoint={checkpoint}",
            f"--output_dir={output_dir}", "--max_seq_length=32", "--train_batch_size=16",
            "--max_eval_examples=16", *extra]  # fmt: skip


def run(command):
    result = run_binary(command[1:])
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def weights(path):
    return [w.numpy() for w in keras.saving.load_model(path).weights]


@pytest.mark.slow
def test_mirrored_over_two_logical_cpus(tmp_path, tiny_checkpoint):
    # An odd batch: the replicas get 8 and 7 examples, which Keras's build from the first
    # batch failed on (distribute.build_from_one_replica).
    result = run(glue_command(tiny_checkpoint, tmp_path, "--strategy=mirrored",
                              "--num_cpu_devices=2", "--num_train_epochs=1",
                              "--train_batch_size=15"))  # fmt: skip
    assert "with 2 replicas" in result.stderr
    assert json.loads((tmp_path / "metrics.json").read_text())[0]["epoch"] == 1


# A task model made under a MirroredStrategy the caller built (not distribute.create_strategy),
# fitted on batches of 3 that two replicas share as 2 and 1. Before and after the fit, whether
# autotuning runs in the datasets the strategy feeds each device from, for an input without it
# (distribute.device_datasets_without_autotuning; the fit installs it).
_MIRRORED_BY_HAND = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras_bert
from keras_bert.training import batching
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])

def device_autotuning():
    dataset = batching.without_autotuning(tf.data.Dataset.range(8).batch(4))
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    devices = iterator._iterators[0]._iterator._device_iterators
    return [device._dataset.options().autotune.enabled is not False for device in devices]

print("before", device_autotuning())
with strategy.scope():
    model = keras_bert.BertClassifier.from_checkpoint(sys.argv[1], sequence_length=16)
    model.compile()
model.fit(["a good film", "a dull film", "fine"], [1, 0, 1], batch_size=3, verbose=0)
print("after", device_autotuning())
with strategy.scope():
    try:  # XLA cannot place one step over several devices: refused, before any graph runs
        model.compile(jit_compile=True)
    except ValueError as e:
        print(e)
print("jit_compile", model.jit_compile)
print("replicas", strategy.num_replicas_in_sync)
"""


@pytest.mark.slow
def test_a_task_model_fits_uneven_shares_under_a_strategy_made_by_hand(tiny_checkpoint):
    result = run([sys.executable, "-c", _MIRRORED_BY_HAND, tiny_checkpoint])
    # TensorFlow's own: each device's dataset runs autotuning whatever its input's options say.
    assert result.stdout.strip().splitlines()[-5:] == [
        "before [True, True]", "after [False, False]",
        "jit_compile=True under a MirroredStrategy of 2 replicas: Keras compiles all the "
        "replicas' step as one XLA computation, which XLA cannot place over several devices; "
        "compile with jit_compile=False (or train on one device, or a TPU)",
        "jit_compile False", "replicas 2"]


@pytest.mark.slow
def test_two_workers_end_with_identical_weights(tmp_path, tiny_checkpoint):
    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    command = glue_command(tiny_checkpoint, tmp_path, "--strategy=multi_worker",
                           "--num_train_epochs=2")  # fmt: skip
    for worker in run_together([(command[1:], {**os.environ, "TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}})}) for i in range(2)]):
        assert worker.returncode == 0, worker.stderr[-3000:]
    chief = weights(str(tmp_path / "model.keras"))
    other = weights(str(tmp_path / "worker_1" / "model.keras"))
    initial = weights_of_checkpoint(tiny_checkpoint)
    assert len(chief) == len(other)
    for a, b in zip(chief, other):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(chief[0], initial[0])  # and they did train


def weights_of_checkpoint(path):
    from keras_bert import load_checkpoint

    return [w.numpy() for w in load_checkpoint(path).encoder.weights]


@pytest.mark.slow
def test_killed_run_resumes_from_its_backup(tmp_path, tiny_checkpoint):
    """Killed after its first backup (mid-epoch: every 3 of an epoch's 4 batches) and run
    again, a run ends in the bits of a run never stopped: the same batches in the same order,
    the same dropout masks, the same optimizer state."""
    extra = ["--num_train_epochs=4", "--max_train_examples=64", "--save_checkpoints_steps=3"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    command = glue_command(tiny_checkpoint, killed, *extra)
    first = run_signalled(command[1:], killed / "backup" / "latest.weights.h5", signal.SIGKILL)
    assert first.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    metrics = killed / "metrics.json"  # written at each epoch's end; a kill may come first
    done = json.loads(metrics.read_text()) if metrics.exists() else []
    result = run(command)
    resumed = re.search(r"resuming from the backup at step (\d+) of (\d+)\n", result.stderr)
    assert resumed and int(resumed.group(1)) > 0  # resumed, not started over
    total = resumed.group(2)
    assert re.findall(r"training steps \d+ to (\d+)\n", result.stderr)[-1] == total
    history = json.loads(metrics.read_text())
    assert [h["epoch"] for h in history] == list(range(1, 5))
    assert history[: len(done)] == done  # what the killed run wrote is kept
    run(glue_command(tiny_checkpoint, whole, *extra))
    resumed_weights, whole_weights = weights(str(killed / "model.keras")), weights(str(whole / "model.keras"))
    assert len(resumed_weights) == len(whole_weights)
    for a, b in zip(resumed_weights, whole_weights):
        np.testing.assert_array_equal(a, b)
    assert json.loads((whole / "metrics.json").read_text()) == history


@pytest.mark.slow
def test_sigterm_says_in_one_line_that_the_command_resumes(tmp_path, tiny_checkpoint):
    # SIGTERM is what `kill`, `timeout`, job schedulers and container runtimes stop a job with;
    # Ctrl-C takes the same path (test_extract_features: `interrupted:`, exit status 130).
    command = glue_command(tiny_checkpoint, tmp_path, "--num_train_epochs=4",
                           "--max_train_examples=64", "--save_checkpoints_steps=3")  # fmt: skip
    first = run_signalled(command[1:], tmp_path / "backup" / "latest.weights.h5", signal.SIGTERM)
    stderr = first.stderr
    assert first.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"terminated: run the same command again to go on from the last backup in "
        f"{tmp_path / 'backup'} (written every 3 steps and at the end of each epoch)")
    result = run(command)
    assert re.search(r"resuming from the backup at step [1-9]\d* of 16\n", result.stderr)


@pytest.mark.slow
def test_a_full_disk_while_backing_up_is_one_line_and_leaves_no_partial_backup(
        tmp_path, tiny_checkpoint):  # fmt: skip
    """The disk is simulated by a file-size limit of 2 MB, less than the tiny model's backup."""
    command = glue_command(tiny_checkpoint, tmp_path, "--num_train_epochs=2",
                           "--max_train_examples=32")  # fmt: skip
    code = ("import resource, runpy, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # a write past it fails instead
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))\n"
            f"sys.argv = {['tasks.glue', *command[3:]]!r}\n"
            "runpy.run_module('tasks.glue', run_name='__main__')\n")  # fmt: skip
    result = run_binary(["-c", code])
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: could not write the backup {tmp_path / 'backup' / 'latest.weights.h5'} (the "
        "file grew past the file-size limit (ulimit -f)); make room, then run the same command "
        "again: it goes on from the previous backup")
    assert os.listdir(tmp_path / "backup") == []


def cpu_info(tmp_path, vendor, flags):
    """A /proc/cpuinfo of two cores, each listing `flags`."""
    core = f"processor\t: {{}}\nvendor_id\t: {vendor}\nmodel name\t: A CPU\nflags\t\t: {flags}\n"
    path = tmp_path / f"cpuinfo-{vendor}-{len(flags)}"
    path.write_text("\n".join(core.format(n) for n in range(2)))
    return str(path)


@pytest.mark.parametrize("vendor, flags, fast", [
    ("GenuineIntel", "fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8", True),
    ("AuthenticAMD", "fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),
    ("GenuineIntel", "fpu sse2 avx2 avx512f avx512_bf16 avx512_fp16", False),  # no AMX
    ("AuthenticAMD", "fpu sse2 avx avx2 fma f16c", False),  # AVX2 alone
    ("GenuineIntel", "fpu sse2 avx avx2", False),
])  # fmt: skip
def test_bfloat16_counts_as_fast_only_on_cpus_measured_faster(tmp_path, vendor, flags, fast):
    from keras_bert.training import distribute

    answer, why = distribute.cpu_bfloat16_is_fast(cpu_info(tmp_path, vendor, flags))
    assert answer is fast and why.startswith("the CPU ")
    missing, why = distribute.cpu_bfloat16_is_fast(str(tmp_path / "absent"))
    assert missing is False and "unreadable" in why
