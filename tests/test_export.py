import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from conftest import DATA

from exports import export
from keras_bert import serving
from tasks import common, glue, swag


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, tiny_checkpoint):
    from absl import flags
    from absl.testing import flagsaver

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    run_dir = str(tmp_path_factory.mktemp("sst2_run"))
    with flagsaver.flagsaver(data_dir=os.path.join(DATA, "glue", "SST-2"), output_dir=run_dir,
                             init_checkpoint=tiny_checkpoint, num_train_epochs=1.0,
                             do_eval=False, max_seq_length=32):  # fmt: skip
        glue.run(glue.get_task("SST-2"))
    return run_dir


SENTENCES = ["a gripping film", "", "dull " * 500, b"invalid \xff utf-8"]


def in_memory_probabilities(run_dir, sentences):
    logits = common.load_run(run_dir).predict(np.array(sentences, object), verbose=0)
    return tf.nn.softmax(logits).numpy()


def test_export_reloads_in_a_clean_process_with_the_same_outputs(sst2_run, tmp_path):
    path = export.export_run(sst2_run, str(tmp_path / "exported"), "sst2")
    assert path == str(tmp_path / "exported" / "sst2" / "1")
    assert not [n for n in os.listdir(tmp_path / "exported" / "sst2") if n.startswith(".tmp")]
    script = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "assert 'keras_bert' not in sys.modules and 'tasks' not in sys.modules\n"
        "f = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        f"out = f(sentence=tf.constant({SENTENCES!r}))\n"
        "print(json.dumps({'label': [l.decode() for l in out['label'].numpy()],"
        " 'label_id': out['label_id'].numpy().tolist(),"
        " 'probabilities': out['probabilities'].numpy().tolist()}))\n"
    )  # fmt: skip
    result = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    expected = in_memory_probabilities(sst2_run, SENTENCES)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    assert served["label_id"] == expected.argmax(-1).tolist()
    assert served["label"] == [str(i) for i in served["label_id"]]


def test_token_id_signature_matches_text_signature(sst2_run, tmp_path):
    path = export.export_run(sst2_run, str(tmp_path), "sst2")
    loaded = tf.saved_model.load(path)
    inputs = common.load_run(sst2_run).preprocessor(tf.constant(SENTENCES[:2]))
    by_ids = loaded.signatures["serve_token_ids"](**inputs)
    by_text = loaded.signatures["serving_default"](sentence=tf.constant(SENTENCES[:2]))
    np.testing.assert_allclose(by_ids["probabilities"], by_text["probabilities"], atol=1e-6)


def test_warmup_requests_are_prediction_logs(sst2_run, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    path = export.export_run(sst2_run, str(tmp_path), "sst2")
    records = list(tf.data.TFRecordDataset(
        os.path.join(path, "assets.extra", "tf_serving_warmup_requests")).as_numpy_iterator())  # fmt: skip
    assert len(records) == 2
    log = prediction_log_pb2.PredictionLog.FromString(records[1])
    request = log.predict_log.request
    assert request.model_spec.name == "sst2"
    assert request.model_spec.signature_name == "serving_default"
    assert len(tf.make_ndarray(request.inputs["sentence"])) == 3


def test_versions_increase(sst2_run, tmp_path):
    first = export.export_run(sst2_run, str(tmp_path), "m")
    second = export.export_run(sst2_run, str(tmp_path), "m")
    assert (os.path.basename(first), os.path.basename(second)) == ("1", "2")
    with pytest.raises(FileExistsError):
        export.export_run(sst2_run, str(tmp_path), "m", version=2)


def test_op_check_refuses_ops_tf_serving_lacks(tmp_path):
    """RoundRobinTrim is the op TF Serving 2.12's bundled tensorflow-text lacks."""
    trimmer = tf_text.RoundRobinTrimmer(max_seq_length=4)
    module = tf.Module()
    module.f = tf.function(lambda x: trimmer.trim([x, x]),
                           input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)])  # fmt: skip
    tf.saved_model.save(module, str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="cannot run: .*RoundRobinTrim"):
        serving.check_serving_ops(str(tmp_path / "bad"))
    assert not os.path.exists(tmp_path / "exported")


def test_hub_layout_preprocessor_and_encoder(sst2_run, tmp_path):
    export.export_run(sst2_run, str(tmp_path), "sst2", hub=True)
    preprocess = tf.saved_model.load(str(tmp_path / "sst2_preprocess"))
    encoder = tf.saved_model.load(str(tmp_path / "sst2_encoder"))
    inputs = preprocess(tf.constant(["hello world", "a longer second sentence"]))
    assert {k: v.shape for k, v in inputs.items()} == {k: (2, 32) for k in inputs}
    tokens = preprocess.tokenize(tf.constant(["hello world"]))
    pair = preprocess.bert_pack_inputs([tokens, tokens])
    assert pair["input_type_ids"].numpy()[0, :7].tolist() == [0, 0, 0, 0, 1, 1, 1]
    outputs = encoder(inputs)
    expected = common.load_run(sst2_run).encoder(inputs)
    np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-5)
    assert len(outputs["encoder_outputs"]) == 2
    signature = encoder.signatures["serving_default"](**inputs)
    assert {"pooled_output", "sequence_output", "encoder_outputs_0", "encoder_outputs_1"} == set(
        signature)  # fmt: skip


def test_swag_export_takes_context_and_endings(tmp_path, tiny_checkpoint, flags_parsed):
    flags_parsed.train_file = os.path.join(DATA, "swag_sample.jsonl")
    flags_parsed.dev_file = os.path.join(DATA, "swag_sample.jsonl")
    flags_parsed.output_dir = str(tmp_path / "run")
    flags_parsed.init_checkpoint = tiny_checkpoint
    flags_parsed.num_train_epochs = 1
    flags_parsed.train_batch_size = 4
    flags_parsed.bucket_by_length = True
    swag.run()
    path = export.export_run(str(tmp_path / "run"), str(tmp_path / "exported"))
    context = ["He opens the door.", ""]
    endings = [["He walks in.", "The sky", "x", ""], ["", "", "", ""]]
    served = tf.saved_model.load(path).signatures["serving_default"](
        context=tf.constant(context), endings=tf.constant(endings))
    assert served["probabilities"].shape == (2, 4)
    # The export packs the choices as the saved model does in predict (one implementation).
    logits = common.load_run(str(tmp_path / "run")).predict((context, endings), verbose=0)
    np.testing.assert_allclose(served["probabilities"], tf.nn.softmax(logits), atol=1e-5)
    # An empty batch gets empty answers, not an error.
    empty = tf.saved_model.load(path).signatures["serving_default"](
        context=tf.constant([], tf.string), endings=tf.zeros([0, 4], tf.string))
    assert empty["probabilities"].shape == (0, 4) and empty["label_id"].shape == (0,)
