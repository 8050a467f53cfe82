"""tf.distribute strategies by name, and what Keras's model.fit needs to train under them."""

import json
import os
import socket

import tensorflow as tf
from absl import logging

from keras_bert.training.batching import without_autotuning

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
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        patch_keras_for_multi_worker()
        return strategy
    if tpu_address and tpu_address.startswith("grpc://"):
        _check_answers(tpu_address)
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address or "")
    except (ValueError, OSError) as e:  # no local TPU; a name Cloud TPU's metadata lacks
        where = f"named {tpu_address!r}" if tpu_address else "on this machine (no TPU name given)"
        raise ValueError(f"--strategy=tpu: no TPU found {where} ({e}); pass the TPU's name or "
                         "grpc:// address with --tpu") from None  # fmt: skip
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _check_answers(address, timeout=10):
    """Refuses a grpc://host:port TPU address where nothing accepts a connection: TensorFlow
    would try to connect to it for ever."""
    host, _, port = address[len("grpc://"):].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--strategy=tpu: {address} is not a grpc://host:port address")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ValueError(f"--strategy=tpu: nothing answers at {address} ({e}); check the "
                         "address, or pass the TPU's name with --tpu") from None  # fmt: skip


def is_tpu(strategy):
    """Whether `strategy` runs on TPUs (whose steps are all compiled with XLA)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


CPU_INFO = "/proc/cpuinfo"


def cpu_fields(cpu_info=CPU_INFO):
    """The first core's fields of `cpu_info` (Linux's /proc/cpuinfo: "model name", "flags",
    "vendor_id"...) as {name: value}; None where it cannot be read."""
    try:
        with open(cpu_info, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fields = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first core's
    return fields


def cpu_bfloat16_is_fast(cpu_info=None):
    """Whether this CPU's bfloat16 matrix products outrun its float32 ones, and why, read from
    the CPU's flags in `cpu_info` (Linux's /proc/cpuinfo).

    Yes with AMX, and with AVX512-BF16 on AMD; no with AVX512-BF16 but no AMX on Intel
    (bfloat16 at half float32's speed there), with AVX2 alone, and where the flags cannot be
    read (not Linux): float32 runs at full speed everywhere.
    Returns (bool, reason).
    """
    cpu_info = cpu_info or CPU_INFO
    fields = cpu_fields(cpu_info)
    if fields is None:
        return False, f"{cpu_info} is unreadable, so the CPU's bfloat16 support is unknown"
    flags = set(fields.get("flags", "").split())
    if "amx_bf16" in flags:
        return True, "the CPU has AMX"
    if "avx512_bf16" in flags and fields.get("vendor_id") == "AuthenticAMD":
        return True, "the CPU is an AMD one with AVX512-BF16"
    if "avx512_bf16" in flags:
        return False, "the CPU has AVX512-BF16 but no AMX, where bfloat16 products are slower"
    return False, "the CPU has no bfloat16 instructions (AMX or AVX512-BF16)"


def bfloat16_is_fast(strategy):
    """Whether `strategy`'s devices compute bfloat16 faster than float32, and why: TPUs and
    GPUs of compute capability 8.0 or more (A100, H100, RTX 30 and later) do; CPUs as
    `cpu_bfloat16_is_fast` says. Returns (bool, reason)."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return True, "TPUs compute in bfloat16"
    devices = strategy.extended.worker_devices
    if any("GPU" in device.upper() for device in devices):
        gpus = tf.config.list_physical_devices("GPU")
        capabilities = [tf.config.experimental.get_device_details(gpu).get(
            "compute_capability", (0, 0)) for gpu in gpus]  # fmt: skip
        if capabilities and min(capabilities) >= (8, 0):
            return True, f"the GPUs have compute capability {min(capabilities)}"
        return False, f"the GPUs' compute capabilities {capabilities} are below (8, 0)"
    return cpu_bfloat16_is_fast()


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


def _first_replica(strategy, batch):
    """`batch` with each distributed value replaced by its first replica's (this worker's)."""

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tf.nest.map_structure(local, batch)


def build_from_one_replica():
    """Makes Keras 3 build a model made under a strategy from one replica's share of its first
    batch. Keras's TensorFlow trainer averages the whole batch over the replicas with
    `strategy.reduce` first, which fails
      - under MultiWorkerMirroredStrategy on a PerReplica batch (keras-team/keras issue 20585);
      - under MirroredStrategy when the replicas' shares differ in size (a global batch of 3
        on 2 replicas, or less data than one batch): TensorFlow's AddN refuses to add a (2, 16)
        and a (1, 16) batch of token ids.
    The batch only supplies shapes and dtypes, so one replica's share does as well. Installed
    once (it replaces a method of Keras's trainer): by a task model fitted or evaluated under a
    strategy of several replicas (BertTask), whoever made the strategy, and by
    `patch_keras_for_multi_worker`.
    """
    from keras.src.backend.tensorflow import trainer

    if getattr(trainer, "_keras_bert_build_patch", False):
        return
    if not hasattr(trainer, "TensorFlowTrainer"):
        raise RuntimeError("this Keras version has no keras.src.backend.tensorflow.trainer."
                           "TensorFlowTrainer; keras_bert's workaround needs updating")  # fmt: skip

    def maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None:
            for _, _, batches in iterator:
                data_batch = _first_replica(self.distribute_strategy, next(batches))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    trainer.TensorFlowTrainer._maybe_symbolic_build = maybe_symbolic_build
    trainer._keras_bert_build_patch = True


def device_datasets_without_autotuning():
    """Makes the datasets that TensorFlow's MultiDeviceIterator feeds each device from run
    without tf.data's autotuning thread.

    Under a strategy (OneDeviceStrategy included), Keras's fit, evaluate and predict hand their
    dataset to `experimental_distribute_dataset`, whose iterator feeds each device from a dataset
    of its own: a generator over the input's iterator and a one-element prefetch. That dataset
    does not inherit the input's options, so autotuning is on there whatever the input says
    (`batching.without_autotuning`), and destroying the iterator at the end of each call waits
    for its thread's sleep, which grows the longer the call runs (the main thread waits in
    RootDataset::Iterator's destructor for model::Model::OptimizeLoop's thread), up to a minute
    after a long fit's last step. Such a dataset holds nothing to tune. Installed once (it replaces a function of
    TensorFlow's), by a task model fitted, evaluated or predicting under a strategy (BertTask).
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as iterators

    if getattr(iterators, "_keras_bert_autotuning_patch", False):
        return
    create = getattr(iterators, "_create_device_dataset", None)
    if create is None:
        raise RuntimeError("this TensorFlow version has no tensorflow.python.data.ops."
                           "multi_device_iterator_ops._create_device_dataset; keras_bert's "
                           "workaround needs updating")  # fmt: skip

    def create_without_autotuning(*args, **kwargs):
        return without_autotuning(create(*args, **kwargs))

    iterators._create_device_dataset = create_without_autotuning
    iterators._keras_bert_autotuning_patch = True


def patch_keras_for_multi_worker():
    """Makes Keras 3's `model.fit` work under MultiWorkerMirroredStrategy.

    This is the project's workaround for keras-team/keras issue 20585. Keras's TensorFlow
    trainer fails there in two places:
      1. Before the first step it builds the model from a batch averaged across replicas with
         `strategy.reduce`, which fails on a multi-worker PerReplica batch
         (`build_from_one_replica`).
      2. It averages the logs of each step across workers with `strategy.reduce(..., axis=0)`,
         which fails for scalar logs (loss, metrics): those are reduced over no axis instead.
    Both replacements wrap Keras internals and are installed once, only when a multi-worker
    strategy is created. Delete this function when Keras fixes the issue.
    """
    from keras.src.backend.tensorflow import trainer

    build_from_one_replica()
    if getattr(trainer, "_keras_bert_multi_worker_patch", False):
        return
    for name in ("reduce_per_replica", "_collective_all_reduce_multi_worker"):
        if not hasattr(trainer, name):
            raise RuntimeError(
                f"this Keras version has no keras.src.backend.tensorflow.trainer.{name}; "
                "keras_bert's multi-worker workaround needs updating"
            )
    reduce_per_replica = trainer.reduce_per_replica

    def reduce_logs(values, strategy, reduction):
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):

            def mean(value):
                local = _first_replica(strategy, value)
                return strategy.reduce("MEAN", value, axis=0 if local.shape.rank else None)

            return tf.nest.map_structure(mean, values)
        return reduce_per_replica(values, strategy, reduction)

    trainer.reduce_per_replica = reduce_logs
    trainer._keras_bert_multi_worker_patch = True
