"""The bare matrix products of a BERT forward pass: the ceiling the encoder bench
(benchmarks/peers.py --bench=encoder) measures the forward against. As a script, its forms
side by side, as JSON:

    python -m benchmarks.ceiling [--precision bfloat16 --batch_size 8 --seq_length 128]
    python -m benchmarks.ceiling --model=minilm --layers=6 ...   # MiniLM's widths

BERT-base's products with nothing between them (`independent`, the encoder bench's ceiling) and
in a forward pass's order (`in_order`; with `--column_parts`, also `in_column_parts`, in the
parts an export computes side by side), each with its weights in constants (as the encoder
bench has them) and in variables (as a Keras model has them). One process, each form run once before
the clock starts, the forms in alternating order round after round; medians, tokens/s, GFLOP/s
(`product_flops`), and each form's speed against the independent products from constants.
`--classifier` computes the in-order forms as a served classifier's export does (fewer products
in its last block): with `--batch_size=1 --column_parts=2 --intra_op_threads=1`, the bound the
products alone set on an export serving single sentences (`sequences_per_s`).
"""


import numpy as np
import tensorflow as tf
from absl import app, flags

import benchmarks
from benchmarks import (
    checked_column_parts,
    define_forms_flags,
    define_shape_flags,
    time_forms,
)


