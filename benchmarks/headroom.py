"""The most a BERT forward pass could gain from rewriting its parts outside the products, as JSON.

    python -m benchmarks.headroom [--precision bfloat16 --stored_weights --rounds 11]

Times a random BERT-base encoder's forward pass as it is, and traced with some of its parts
replaced by stand-ins of the same shapes that do no work (for timing only: the numbers are then
wrong): attention's swaps of heads and positions (`no_transposes`: a reshape), every block's
LayerNorms (`no_layer_norms`: a cast), and those two with the packing gathers around attention
too (`none_of_them`: the gathers' rows as they are, which on a batch without padding, as here,
is what the gathers compute). The gathers have no form of their own: with their stand-ins
alone Grappler no longer fused the LayerNorms into oneDNN's LayerNorm op (the profiler showed
FusedBatchNormV3, Mul and AddV2 in its place, 20 ms a step instead of 5; the cause was not
found), and the forward ran 0.93x as fast. One process, each form its own `tf.function`, run
once before the clock starts, the forms in alternating order round after round; medians, and
each form's speedup over the encoder as it is. `op_counts` shows that each stand-in took the
place of the ops it names.
"""

import collections
import contextlib
import functools
import json

import tensorflow as tf
from absl import app, flags

import benchmarks
from benchmarks import (define_forms_flags, define_forward_flags, random_encoder, stored_weights,
                        time_forms)
from keras_bert import attention, primitives, serving

FLAGS = flags.FLAGS
define_forward_flags()
define_forms_flags()
flags.adopt_module_key_flags(benchmarks)  # so that --help lists them

# The op types each part runs as, counted in each form's graph: the stand-ins must remove them.
COUNTED_OPS = ("GatherV2", "GatherNd", "Transpose", "FusedBatchNormV3")


def _reshape_only(x):
    """(batch, a, b, size) -> (batch, b, a, size) without moving anything."""
    shape = tf.shape(x)
    return tf.reshape(x, (shape[0], shape[2], shape[1], shape[3]))


def _rows_like(rows):
    """A stand-in for a gather of `rows` (a name in the layout): its input reshaped to as many
    rows as `rows` has, which on a batch without padding is its input, unchanged."""

    def stand_in(x, layout, static=False):
        return tf.reshape(x, tf.concat([tf.shape(layout[rows]), x.shape[-1:]], axis=0))

    return stand_in


# Each part: the (owner, attribute) pairs of keras_bert that compute it, and their stand-ins.
STAND_INS = {
    "gathers": {(attention, "spread_for_attention"): _rows_like("slots"),
                (attention, "pack"): _rows_like("tokens")},
    "transposes": {(attention, "swap_heads_and_positions"): _reshape_only},
    "layer_norms": {(primitives.BertLayerNorm, "call"):
                    lambda self, x, training=None: tf.cast(x, "float32")},
}  # fmt: skip
FORMS = {"as_is": [], "no_transposes": ["transposes"], "no_layer_norms": ["layer_norms"],
         "none_of_them": list(STAND_INS)}  # fmt: skip


@contextlib.contextmanager
def stand_ins(parts):
    """keras_bert's attention and LayerNorm with `parts` replaced, while a form is traced."""
    saved = []
    for part in parts:
        for (owner, name), stand_in in STAND_INS[part].items():
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, stand_in)
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def main(argv):
    del argv
    encoder, x = random_encoder(FLAGS.layers)
    forms, op_counts = {}, {}
    for form, parts in FORMS.items():
        forward = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
        with stand_ins(parts):
            graph = forward.get_concrete_function(x).graph.as_graph_def()  # traced here
        types = collections.Counter(node.op for node in serving.graph_def_nodes(graph))
        op_counts[form] = {op: types[op] for op in COUNTED_OPS}
        forms[form] = functools.partial(forward, x)
    ms = {form: seconds * 1e3 for form, seconds in time_forms(forms).items()}
    report = {"precision": FLAGS.precision, "stored_weights": stored_weights(),
              "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length,
              "layers": FLAGS.layers, "rounds": FLAGS.rounds, "op_counts": op_counts,
              "ms_per_forward": {form: round(t, 2) for form, t in ms.items()},
              "speedup": {form: round(ms["as_is"] / t, 3) for form, t in ms.items()}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
