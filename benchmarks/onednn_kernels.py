"""Which oneDNN kernels a BERT forward pass runs, and oneDNN's own time for each, as JSON.

    python -m benchmarks.onednn_kernels [--precision=bfloat16 --stored_weights]
    python -m benchmarks.onednn_kernels --form=ceiling    # the bare products of ceiling.py

TensorFlow hands its products, LayerNorms and softmax to oneDNN, which picks an implementation
for each from what the CPU has, and its name says which: `brg_matmul:avx512_core_amx` runs on
AMX tiles, `brg_matmul:avx512_core_bf16` on AVX512-BF16, `x64:gemm:jit` is oneDNN's GEMM
(an inner product with plain weights runs on it). A dense product fused with its bias and GELU
shows the GELU among its post-ops. The profiler (profile_encoder.py) names TensorFlow's ops;
this names the kernels under them, so it tells whether the encoder's products run on the same
kernels as the bare products it is measured against (`--form=ceiling`).

The forward runs in a child process with ONEDNN_VERBOSE=1: oneDNN then prints a line for each
kernel it runs, with its time. The steps after two warm-up steps are summed, per step: by kind,
by kind and implementation, and by shape (with the post-ops). The child runs one op at a time,
so a kernel's time is its own, comparable between the forward and the ceiling shape by shape.
Printing costs a little time; the times are for comparing kernels, not for the forward's speed
(peers.py, ceiling.py).
"""

import json
import os
import subprocess
import sys

from absl import app, flags

import benchmarks
from benchmarks import define_forward_flags, stored_weights
from benchmarks.profiling import END, START, kernel_times

FLAGS = flags.FLAGS
define_forward_flags()
flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
flags.DEFINE_enum("form", "forward", ["forward", "ceiling"], "forward: a random BERT-base "
                  "encoder's forward pass; ceiling: the same shapes' bare matrix products "
                  "(benchmarks/ceiling.py, independent, weights in constants).")
flags.DEFINE_integer("layers", 12, "Encoder blocks (BERT-base has 12).", lower_bound=1)
flags.DEFINE_integer("steps", 3, "Steps summed (after 2 warm-up steps).", lower_bound=1)
flags.DEFINE_integer("top", 25, "Rows of the by-shape table.", lower_bound=1)
flags.DEFINE_bool("child", False, "Internal: run the steps in this process, oneDNN printing.")


def run_steps():
    """The child: warm up, then run --steps steps between the two markers."""
    import tensorflow as tf

    from benchmarks import random_encoder

    # One op at a time, so that each kernel's time is its own: two independent products (a
    # block's query, key and value; the ceiling's) would otherwise share the cores.
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if FLAGS.form == "forward":
        encoder, x = random_encoder(FLAGS.layers)
        forward = tf.function(lambda x: encoder(x, training=False)["sequence_output"])

        def step():
            forward(x).numpy()
    else:
        from benchmarks.ceiling import matmul_ceiling
        from keras_bert import BertConfig

        products = matmul_ceiling(BertConfig(num_hidden_layers=FLAGS.layers), FLAGS.batch_size,
                                  FLAGS.seq_length, tf.as_dtype(FLAGS.precision))  # fmt: skip

        def step():
            products().numpy()

    for _ in range(2):
        step()
    print(START, flush=True)
    for _ in range(FLAGS.steps):
        step()
    print(END, flush=True)


def main(argv):
    del argv
    if FLAGS.child:
        run_steps()
        return
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    child = subprocess.run([sys.executable, "-m", "benchmarks.onednn_kernels", *sys.argv[1:],
                            "--child"], env=env, capture_output=True, text=True)  # fmt: skip
    if child.returncode:
        sys.exit(f"onednn_kernels: the {FLAGS.form} failed:\n{child.stderr[-3000:]}")
    report = kernel_times(child.stdout.splitlines(), FLAGS.steps, FLAGS.top)
    if not report["by_kind"]:
        sys.exit("onednn_kernels: oneDNN ran no kernels: this TensorFlow runs without oneDNN "
                 "(TF_ENABLE_ONEDNN_OPTS=0, or a build without it); nothing to report.")
    stored = FLAGS.form == "forward" and stored_weights()
    print(json.dumps({"form": FLAGS.form, "precision": FLAGS.precision, "stored_weights": stored,
                      "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length,
                      "layers": FLAGS.layers, "steps": FLAGS.steps, **report}, indent=2))


if __name__ == "__main__":
    app.run(main)