def matmul_ceiling(config, batch, seq, dtype, in_order=False, variables=False, column_parts=1,
                   classifier=False):
    """The forward pass's matrix products alone, bare, in `dtype`: what the hardware allows.

    Every layer has weights of its own, as the encoder has (identical products would be
    computed once by Grappler's common-subexpression elimination). The products depend on
    nothing, so TensorFlow's executor runs them two at a time (one a core, here). With
    `in_order`, each waits for the ones a forward pass computes it from: a block's query, key
    and value side by side once the block before is done, then its scores, context, output and
    feed-forward products one after another. In order, `column_parts` > 1 computes each block
    as an export does (`split_columns`): its heads in that many groups side by side, each from
    its own columns of the query, key and value weights (three products a group, where an export
    computes the three in one: the same FLOPs), and each feed-forward part from its
    own columns of the first weight; then, in float32, the output and down products as the sum
    of each part's product with its own rows of the weight, and in bfloat16 the parts joined
    (a concat) and each of those products cut in column blocks again, joined once more. The
    same products, cut in parts. In order, `classifier` computes the products as a served
    classifier's export does (`pooled_output_only`): each part's query, key and value in one
    product, and in the last block each sequence's first token alone after that product (its
    scores, context, output and feed-forward), as `product_flops(..., classifier=True)`
    counts. The weights are constants, or with `variables` variables.
    Timing only: the values mean nothing."""
    rng = np.random.default_rng(0)
    if in_order:
        return _products_in_order(config, batch, seq, dtype, rng, variables, column_parts,
                                  classifier)  # fmt: skip
    if column_parts != 1 or classifier:
        raise ValueError("column_parts, classifier: in order only")
    tokens, hidden, inner = batch * seq, config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads

    def random(*shape):
        return _random(rng, shape, 0.05, dtype)

    def weight(*shape):
        return _as_variable(random(*shape), variables)

    x, wide = random(tokens, hidden), random(tokens, inner)
    layers = [{"square": [weight(hidden, hidden) for _ in range(4)],  # query, key, value, output
               "up": weight(hidden, inner), "down": weight(inner, hidden),
               "heads": random(batch * heads, seq, hidden // heads),
               "probs": random(batch * heads, seq, seq)}
              for _ in range(config.num_hidden_layers)]  # fmt: skip

    @tf.function
    def run():
        corners = []
        for w in layers:
            products = [tf.matmul(x, square) for square in w["square"]]
            products += [tf.matmul(w["heads"], w["heads"], transpose_b=True),  # scores
                         tf.matmul(w["probs"], w["heads"]),  # context
                         tf.matmul(x, w["up"]), tf.matmul(wide, w["down"])]  # fmt: skip
            corners += [tf.reshape(p, [-1])[0] for p in products]  # keeps every product alive
        return tf.add_n(corners)

    return run


def product_flops(config, batch, seq, classifier=False):
    """Floating-point operations of the products `matmul_ceiling` runs, 2 a multiply-add: each
    block's query, key, value, output, up and down products on `batch * seq` tokens, and its
    scores and context products over `seq` tokens a sequence. With `classifier`, the last
    block's scores, context, output, up and down products for one token a sequence."""
    hidden, inner = config.hidden_size, config.intermediate_size

    def block(queries):  # queries: rows a sequence after the query, key and value product
        projections = 2 * batch * seq * 3 * hidden * hidden
        attention = 2 * 2 * batch * queries * seq * hidden  # over all heads together
        rest = 2 * batch * queries * (hidden * hidden + 2 * hidden * inner)
        return projections + attention + rest

    last = block(1 if classifier else seq)
    return (config.num_hidden_layers - 1) * block(seq) + last


# --model: the widths of the encoders this project measures (the blocks: --layers).
MODELS = {"base": {}, "minilm": {"hidden_size": 384, "intermediate_size": 1536}}


def _random(rng, shape, std, dtype):
    return tf.constant((rng.standard_normal(shape) * std).astype(np.float32), dtype)


def _as_variable(tensor, variables):
    return tf.Variable(tensor, trainable=False) if variables else tensor


def _products_in_order(config, batch, seq, dtype, rng, variables, parts, classifier):
    """matmul_ceiling(..., in_order=True, column_parts=parts, classifier=classifier)."""
    from keras_bert.model.column_parts import check_column_parts

    tokens, hidden, inner = batch * seq, config.hidden_size, config.intermediate_size
    heads, head_size = config.num_attention_heads, hidden // config.num_attention_heads
    check_column_parts(config, parts)  # as an export checks its own

    def weight(rows, columns, gain=1.0, axis=1):
        """The weight's `parts` column (axis 1) or row (axis 0) blocks, outputs about as large
        as the inputs, times `gain`."""
        full = _random(rng, (rows, columns), gain / np.sqrt(rows), dtype)
        return [_as_variable(block, variables) for block in tf.split(full, parts, axis)]

    def as_heads(t, length=seq):  # [rows, a part's width] as [batch * its heads, length, head
        return tf.reshape(t, [batch * heads // parts, length, head_size])  # size]; no copy

    # A sublayer's second product (output, down) from its first's column blocks: in float32,
    # each block times its own rows of the weight, summed; in 16 bits, where each partial
    # product would be rounded before the sum, the blocks joined, then column blocks again.
    row_parts = dtype == tf.float32

    def second(blocks, weights):
        if parts == 1:
            return tf.matmul(blocks[0], weights[0])
        if row_parts:
            return tf.add_n([tf.matmul(b, w) for b, w in zip(blocks, weights)])
        joined = tf.concat(blocks, axis=-1)
        return tf.concat([tf.matmul(joined, w) for w in weights], axis=-1)

    x = _random(rng, (tokens, hidden), 1.0, dtype)
    context_gain = np.sqrt(head_size * seq)  # of scores (no softmax) by values

    def block_weights():
        if classifier:  # each part's query, key and value columns side by side, as an export's
            w = {"query_key_value": weight(hidden, 3 * hidden, 0.5)}
        else:
            w = {name: weight(hidden, hidden) for name in ("query", "key", "value")}
        return {**w, "output": weight(hidden, hidden, 1 / context_gain, axis=0 if row_parts else 1),
                "up": weight(hidden, inner),
                "down": weight(inner, hidden, axis=0 if row_parts else 1)}  # fmt: skip

    layers = [block_weights() for _ in range(config.num_hidden_layers)]
    first_rows = tf.range(0, batch * seq, seq)  # each sequence's first token

    def projections(last, w):
        """Each part's (query, key, value), the query from `last`, the block before's output.
        In one product, all three come from it: the attention's products then cube it, block
        after block, and the weights' gain of 1/2 shrinks it to zeros (TensorFlow flushes
        subnormals) instead of growing it to inf; the products take as long either way."""
        if classifier:
            return [tf.split(tf.matmul(last, part), 3, axis=1) for part in w["query_key_value"]]
        parts_qkv = []
        for query_w, key_w, value_w in zip(w["query"], w["key"], w["value"]):
            with tf.control_dependencies([last]):
                key, value = tf.matmul(x, key_w), tf.matmul(x, value_w)
            parts_qkv.append((tf.matmul(last, query_w), key, value))
        return parts_qkv

    @tf.function
    def run():
        # Outside `classifier` the query is fed the block before's output; the key and value,
        # made from the fixed `x`, wait for it. Fed it too, the attention's products would cube
        # it, block after block, to inf (projections); and a block whose output only a control
        # edge needed would be pruned.
        last = x
        for i, w in enumerate(layers):
            first_only = classifier and i == len(layers) - 1
            contexts, queries = [], 1 if first_only else seq
            for query, key, value in projections(last, w):
                if first_only:
                    query = tf.gather(query, first_rows)
                scores = tf.matmul(as_heads(query, queries), as_heads(key), transpose_b=True)
                context = tf.matmul(scores, as_heads(value))
                contexts.append(tf.reshape(context, [batch * queries, hidden // parts]))
            attended = second(contexts, w["output"])
            last = second([tf.matmul(attended, up) for up in w["up"]], w["down"])
        return tf.reshape(last, [-1])[0]

    return run


def main(argv):
    del argv
    from keras_bert import BertConfig

    FLAGS = flags.FLAGS
    if FLAGS.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
    config = BertConfig(num_hidden_layers=FLAGS.layers, **MODELS[FLAGS.model])
    checked_column_parts(config)
    orders = {"independent": (False, 1), "in_order": (True, 1)}
    if FLAGS.column_parts > 1:
        orders["in_column_parts"] = (True, FLAGS.column_parts)
    forms = {f"{order}/{weights}": matmul_ceiling(
                 config, FLAGS.batch_size, FLAGS.seq_length, tf.as_dtype(FLAGS.precision),
                 in_order=in_order, variables=weights == "variables", column_parts=parts,
                 classifier=in_order and FLAGS.classifier)
             for order, (in_order, parts) in orders.items()
             for weights in ("constants", "variables")}  # fmt: skip
    tokens = FLAGS.batch_size * FLAGS.seq_length
    per_s = {form: tokens / seconds for form, seconds in time_forms(forms).items()}
    base = per_s["independent/constants"]
    gflop = product_flops(config, FLAGS.batch_size, FLAGS.seq_length) / 1e9
    ordered_gflop = product_flops(config, FLAGS.batch_size, FLAGS.seq_length,
                                  FLAGS.classifier) / 1e9  # fmt: skip
    report = {"model": FLAGS.model, "precision": FLAGS.precision,
              "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length,
              "layers": FLAGS.layers, "column_parts": FLAGS.column_parts,
              "intra_op_threads": FLAGS.intra_op_threads, "rounds": FLAGS.rounds,
              "classifier": FLAGS.classifier, "gflop_per_call": round(gflop, 3),
              "gflop_per_call_in_order": round(ordered_gflop, 3),
              "tokens_per_s": {form: round(rate, 1) for form, rate in per_s.items()},
              "sequences_per_s": {form: round(rate / FLAGS.seq_length, 1)
                                  for form, rate in per_s.items()},
              "gflop_per_s": {form: round((gflop if form.startswith("independent")
                                           else ordered_gflop) * rate / tokens, 1)
                              for form, rate in per_s.items()},
              "of_independent_constants": {form: round(rate / base, 3)
                                           for form, rate in per_s.items()}}  # fmt: skip
    benchmarks.print_report(report)


if __name__ == "__main__":
    flags.DEFINE_enum("model", "base", sorted(MODELS), "Widths: BERT-base's (hidden 768, "
                      "feed-forward 3072) or all-MiniLM-L6-v2's (384, 1536); 12 heads both.")
    flags.DEFINE_integer("column_parts", 1, "Also time the products in a forward's order in "
                         "this many column parts side by side, as an export computes them "
                         "(form in_column_parts; exports/export.py --column_parts).")
    flags.DEFINE_integer("intra_op_threads", 0, "Threads each product runs on (0: TensorFlow's "
                         "choice, one a core). A batch-1 export serves fastest on 1.")
    flags.DEFINE_bool("classifier", False, "Compute the in-order forms as a served classifier's "
                      "export does: each column part's query, key and value in one product, and "
                      "the last block past it for each sequence's first token alone. With "
                      "--column_parts=2 --intra_op_threads=1: what the products alone allow an "
                      "export serving sentences of --seq_length tokens.")
    define_shape_flags()
    define_forms_flags()
    flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
    app.run(main)
