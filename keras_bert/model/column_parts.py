"""Serving on two cores: an encoder block's dense products split in column parts.

A sentence's products are too small for oneDNN to split over two threads at a gain, so an
exported block computes each sublayer in `count` parts that share no work until they are
joined: attention's heads in groups, each from its own columns of the query, key and value
weights in one product, and the feed-forward's products in blocks of columns (or, for the
second product in float32, of rows). TensorFlow's inter-op threads run the parts side by side.
The parts hold frozen copies of the weights, so a split layer refuses to train (`of_layer`).
What it gains: docs/performance.md.
"""

import functools

import tensorflow as tf
from keras import ops

from keras_bert.model.config import whole_number


class DenseColumns(tf.Module):
    """Dense layers that read the same input, as `count` blocks of their output columns: block
    i holds each layer's i-th block of columns side by side, so one product gives them all
    (attention's query, key and value for a group of heads: one product where they were three,
    which saves a served sentence two products' fixed costs a part). Each column is the same
    dot product, so the same numbers. `columns(x)` is the output of a single layer; iterating
    gives each block's own function, for callers that keep the blocks apart longer
    (attention's heads), which returns that block of each layer's output (a list, with
    several layers; with `split=False`, the layers' blocks side by side, as computed). The
    weights are copies, frozen: for serving."""

    def __init__(self, denses, count):
        denses = tuple(denses) if isinstance(denses, (tuple, list)) else (denses,)
        super().__init__(name="_".join(d.name for d in denses) + "_columns")
        count = check_shares(count, [(f"units of {d.name}", d.units) for d in denses])
        self._widths = [dense.units // count for dense in denses]
        kernels = [tf.convert_to_tensor(d.kernel) for d in denses]
        biases = [tf.convert_to_tensor(d.bias) for d in denses]

        def block(weights, i):
            return tf.concat([w[..., i * width : (i + 1) * width]
                              for w, width in zip(weights, self._widths)], axis=-1)  # fmt: skip

        self.kernels = [tf.Variable(block(kernels, i), trainable=False) for i in range(count)]
        self.biases = [tf.Variable(block(biases, i), trainable=False) for i in range(count)]
        activations = {d.activation for d in denses}
        if len(activations) > 1:
            raise ValueError("layers computed in one product need the same activation")
        self._activation = activations.pop()
        self._dtype = denses[0].compute_dtype

    def __iter__(self):
        return iter([functools.partial(self._part, i) for i in range(len(self.kernels))])

    def _part(self, i, x, split=True):
        # BiasAdd: oneDNN fuses MatMul + BiasAdd (+ GELU) into one kernel.
        y = tf.nn.bias_add(tf.matmul(ops.cast(x, self._dtype), self.kernels[i]), self.biases[i])
        y = self._activation(y)
        return tf.split(y, self._widths, axis=-1) if split and len(self._widths) > 1 else y

    def __call__(self, x):
        if len(self._widths) > 1:
            raise TypeError(f"{self.name} holds several layers: call its blocks")
        return tf.concat([part(x) for part in self], axis=-1)


class DenseRows(tf.Module):
    """An activation-free Dense layer's weights as `count` blocks of their input rows: block i
    multiplies the i-th column block of the layer's input, and the partial products' sum (the
    first carrying the bias) is the layer's output, up to the rounding of that one sum. So the
    parts of two products in a row (DenseColumns, then DenseRows) each keep to their own
    columns, and join once, in the sum, where column blocks would join twice. The weights are
    copies, frozen: for serving."""

    def __init__(self, dense, count):
        super().__init__(name=f"{dense.name}_rows")
        inputs = dense.kernel.shape[0]
        count = check_shares(count, [(f"inputs of {dense.name}", inputs)])
        height = inputs // count
        kernel = tf.convert_to_tensor(dense.kernel)
        self.kernels = [tf.Variable(kernel[i * height : (i + 1) * height], trainable=False)
                        for i in range(count)]  # fmt: skip
        self.bias = tf.Variable(tf.convert_to_tensor(dense.bias), trainable=False)
        self._dtype = dense.compute_dtype

    def __call__(self, blocks):
        """The layer's output from the `count` column blocks of its input, in order."""
        partials = [tf.matmul(ops.cast(x, self._dtype), kernel)
                    for x, kernel in zip(blocks, self.kernels)]  # fmt: skip
        partials[0] = tf.nn.bias_add(partials[0], self.bias)
        return tf.add_n(partials)


def splits_rows(compute_dtype):
    """Whether a product that ColumnParts names in `rows` splits its rows in this compute dtype:
    in float32 alone. A 16-bit product keeps column blocks, whose parts need no sum."""
    return compute_dtype == "float32"


class ColumnParts(tf.Module):
    """A layer's dense products, each split in `count` parts, by sublayer name: what
    `split_columns` gives a block or its attention. Each is split into column blocks
    (DenseColumns; a name given a tuple of Dense layers that read the same input computes them
    in one product a part), except those named in `rows`, which take the column blocks of the
    product before them (DenseRows), where they compute in float32. In bfloat16 or float16
    each partial product would be rounded to 8 or 11 bits before the sum; those keep column
    blocks, and their numbers."""

    def __init__(self, count, rows=(), **denses):
        super().__init__(name="column_parts")
        self.count = count
        self.columns = {
            name: (DenseRows if name in rows and splits_rows(dense.compute_dtype)
                   else DenseColumns)(dense, count)
            for name, dense in denses.items()
        }  # fmt: skip

    def join(self, name, blocks):
        """The output of the product named `name` from its input's column blocks."""
        columns = self.columns[name]
        if isinstance(columns, DenseRows):
            return columns(blocks)
        return columns(tf.concat(blocks, axis=-1))

    def __getitem__(self, name):
        return self.columns[name]

    def __contains__(self, name):
        return name in self.columns


def of_layer(layer, training):
    """The layer's ColumnParts, or None; a layer split for serving is refused in training,
    which would train the weights its parts were copied from and serve the copies stale."""
    parts = getattr(layer, "_column_parts", None)
    if parts is not None and training:
        raise ValueError(f"{layer.name} computes on column parts, frozen copies of its weights "
                         "for serving (split_columns): train the model it was copied from")
    return parts


def check_shares(count, sizes):
    """`count` as an int; raises ValueError unless it is a whole number of column parts (a
    Python or NumPy int), at least 1, that divides each of `sizes`, [(what, size)]."""
    count = whole_number(count, 1, "column parts")
    for what, size in sizes:
        if size % count:
            raise ValueError(f"{size} {what} cannot be shared equally by {count} column parts; "
                             "use a count that divides them (1: each product whole)")
    return count


def _config_sizes(config):
    """What a BertConfig's column parts must share equally."""
    return [("attention heads", config.num_attention_heads), ("hidden units", config.hidden_size),
            ("intermediate units", config.intermediate_size)]  # fmt: skip


# An exported model's blocks compute in this many column parts (BertTransformerBlock.split_columns),
# where its sizes allow (serving_column_parts).
SERVING_COLUMN_PARTS = 2


def check_column_parts(config, count):
    """`count` as an int; raises ValueError unless that many column parts share a BertConfig's
    heads and sizes."""
    return check_shares(count, _config_sizes(config))


def serving_column_parts(config):
    """SERVING_COLUMN_PARTS for a BertConfig whose heads, hidden and intermediate sizes it
    divides, else 1 (each product whole)."""
    shared = all(size % SERVING_COLUMN_PARTS == 0 for _, size in _config_sizes(config))
    return SERVING_COLUMN_PARTS if shared else 1
