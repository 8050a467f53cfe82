"""SavedModels that TF Serving runs, with the tokenizer and packer inside.

Every export is checked op by op against keras_bert/serving/serving_ops.txt (what TF Serving 2.12 can
run: core TensorFlow 2.12 plus its bundled tensorflow-text 2.12.1) and written under a
temporary name, then renamed into `<export_dir>/<model_name>/<version>/`, the layout TF Serving
watches; it ignores the temporary name.
"""

import errno
import os
import shutil
import uuid

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from keras_bert.model.config import whole_number
from keras_bert.model.encoder import INPUT_NAMES
from keras_bert.serving.tf_serving import LoadedLikeTfServing, error_line
from keras_bert.text import textfiles

SERVING_OPS = os.path.join(os.path.dirname(__file__), "serving_ops.txt")

# How a task model's export is saved. It serves and is never differentiated, so the gradients of
# the custom-gradient ops its functions run (the packing's, attention's transposes) are not
# saved: `tf.saved_model.save` would trace a gradient function for each, half of an export's
# time. The TF Hub layout's encoder (exports/hub_layout.py), which a
# user may fine-tune, keeps them (tf.saved_model.SaveOptions()).
SERVING_ONLY = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def text_specs(names):
    """One rank-1 string input per name: the only place signature inputs are spelled."""
    return [tf.TensorSpec([None], tf.string, name=name) for name in names]


def token_id_specs(shape=(None, None)):
    return [tf.TensorSpec(shape, tf.int32, name=name) for name in INPUT_NAMES]


class ServingModule(tf.Module):
    """What a SavedModel of a task model holds: its serving functions, the preprocessor they
    run (vocabulary included) and the model's weights, and nothing else (no optimizer state).

    `model.serving_functions()` gives {signature name: (function, input specs)}.
    """

    def __init__(self, model):
        super().__init__()
        self.preprocessor = model.preprocessor
        self.functions = {
            name: tf.function(_shapes_checked(function, specs), input_signature=specs)
            for name, (function, specs) in model.serving_functions().items()
        }
        self.model_weights = captured_variables(self.functions.values())


def _shapes_checked(function, specs):
    """`function`, its inputs first checked against the shapes `specs` give. TF Serving feeds a
    request's tensors to the graph unchecked: a 2-D or scalar `sentence` failed deep inside
    the tokenizer ("The second input must be a scalar"); it now fails naming the input."""

    def checked(*inputs):
        return function(*(tf.ensure_shape(value, spec.shape, name=f"check_{spec.name}")
                          for value, spec in zip(inputs, specs)))  # fmt: skip

    return checked


def captured_variables(functions):
    """The tf.Variables that `functions` (tf.functions with input signatures) read, each once.

    A SavedModel must track these, not the Keras variables that wrap them: TF Serving (and any
    loader that runs the SavedModel as one graph in a session, as tf_serving.py does)
    restores the checkpoint into the tracked variables only. Tracking Keras's wrappers saved a
    second set of variables, which received the weights while the functions read variables
    left uninitialised ("Could not find variable layer_5/output_dense/kernel"); only
    `tf.saved_model.load`, which maps a function's captures by object, ran such an export.
    """
    seen = {}
    for function in functions:
        for variable in function.get_concrete_function().variables:
            seen.setdefault(id(variable), variable)
    return list(seen.values())


def export(model, model_dir, version=None):
    """Writes `model` as `<model_dir>/<version>/` for TF Serving; returns that path."""
    module = ServingModule(model)
    return save_versioned(module, module.functions, model_dir, model.warmup_requests(),
                          version, SERVING_ONLY)  # fmt: skip


def saved_model_proto(saved_model_dir):
    """A SavedModel's saved_model.pb, parsed (its meta graphs, graph and function library)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def graph_def_nodes(graph_def):
    """Every NodeDef of a GraphDef and of the functions in its library."""
    yield from graph_def.node
    for function in graph_def.library.function:
        yield from function.node_def


def graph_nodes(saved_model_dir):
    """Every NodeDef of a SavedModel's graphs and their function libraries."""
    for meta_graph in saved_model_proto(saved_model_dir).meta_graphs:
        yield from graph_def_nodes(meta_graph.graph_def)


