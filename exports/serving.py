"""SavedModels that TF Serving runs, with the tokenizer and packer inside.

Every export is checked op by op against exports/serving_ops.txt (what TF Serving 2.12 can
run: core TensorFlow 2.12 plus its bundled tensorflow-text 2.12.1) and written under a
temporary name, then renamed into `<export_dir>/<model_name>/<version>/`, the layout TF Serving
watches; it ignores the temporary name.
"""

import os
import shutil
import time

import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from keras_bert.encoder import INPUT_NAMES
from keras_bert.tokenizer import BertPacker
from tasks.ner_tagging import WordTagger
from tasks.squad_spans import SpanWindows

SERVING_OPS = os.path.join(os.path.dirname(__file__), "serving_ops.txt")
TEXT_INPUTS = {1: ("sentence",), 2: ("sentence1", "sentence2")}


def text_specs(names):
    """One rank-1 string input per name: the only place signature inputs are spelled."""
    return [tf.TensorSpec([None], tf.string, name=name) for name in names]


def token_id_specs():
    return [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]


class ClassifierModule(tf.Module):
    """Strings in, label ids, label names and probabilities out (a score for regression)."""

    def __init__(self, model, tokenizer, labels, sequence_length):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.packer = BertPacker.from_tokenizer(tokenizer, sequence_length=sequence_length)
        self.labels = None if labels is None else tf.constant(labels)

    def outputs(self, inputs):
        logits = tf.cast(self.model(inputs, training=False), tf.float32)
        if self.labels is None:
            return {"score": logits[:, 0]}
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "label_id": label_ids,
            "label": tf.gather(self.labels, label_ids),
            "probabilities": tf.nn.softmax(logits, axis=-1),
        }

    def from_text(self, *texts):
        return self.outputs(self.packer(*[self.tokenizer(text) for text in texts]))

    def from_token_ids(self, *ids):
        return self.outputs(dict(zip(INPUT_NAMES, ids)))

    def signatures(self, num_texts):
        text = tf.function(self.from_text, input_signature=text_specs(TEXT_INPUTS[num_texts]))
        ids = tf.function(self.from_token_ids, input_signature=token_id_specs())
        return {"serving_default": text, "serve_token_ids": ids}


class MultipleChoiceModule(ClassifierModule):
    """`context` (batch,) and `endings` (batch, choices) strings in; label id and probabilities
    over the choices out. Each ending is packed with the context, as in training."""

    def __init__(self, model, tokenizer, sequence_length, num_choices):
        super().__init__(model, tokenizer, [str(i) for i in range(num_choices)], sequence_length)
        self.num_choices = num_choices

    def from_choices(self, context, endings):
        contexts = tf.repeat(context, self.num_choices)
        packed = self.packer(self.tokenizer(contexts), self.tokenizer(tf.reshape(endings, [-1])))
        shape = [-1, self.num_choices]
        outputs = self.outputs(
            {k: tf.reshape(v, shape + [tf.shape(v)[-1]]) for k, v in packed.items()}
        )
        del outputs["label"]
        return outputs

    def signatures(self, num_texts=None):
        choices = tf.function(self.from_choices, input_signature=[
            tf.TensorSpec([None], tf.string, name="context"),
            tf.TensorSpec([None, self.num_choices], tf.string, name="endings")])  # fmt: skip
        ids = tf.function(self.from_token_ids, input_signature=[
            tf.TensorSpec([None, self.num_choices, None], tf.int32, name=name)
            for name in INPUT_NAMES])  # fmt: skip
        return {"serving_default": choices, "serve_token_ids": ids}


class SquadModule(tf.Module):
    """`question` and `context` strings in; the best answer out: `answer` text, its `start`
    and `end` character offsets in the context (-1 for none), `score`, and for SQuAD 2.0
    `no_answer`. Windowing and the n-best search run in the graph (tasks/squad_spans.py)."""

    def __init__(self, model, tokenizer, run_info):
        super().__init__()
        self.model = model
        self.spans = SpanWindows(
            tokenizer, run_info["max_seq_length"], run_info["max_query_length"],
            run_info["doc_stride"], run_info["n_best_size"], run_info["max_answer_length"],
        )  # fmt: skip
        self.threshold = (run_info["null_score_diff_threshold"]
                          if run_info["version_2_with_negative"] else None)  # fmt: skip

    def answer(self, question, context):
        result = self.spans.answer(self.model, question, context, self.threshold)
        del result["candidates"]
        return result

    def signatures(self):
        specs = text_specs(("question", "context"))
        return {"serving_default": tf.function(self.answer, input_signature=specs)}


class NerModule(tf.Module):
    """`sentence` strings in; its entities out, padded to the most in the batch:
    `entity_text`, `entity_type`, `entity_start` and `entity_end` (character offsets, -1 as
    padding) and `num_entities`. Words are split at white space (tasks/ner_tagging.py)."""

    def __init__(self, model, tokenizer, run_info):
        super().__init__()
        self.model = model
        self.tagger = WordTagger(tokenizer, run_info["tags"], run_info["max_seq_length"])

    def entities(self, sentence):
        result = self.tagger.tag(self.model, sentence)
        del result["word_tags"]
        return result

    def signatures(self):
        specs = text_specs(("sentence",))
        return {"serving_default": tf.function(self.entities, input_signature=specs)}


def graph_ops(saved_model_dir):
    """Every op type in a SavedModel's graph and function library."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops |= {node.op for node in meta_graph.graph_def.node}
        for function in meta_graph.graph_def.library.function:
            ops |= {node.op for node in function.node_def}
    return ops


def check_serving_ops(saved_model_dir):
    """Raises ValueError naming every op of the export that TF Serving 2.12 lacks."""
    with open(SERVING_OPS, encoding="utf-8") as f:
        allowed = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    unsupported = sorted(graph_ops(saved_model_dir) - allowed)
    if unsupported:
        raise ValueError(f"{saved_model_dir} uses ops TF Serving 2.12 cannot run: "
                         f"{', '.join(unsupported)}")  # fmt: skip


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


def save_versioned(module, signatures, export_dir, model_name, warmup=None, version=None):
    """Saves, checks ops, adds warmup requests, then renames into place. Returns the path."""
    model_dir = os.path.join(export_dir, model_name)
    version = version or next_version(model_dir)
    final = os.path.join(model_dir, str(version))
    if os.path.exists(final):
        raise FileExistsError(f"{final} exists; pick another --version")
    tmp = os.path.join(model_dir, f".tmp-{version}-{int(time.time())}")
    try:
        tf.saved_model.save(module, tmp, signatures=signatures)
        check_serving_ops(tmp)
        if warmup:
            write_warmup_requests(tmp, model_name, warmup)
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
