"""A SavedModel run as TF Serving runs it, with TensorFlow alone.

This module imports only NumPy and TensorFlow, so that a process without Keras (a benchmark or
test standing in for a server) can load it by its file path.
"""

import numpy as np
import tensorflow as tf


class LoadedLikeTfServing:
    """A SavedModel's signature run as TF Serving runs it: the MetaGraph loaded into a session
    (graph and function library together), the checkpoint restored by the saver's restore op,
    then each request fed and fetched by tensor name. `tf.saved_model.load` takes another
    path, object by object, so an export it runs may still fail in TF Serving; this catches
    that without a server.

    Call with {input name: array-like}; returns {output name: ndarray}. `intra_op_threads` is
    TF Serving's --tensorflow_intra_op_parallelism (0: one per core).
    """

    def __init__(self, saved_model_dir, signature="serving_default", intra_op_threads=0):
        self.graph = tf.Graph()
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op_threads)
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)
        logger, level = tf.get_logger(), tf.get_logger().level
        logger.setLevel("ERROR")  # the TF1 loader's deprecation warning: the loader is the point
        try:
            with self.graph.as_default():
                meta_graph = tf.compat.v1.saved_model.load(self.session, ["serve"],
                                                           saved_model_dir)  # fmt: skip
        finally:
            logger.setLevel(level)
        spec = meta_graph.signature_def[signature]
        self.input_names = sorted(spec.inputs)
        self.output_names = sorted(spec.outputs)
        self._run = self.session.make_callable(
            [spec.outputs[n].name for n in self.output_names],
            [spec.inputs[n].name for n in self.input_names],
        )

    def __call__(self, **inputs):
        if sorted(inputs) != self.input_names:
            raise ValueError(f"the signature takes {self.input_names}, not {sorted(inputs)}")
        outputs = self._run(*(np.asarray(inputs[n]) for n in self.input_names))
        return dict(zip(self.output_names, outputs))
