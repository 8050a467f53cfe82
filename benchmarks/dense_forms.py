"""One dense product of a BERT block, written the ways TensorFlow can run it, as JSON.

    python -m benchmarks.dense_forms [--precision bfloat16 --batch_size 8 --seq_length 128]

A Keras `Dense` on rank-2 tokens is a `MatMul` and a bias add, which Grappler's remapper fuses
(with the GELU after the feed-forward's first product) into one oneDNN inner product. With its
weights in their plain layout (a variable) oneDNN runs that on its GEMM (`x64:gemm:jit`); a lone
`MatMul` in bfloat16, and a `BatchMatMulV2`, run on oneDNN's matmul, whose blocked kernels use
AMX where the CPU has it (`benchmarks/onednn_kernels.py` names the kernels). This times each
form of BERT-base's three product shapes (query/key/value/output 768 x 768, up 768 x 3072
with its GELU, down 3072 x 768) on `batch_size * seq_length` tokens:

- `fused`: the encoder's own layer (Keras's `Dense`; `GeluDense` for the up product), which
  Grappler fuses as in the encoder;
- `batch_matmul`: the tokens as one batch of a `BatchMatMulV2` on the same weights, then the
  bias add (and GELU) as separate ops (the remapper does not fuse them into this product);
- `matmul_alone`: the bare `MatMul`, no bias (what the encoder bench's ceiling times).

Weights in variables, in the compute precision (as a bfloat16 export stores them). One process,
each form a `tf.function` run once before the clock starts, the forms in alternating order round
after round; medians, each form's speed against `fused`, and the largest difference between
`batch_matmul`'s numbers and `fused`'s (the forms differ in kernels, not in what they compute).
On an AMX CPU, in bfloat16, `batch_matmul` ran the square and down products as fast as `fused`,
no faster (`benchmarks/RESULTS.md`, "A second AMX machine").
"""

import json

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

import benchmarks
from benchmarks import define_forms_flags, define_shape_flags, time_forms
from keras_bert.primitives import GeluDense

FLAGS = flags.FLAGS
define_shape_flags()
define_forms_flags(layers=False)
flags.adopt_module_key_flags(benchmarks)  # so that --help lists them

SHAPES = {"square": (768, 768, False), "up": (768, 3072, True), "down": (3072, 768, False)}


def forms_of(rows, columns, gelu, tokens, dtype, rng):
    """{form: function} for one product of `tokens` x `rows` by `rows` x `columns`: the
    encoder's own layer (`GeluDense` for the up product, else Keras's `Dense`), its weights in
    `dtype`, and the other forms on the same weights."""
    layer = (GeluDense if gelu else keras.layers.Dense)(
        columns, bias_initializer="random_normal", dtype=dtype.name)
    layer.build((tokens, rows))
    x = tf.constant((rng.standard_normal((tokens, rows)) * 0.05).astype(np.float32), dtype)
    kernel, bias = layer.kernel.value, layer.bias.value

    def batch_matmul():
        return layer.activation(tf.matmul(x[None], kernel)[0] + bias)

    return {"fused": tf.function(lambda: layer(x)), "batch_matmul": tf.function(batch_matmul),
            "matmul_alone": tf.function(lambda: tf.matmul(x, kernel))}


def main(argv):
    del argv
    dtype, tokens = tf.as_dtype(FLAGS.precision), FLAGS.batch_size * FLAGS.seq_length
    rng = np.random.default_rng(0)
    forms = {f"{shape}/{form}": function
             for shape, (rows, columns, gelu) in SHAPES.items()
             for form, function in forms_of(rows, columns, gelu, tokens, dtype, rng).items()}
    # The same numbers, up to the rounding of the last bits: the forms differ in kernels only.
    difference = {shape: float(tf.reduce_max(tf.abs(tf.cast(
                      forms[f"{shape}/batch_matmul"]() - forms[f"{shape}/fused"](), tf.float32))))
                  for shape in SHAPES}  # fmt: skip
    seconds = time_forms(forms)
    report = {"precision": FLAGS.precision, "tokens": tokens, "rounds": FLAGS.rounds,
              "steps": FLAGS.steps, "ms": {form: round(s * 1e3, 3) for form, s in seconds.items()},
              "speed_of_fused": {form: round(seconds[form.split("/")[0] + "/fused"] / s, 3)
                                 for form, s in seconds.items()},
              "batch_matmul_max_difference": difference}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
