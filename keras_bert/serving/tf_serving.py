"""A SavedModel run as TF Serving runs it, with TensorFlow alone.

This module imports only NumPy and TensorFlow (and, run as a script, absl and tensorflow-text),
so that a process without Keras (a benchmark or test standing in for a server) can load it by
its file path. Run as a script, it
answers one request with an export, in whatever TensorFlow runs it; with TensorFlow 2.12 and
tensorflow-text 2.12.1, the runtime of TF Serving 2.12 (README, Export and TF Serving):

    python keras_bert/serving/tf_serving.py --export=exported/sst-2/1 --inputs='{"sentence": ["Fine."]}'

It prints the outputs as one JSON object; a mistake (no such export, signature or input, inputs
that are not JSON) is one line, `error: ...`, and exit status 1.
"""

import json
import sys

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
        if signature not in meta_graph.signature_def:
            raise ValueError(f"{saved_model_dir} has no signature {signature!r}; it has "
                             f"{sorted(n for n in meta_graph.signature_def if n[:2] != '__')}")
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


def error_line(error):
    """The line of a TensorFlow error (or any exception) that says what went wrong."""
    message = error.message if isinstance(error, tf.errors.OpError) else str(error)
    lines = [line.strip() for line in message.splitlines()]
    return next((line for line in lines if line and line != "Graph execution error:"),
                type(error).__name__)  # fmt: skip


def _as_json(array):
    if array.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(array).tolist()
    return array.tolist()


def _main(argv):
    import tensorflow_text  # noqa: F401  (its ops, which TF Serving bundles)
    from absl import app, flags

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    try:
        inputs = json.loads(FLAGS.inputs)
    except json.JSONDecodeError as e:
        raise app.UsageError(f"--inputs is not JSON ({e}): give an object such as "
                             '\'{"sentence": ["A fine film."]}\'') from e  # fmt: skip
    if not isinstance(inputs, dict):
        raise app.UsageError("--inputs must be a JSON object of input name -> list of values")
    if not tf.saved_model.contains_saved_model(FLAGS.export):
        raise app.UsageError(f"--export={FLAGS.export} holds no SavedModel (saved_model.pb)")
    served = LoadedLikeTfServing(FLAGS.export, FLAGS.signature, FLAGS.intra_op_threads)
    outputs = served(**inputs)
    print(json.dumps({name: _as_json(value) for name, value in outputs.items()}))


def _run_as_script():
    from absl import app, flags

    flags.DEFINE_string("export", None, "The SavedModel folder (an export's version folder, "
                        "such as exported/sst-2/1).")  # fmt: skip
    flags.DEFINE_string("inputs", None, "The request: a JSON object of input name -> list of "
                        'values, such as \'{"sentence": ["A fine film.", "Dull."]}\'.')
    flags.DEFINE_string("signature", "serving_default", "The signature to run.")
    flags.DEFINE_integer("intra_op_threads", 0, "TF Serving's --tensorflow_intra_op_parallelism "
                         "(0: one thread per core).")  # fmt: skip
    flags.mark_flags_as_required(["export", "inputs"])

    def main(argv):
        try:
            _main(argv)
        except (app.UsageError, ValueError, tf.errors.OpError) as e:
            print(f"error: {error_line(e)}", file=sys.stderr)
            sys.exit(1)

    app.run(main)


if __name__ == "__main__":
    _run_as_script()