def graph_ops(saved_model_dir):
    """Every op type in a SavedModel's graph and function library."""
    return {node.op for node in graph_nodes(saved_model_dir)}


def check_serving_ops(saved_model_dir):
    """Raises ValueError naming every op of the export that TF Serving 2.12 lacks."""
    with open(SERVING_OPS, encoding="utf-8") as f:
        allowed = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    unsupported = sorted(graph_ops(saved_model_dir) - allowed)
    if unsupported:
        raise ValueError(f"{saved_model_dir} uses ops TF Serving 2.12 cannot run: "
                         f"{', '.join(unsupported)}")  # fmt: skip


def check_serves_like_tf_serving(saved_model_dir, requests, signature="serving_default"):
    """Runs `requests` ({input name: array}) through the SavedModel loaded as TF Serving loads
    it (LoadedLikeTfServing); raises ValueError naming the first failure."""
    try:
        served = LoadedLikeTfServing(saved_model_dir, signature)
        for request in requests:
            served(**request)
    except tf.errors.OpError as error:
        raise ValueError(f"{saved_model_dir} fails as TF Serving would load it: "
                         f"{error_line(error)}") from error  # fmt: skip


def text_requests(examples):
    """[{input name: list of str}] -> the same as arrays of strings."""
    return [{name: np.array(texts, dtype=object) for name, texts in example.items()}
            for example in examples]  # fmt: skip


def write_warmup_requests(saved_model_dir, model_name, examples):
    """assets.extra/tf_serving_warmup_requests: `examples` ({input: list of str}) as Predict
    requests, so the server traces its functions before the first real request."""
    folder = os.path.join(saved_model_dir, "assets.extra")
    os.makedirs(folder, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(folder, "tf_serving_warmup_requests")) as writer:
        for example in examples:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name="serving_default")
            )
            for name, values in example.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=tf.string))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def next_version(model_dir):
    versions = (
        [int(n) for n in os.listdir(model_dir) if n.isdigit()] if os.path.isdir(model_dir) else []
    )
    return max(versions, default=0) + 1


def save_versioned(module, signatures, model_dir, warmup=None, version=None, options=None):
    """Saves (with `options`, see save_checked), checks ops, adds warmup requests, then renames
    into place. Returns the path.

    The SavedModel is written under a name of this writer's own, and the rename is what claims
    its version: a rename onto a version another writer has filled fails, so two exports
    started at once into one `model_dir` end in two whole versions (without `version`, the
    later one takes the next free number; with it, the later one is refused)."""
    model_name = os.path.basename(os.path.normpath(model_dir))
    above = os.path.abspath(model_dir)
    while not os.path.exists(above):  # the first part of the path that exists
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise NotADirectoryError(f"{model_dir}: {above} is a file; an export is a folder of "
                                 "versions: give a folder path")  # fmt: skip
    explicit = version is not None
    if explicit:
        version = whole_number(version, 1, "version", " (TF Serving serves the largest)")
        _refuse_taken(os.path.join(model_dir, str(version)))
    tmp = os.path.join(model_dir, f".tmp-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        try:
            save_checked(module, tmp, signatures, text_requests(warmup or []), options)
            if warmup:
                write_warmup_requests(tmp, model_name, warmup)
        except (OSError, tf.errors.OpError) as e:
            full = textfiles.out_of_space(e)
            if full is None:
                raise
            raise OSError(f"could not write the export in {model_dir} ({full}); make room, "
                          "then export again") from None  # fmt: skip
        while True:
            final = os.path.join(model_dir, str(version if explicit else next_version(model_dir)))
            try:
                os.rename(tmp, final)  # onto nothing, or an empty folder: atomic either way
                return final
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                if explicit:
                    _refuse_taken(final, taken=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refuse_taken(final, taken=False):
    if taken or os.path.exists(final):
        raise FileExistsError(f"{final} exists; pick another version, or leave it out (one more "
                              "than the newest)")


def save_checked(module, path, signatures, requests, options=None):
    """Saves `module` at `path` (a temporary name: the caller renames it into place) with
    `options` (tf.saved_model.SaveOptions; None: the defaults) and checks it as TF Serving would
    run it: its ops, then `requests` ({input name: array}) through it."""
    tf.saved_model.save(module, path, signatures=signatures, options=options)
    check_serving_ops(path)
    check_serves_like_tf_serving(path, requests)
