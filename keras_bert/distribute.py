"""tf.distribute strategies by name, and what Keras's model.fit needs to train under them."""

import json
import os

import tensorflow as tf
from absl import logging

STRATEGIES = ("cpu", "one_device", "mirrored", "multi_worker", "tpu")


def create_strategy(name, num_cpu_devices=1, tpu_address=None):
    """Builds a tf.distribute strategy.

    Args:
      name: one of STRATEGIES. "cpu" and "one_device" run on one device (the first GPU for
        "one_device", if any); "mirrored" replicates over this machine's GPUs, or over
        `num_cpu_devices` logical CPUs where there is no GPU; "multi_worker" reads the cluster
        from the TF_CONFIG environment variable; "tpu" connects to `tpu_address`.
      num_cpu_devices: logical CPU devices to create (before TensorFlow starts its runtime), so
        that "mirrored" and "multi_worker" can run several replicas on a CPU-only machine.
      tpu_address: the TPU's name or grpc:// address ("" or None means a local TPU).
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; use one of {STRATEGIES}")
    if num_cpu_devices > 1:
        _split_cpu(num_cpu_devices)
    if name == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        devices = [d.name for d in tf.config.list_logical_devices("GPU")]
        devices = devices or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable "
                             "(cluster and task of this worker)")  # fmt: skip
        logging.info("TF_CONFIG: %s", json.loads(os.environ["TF_CONFIG"]))
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _split_cpu(count):
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError as e:  # the runtime had started already
        logical = len(tf.config.list_logical_devices("CPU"))
        if logical != count:
            raise RuntimeError(f"cannot split the CPU into {count} devices after TensorFlow "
                               f"started (it has {logical}): {e}") from e  # fmt: skip
