"""Which oneDNN kernels a BERT forward pass runs, and oneDNN's own time for each, as JSON.

    python -m benchmarks.onednn_kernels [--precision=bfloat16 --stored_weights]
    python -m benchmarks.onednn_kernels --form=ceiling    # the bare products of ceiling.py
    python -m benchmarks.onednn_kernels --form=served [--export=exported/sst-2/2 --sentences=872]

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

`--form=served` runs an export as TF Serving runs it (`keras_bert/tf_serving.py`, one thread an
op, its column parts side by side on the inter-op threads, as served) on the first `--sentences`
SST-2 dev sentences, one a call, a pass to warm up and `--steps` passes timed; a step of the
report is then one served sentence. Its report adds `inner_products_by_rows`: each product
shape fitted over the rows it ran on (a sentence's tokens), what it costs whatever its rows
(`fixed_us`: reading its weights, starting the kernel) and what each row adds (`us_per_row`;
`benchmarks.call_costs --rows=512` gives a large batch's, for comparison). All of a bfloat16
export's products run as inner products; of a float32 export's partial products of rows (its
attention output and down products) oneDNN runs some on its GEMM function (`gemm_api`, in
`by_kind`, outside the fit). TensorFlow's oneDNN setting is then the environment's, as in TF
Serving (with oneDNN off there is nothing to report); set TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 for a
bfloat16 export, as it is best served.
"""

import json
import os
import subprocess
import sys

from absl import app, flags

import benchmarks
from benchmarks import (
    define_forward_flags,
    define_served_export_flags,
    served_export_path,
    stored_weights,
)
from benchmarks.profiling import END, START, inner_product_rows, kernel_times

FLAGS = flags.FLAGS
define_forward_flags()
flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
flags.DEFINE_enum("form", "forward", ["forward", "ceiling", "served"], "forward: a random "
                  "BERT-base encoder's forward pass; ceiling: the same shapes' bare matrix "
                  "products (benchmarks/ceiling.py, independent, weights in constants); served: "
                  "an export serving SST-2 dev sentences as TF Serving runs it (--export).")
define_served_export_flags("single-sentence", 872, "pass (--form=served)")
flags.DEFINE_integer("layers", 12, "Encoder blocks (BERT-base has 12).", lower_bound=1)
flags.DEFINE_integer("steps", 3, "Steps summed (after 2 warm-up steps); with --form=served, "
                     "passes over the sentences (after one).", lower_bound=1)
flags.DEFINE_integer("top", 25, "Rows of the by-shape table.", lower_bound=1)
flags.DEFINE_bool("child", False, "Internal: run the steps in this process, oneDNN printing.")


def run_steps():
    """The child: warm up, then run --steps steps between the two markers."""
    if FLAGS.form == "served":
        # Not a step's forward: the export's calls as served, and no import of keras_bert,
        # which would turn oneDNN on where TF Serving leaves it off.
        import tensorflow_text  # noqa: F401  (the tokenizer's ops, which TF Serving bundles)

        from benchmarks import served_sentence_export

        _, served, requests = served_sentence_export()

        def step():  # a pass over the sentences
            for request in requests:
                served(sentence=request)

        warm_ups = 1  # a pass builds each row count's kernels
    else:
        step, warm_ups = forward_or_ceiling(), 2
    for _ in range(warm_ups):
        step()
    print(START, flush=True)
    for _ in range(FLAGS.steps):
        step()
    print(END, flush=True)


def forward_or_ceiling():
    """A step of --form=forward or ceiling, to be run one op at a time."""
    import tensorflow as tf

    from benchmarks import random_encoder

    # One op at a time, so that each kernel's time is its own: two independent products (a
    # block's query, key and value; the ceiling's) would otherwise share the cores.
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if FLAGS.form == "forward":
        encoder, x = random_encoder(FLAGS.layers)
        forward = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
        return lambda: forward(x).numpy()
    from benchmarks.ceiling import matmul_ceiling
    from keras_bert import BertConfig

    products = matmul_ceiling(BertConfig(num_hidden_layers=FLAGS.layers), FLAGS.batch_size,
                              FLAGS.seq_length, tf.as_dtype(FLAGS.precision))  # fmt: skip
    return lambda: products().numpy()


def main(argv):
    del argv
    if FLAGS.child:
        run_steps()
        return
    served = FLAGS.form == "served"
    if served:
        export = served_export_path()  # checked here, for a one-line error, not in the child
        child_flags = [*sys.argv[1:], f"--export={export}"]  # the last one given counts
    else:
        child_flags = sys.argv[1:]
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    child = subprocess.run([sys.executable, "-m", "benchmarks.onednn_kernels", *child_flags,
                            "--child"], env=env, capture_output=True, text=True)  # fmt: skip
    if child.returncode:
        sys.exit(f"onednn_kernels: the {FLAGS.form} failed:\n{child.stderr[-3000:]}")
    lines = child.stdout.splitlines()
    # A served step is one sentence's call.
    steps = FLAGS.steps * FLAGS.sentences if served else FLAGS.steps
    report = kernel_times(lines, steps, FLAGS.top)
    if not report["by_kind"]:
        sys.exit("onednn_kernels: oneDNN ran no kernels: this TensorFlow runs without oneDNN "
                 "(TF_ENABLE_ONEDNN_OPTS=0, or a build without it); nothing to report.")
    if served:
        print(json.dumps({"form": "served", "export": export, "sentences": FLAGS.sentences,
                          "passes": FLAGS.steps, "steps": steps, **report,
                          "inner_products_by_rows": inner_product_rows(lines, steps)},
                         indent=2))  # fmt: skip
        return
    stored = FLAGS.form == "forward" and stored_weights()
    print(json.dumps({"form": FLAGS.form, "precision": FLAGS.precision, "stored_weights": stored,
                      "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length,
                      "layers": FLAGS.layers, "steps": FLAGS.steps, **report}, indent=2))


if __name__ == "__main__":
    app.run(main)
