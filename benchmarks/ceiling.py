"""The bare matrix products of a BERT forward pass: the ceiling the encoder bench
(benchmarks/peers.py --bench=encoder) measures the forward against."""

import numpy as np
import tensorflow as tf


def matmul_ceiling(config, batch, seq, dtype, in_order=False):
    """The forward pass's matrix products alone, bare, in `dtype`: what the hardware allows.

    Every layer has weights of its own, as the encoder has (identical products would be
    computed once by Grappler's common-subexpression elimination). The products depend on
    nothing, so TensorFlow's executor runs them two at a time (one a core, here). With
    `in_order`, each waits for the ones a forward pass computes it from: a block's query, key
    and value side by side once the block before is done, then its scores, context, output and
    feed-forward products one after another. Timing only: the values mean nothing."""
    rng = np.random.default_rng(0)
    if in_order:
        return _products_in_order(config, batch, seq, dtype, rng)
    tokens, hidden, inner = batch * seq, config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads

    def random(*shape):
        return tf.constant(rng.standard_normal(shape).astype(np.float32) * 0.05, dtype)

    x, wide = random(tokens, hidden), random(tokens, inner)
    layers = [{"square": [random(hidden, hidden) for _ in range(4)],  # query, key, value, output
               "up": random(hidden, inner), "down": random(inner, hidden),
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


def _products_in_order(config, batch, seq, dtype, rng):
    """matmul_ceiling(..., in_order=True)."""
    tokens, hidden, inner = batch * seq, config.hidden_size, config.intermediate_size
    heads, head_size = config.num_attention_heads, hidden // config.num_attention_heads

    def random(rows, columns, std):
        return tf.constant((rng.standard_normal((rows, columns)) * std).astype(np.float32), dtype)

    def weight(rows, columns, gain=1.0):  # outputs about as large as the inputs, times `gain`
        return random(rows, columns, gain / np.sqrt(rows))

    def as_heads(t):  # [tokens, hidden] as [batch * heads, seq, head size]; a reshape, no copy
        return tf.reshape(t, [batch * heads, seq, head_size])

    x = random(tokens, hidden, 1.0)
    context_gain = np.sqrt(head_size * seq)  # of scores (no softmax) by values
    layers = [{"query": weight(hidden, hidden), "key": weight(hidden, hidden),
               "value": weight(hidden, hidden), "output": weight(hidden, hidden, 1 / context_gain),
               "up": weight(hidden, inner), "down": weight(inner, hidden)}
              for _ in range(config.num_hidden_layers)]  # fmt: skip

    @tf.function
    def run():
        # The query is fed the block before's output; the key and value, made from the fixed
        # `x`, wait for it. Fed it too, the attention's products would cube it, block after
        # block, to inf; and a block whose output only a control edge needed would be pruned.
        last = x
        for w in layers:
            query = tf.matmul(last, w["query"])
            with tf.control_dependencies([last]):
                key, value = tf.matmul(x, w["key"]), tf.matmul(x, w["value"])
            scores = tf.matmul(as_heads(query), as_heads(key), transpose_b=True)
            context = tf.reshape(tf.matmul(scores, as_heads(value)), [tokens, hidden])
            last = tf.matmul(tf.matmul(tf.matmul(context, w["output"]), w["up"]), w["down"])
        return tf.reshape(last, [-1])[0]

    return run
