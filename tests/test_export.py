import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from conftest import DATA, run_clean, served_in_clean_process

import keras_bert
from exports import export, hub_layout
from keras_bert import serving
from keras_bert.serving.tf_serving import LoadedLikeTfServing
from tasks import glue, swag, trainer


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, two_block_checkpoint):  # hub outputs: one a block
    from absl import flags
    from absl.testing import flagsaver

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    run_dir = str(tmp_path_factory.mktemp("sst2_run"))
    with flagsaver.flagsaver(data_dir=os.path.join(DATA, "glue", "SST-2"), output_dir=run_dir,
                             init_checkpoint=two_block_checkpoint, num_train_epochs=1.0,
                             do_eval=False, max_seq_length=32):  # fmt: skip
        glue.run(glue.get_task("SST-2"))
    return run_dir


SENTENCES = ["a gripping film", "", "dull " * 500, b"invalid \xff utf-8"]


def saved_gradients(saved_model_dir):
    """How many custom gradients a SavedModel saved (what tf.saved_model.save traces for each
    custom-gradient op its functions run, unless told not to)."""
    proto = serving.saved_model_proto(saved_model_dir)
    return len(proto.meta_graphs[0].graph_def.library.registered_gradients)


def in_memory_probabilities(run_dir, sentences):
    logits = trainer.load_run(run_dir).predict(np.array(sentences, object), verbose=0)
    return tf.nn.softmax(logits).numpy()


def test_export_reloads_in_a_clean_process_with_the_same_outputs(sst2_run, tmp_path):
    path = export.export_run(sst2_run, str(tmp_path / "exported"), "sst2")
    assert path == str(tmp_path / "exported" / "sst2" / "1")
    assert not [n for n in os.listdir(tmp_path / "exported" / "sst2") if n.startswith(".tmp")]
    assert saved_gradients(path) == 0  # a task export serves; nothing differentiates it
    # Its encoder computes only what the head reads: no block's output unpacked to (batch,
    # seq, hidden), which only sequence_output and encoder_outputs need (the old code had them).
    assert not [node.name for node in serving.graph_nodes(path) if "unpack_tokens" in node.name]
    body = (
        f"out = f(sentence=tf.constant({SENTENCES!r}))\n"
        "print(json.dumps({'label': [l.decode() for l in out['label'].numpy()],"
        " 'label_id': out['label_id'].numpy().tolist(),"
        " 'probabilities': out['probabilities'].numpy().tolist()}))\n"
    )  # fmt: skip
    served = served_in_clean_process(path, body)
    expected = in_memory_probabilities(sst2_run, SENTENCES)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    assert served["label_id"] == expected.argmax(-1).tolist()
    assert served["label"] == [str(i) for i in served["label_id"]]


def test_exports_track_the_variables_their_functions_read(tmp_path):
    """TF Serving restores the checkpoint into the variables a SavedModel tracks. Tracking
    Keras's variables, as the exporter did before, left the ones the functions read
    uninitialised: the export ran under tf.saved_model.load and failed in TF Serving."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.arange(8, dtype="float32").reshape(2, 4)
    for tracked in ("keras", "captured"):
        module = tf.Module()
        module.f = tf.function(lambda x: model(x),
                               input_signature=[tf.TensorSpec([None, 4], name="x")])  # fmt: skip
        module.weights_read = (list(model.weights) if tracked == "keras"
                               else serving.captured_variables([module.f]))  # fmt: skip
        path = str(tmp_path / tracked)
        tf.saved_model.save(module, path, signatures={"serving_default": module.f})
        loaded = tf.saved_model.load(path)  # which runs both
        np.testing.assert_allclose(loaded.f(x), model(x), atol=1e-6)
        if tracked == "keras":
            with pytest.raises(ValueError, match="fails as TF Serving would load it: Could not "
                                                 "find variable"):  # fmt: skip
                serving.check_serves_like_tf_serving(path, [{"x": x}])
        else:
            (served,) = LoadedLikeTfServing(path)(x=x).values()
            np.testing.assert_allclose(served, model(x), atol=1e-6)


def test_tf_serving_script_answers_a_request_in_a_tensorflow_only_process(sst2_run, tmp_path):
    """keras_bert/serving/tf_serving.py as a script: what README's check in TF Serving 2.12's runtime
    runs (there with TensorFlow 2.12.1 and tensorflow-text 2.12.1)."""
    path = export.export_run(sst2_run, str(tmp_path), "sst2")
    script = os.path.join(os.path.dirname(serving.__file__), "tf_serving.py")

    def run(*flags):  # python tf_serving.py --export=PATH FLAGS, in a TensorFlow-only process
        return run_clean({"script": script, "args": [f"--export={path}", *flags]})

    answered = run("--inputs=" + json.dumps({"sentence": SENTENCES[:2]}))
    assert answered.returncode == 0, answered.stderr[-2000:]
    outputs = json.loads(answered.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(outputs["probabilities"],
                               in_memory_probabilities(sst2_run, SENTENCES[:2]), atol=1e-5)
    assert outputs["label"] == [str(i) for i in outputs["label_id"]]
    mistaken = run('--inputs={"sentences": ["a"]}')
    assert mistaken.returncode == 1
    assert mistaken.stderr.strip().splitlines()[-1] == (
        "error: the signature takes ['sentence'], not ['sentences']")


def test_token_id_signature_matches_text_signature(sst2_run, tmp_path):
    path = export.export_run(sst2_run, str(tmp_path), "sst2")
    loaded = tf.saved_model.load(path)
    inputs = trainer.load_run(sst2_run).preprocessor(tf.constant(SENTENCES[:2]))
    by_ids = loaded.signatures["serve_token_ids"](**inputs)
    by_text = loaded.signatures["serving_default"](sentence=tf.constant(SENTENCES[:2]))
    np.testing.assert_allclose(by_ids["probabilities"], by_text["probabilities"], atol=1e-6)
    # TF Serving feeds a request of another shape to the graph as it is: it is refused naming
    # the input, where it failed deep in the tokenizer ("The second input must be a scalar").
    for bad, shape in ((tf.constant([SENTENCES[:2]]), r"\[1,2\]"), (tf.constant("a"), r"\[\]")):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=rf"Shape of tensor sentence {shape} is not compatible with "
                                 r"expected shape \[\?\]"):  # fmt: skip
            loaded.signatures["serving_default"](sentence=bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Shape of tensor input_\w+ \[\d+\] "
                                                             r"is not compatible with expected "
                                                             r"shape \[\?,\?\]"):  # fmt: skip
        loaded.signatures["serve_token_ids"](**{k: v[0] for k, v in inputs.items()})


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
    from absl import app

    with pytest.raises(app.UsageError, match=r"^--version=2: .*m/2 exists; pick another, or "
                                             r"leave --version out"):  # fmt: skip
        export.export_run(sst2_run, str(tmp_path), "m", version=2)
    with pytest.raises(app.UsageError, match="^--version must be at least 1, got 0$"):
        export.export_run(sst2_run, str(tmp_path), "m", version=0)  # was taken as "the next"
    model = trainer.load_run(sst2_run)
    for version in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="version must be a whole number of at least 1"):
            model.export(str(tmp_path / "m"), version=version)
    with pytest.raises(FileExistsError, match="m/1 exists; pick another version, or leave it out"):
        model.export(str(tmp_path / "m"), version=1)
    assert sorted(os.listdir(tmp_path / "m")) == ["1", "2"]
    # NumPy's ints are whole numbers too (a version or part count read from an array).
    path = model.export(str(tmp_path / "n"), version=np.int64(3), column_parts=np.int64(1))
    assert os.path.basename(path) == "3"
    assert (12, 38) in {tuple(v.shape) for v in tf.saved_model.load(path).model_weights}


@pytest.mark.slow
def test_two_exports_at_once_into_one_folder_make_two_whole_versions(sst2_run, tmp_path):
    """Each writes under a name of its own; both may pick version 1 when they are done, and the
    rename that claims a version then fails for the second, which takes the next number."""
    from conftest import run_forked

    request = {"module": "exports.export", "timeout": 300,
               "args": [f"--run_dir={sst2_run}", f"--export_dir={tmp_path}", "--model_name=m"]}
    results = run_forked([request, request], timeout=600)  # two at a time
    for result in results:
        assert result["returncode"] == 0, result["stderr"][-3000:]
    named = sorted(os.path.basename(r["stdout"].strip().splitlines()[-1]) for r in results)
    assert named == sorted(os.listdir(tmp_path / "m")) == ["1", "2"]
    for version in named:
        path = str(tmp_path / "m" / version)
        assert tf.saved_model.contains_saved_model(path)
        assert os.path.isfile(os.path.join(path, "variables", "variables.index"))


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(sst2_run, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """The disk fills while TensorFlow writes the SavedModel's variables."""
    model = trainer.load_run(sst2_run)
    model_dir = tmp_path / "m"
    model.export(str(model_dir))

    def full_disk(module, path, *args, **kwargs):
        os.makedirs(os.path.join(path, "variables"))
        with open(os.path.join(path, "variables", "variables.data-00000-of-00001"), "wb") as f:
            f.write(b"\0" * 1000)
        raise tf.errors.ResourceExhaustedError(None, None, f"{path}/variables/variables.data-"
                                               "00000-of-00001; No space left on device")

    monkeypatch.setattr(serving, "save_checked", full_disk)
    with pytest.raises(OSError, match=rf"^could not write the export in {model_dir} \(the disk is "
                                      r"full\); make room, then export again$"):  # fmt: skip
        model.export(str(model_dir))
    assert os.listdir(model_dir) == ["1"]  # the good version, and no partial one beside it


def test_an_export_whose_version_was_taken_while_it_saved_takes_the_next(sst2_run, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    model = trainer.load_run(sst2_run)
    first = model.export(str(tmp_path / "m"))
    stale = iter([1])  # what a writer that started before the first was renamed saw
    newest = serving.next_version
    monkeypatch.setattr(serving, "next_version", lambda d: next(stale, None) or newest(d))
    second = model.export(str(tmp_path / "m"))
    assert (os.path.basename(first), os.path.basename(second)) == ("1", "2")
    assert sorted(os.listdir(tmp_path / "m")) == ["1", "2"]  # no temporary folder left
    assert tf.saved_model.contains_saved_model(second)


def test_column_parts_flag_is_checked_against_the_model_before_exporting(sst2_run, tmp_path):
    from absl import app

    # The tiny run's encoder has 2 heads, 12 hidden and 38 intermediate units.
    with pytest.raises(app.UsageError, match=r"^--column_parts=3: 2 attention heads cannot be "
                                             r"shared equally by 3 column parts"):  # fmt: skip
        export.export_run(sst2_run, str(tmp_path), "m", column_parts=3)
    with pytest.raises(app.UsageError, match="at least 1"):
        export.export_run(sst2_run, str(tmp_path), "m", column_parts=0)
    assert not os.path.exists(tmp_path / "m")
    path = export.export_run(sst2_run, str(tmp_path), "m", column_parts=1)
    assert (12, 38) in {tuple(v.shape) for v in tf.saved_model.load(path).model_weights}


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
    # The encoder keeps its custom gradients, for a user who fine-tunes it.
    assert saved_gradients(str(tmp_path / "sst2_encoder")) > 0
    outputs = encoder(inputs)
    expected = trainer.load_run(sst2_run).encoder(inputs)
    np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"], atol=1e-5)
    assert len(outputs["encoder_outputs"]) == 2
    signature = encoder.signatures["serving_default"](**inputs)
    assert {"pooled_output", "sequence_output", "encoder_outputs_0", "encoder_outputs_1"} == set(
        signature)  # fmt: skip
    # Both as TF Serving runs them: the same numbers.
    as_served = LoadedLikeTfServing(str(tmp_path / "sst2_preprocess"))(
        sentences=["hello world", "a longer second sentence"])
    for name, ids in inputs.items():
        np.testing.assert_array_equal(as_served[name], ids)
    as_served = LoadedLikeTfServing(str(tmp_path / "sst2_encoder"))(**as_served)
    np.testing.assert_allclose(as_served["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(as_served["encoder_outputs_1"], signature["encoder_outputs_1"],
                               atol=1e-6)  # fmt: skip


def test_hub_layout_folders_are_replaced_whole_or_not_at_all(sst2_run, tmp_path, monkeypatch):
    tokenizer = trainer.load_run(sst2_run).preprocessor.tokenizer
    target = str(tmp_path / "preprocess")

    def padded_length():
        return LoadedLikeTfServing(target)(sentences=["a b"])["input_word_ids"].shape[1]

    hub_layout.save_preprocessor(tokenizer, target, 16)
    assert padded_length() == 16

    def failing_check(path, requests):
        raise ValueError("the check failed")

    monkeypatch.setattr(serving, "check_serves_like_tf_serving", failing_check)
    with pytest.raises(ValueError, match="the check failed"):
        hub_layout.save_preprocessor(tokenizer, target, 32)
    assert os.listdir(tmp_path) == ["preprocess"] and padded_length() == 16  # the earlier one
    monkeypatch.undo()
    hub_layout.save_preprocessor(tokenizer, target, 32)
    assert os.listdir(tmp_path) == ["preprocess"] and padded_length() == 32


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
    logits = trainer.load_run(str(tmp_path / "run")).predict((context, endings), verbose=0)
    np.testing.assert_allclose(served["probabilities"], tf.nn.softmax(logits), atol=1e-5)
    as_served = LoadedLikeTfServing(path)(context=context, endings=endings)
    np.testing.assert_allclose(as_served["probabilities"], served["probabilities"], atol=1e-6)
    # An empty batch gets empty answers, not an error.
    empty = tf.saved_model.load(path).signatures["serving_default"](
        context=tf.constant([], tf.string), endings=tf.zeros([0, 4], tf.string))
    assert empty["probabilities"].shape == (0, 4) and empty["label_id"].shape == (0,)


def test_a_model_exported_onto_a_file_is_refused_in_one_line(tiny_checkpoint, tmp_path):
    """It failed inside TensorFlow's file calls (FailedPreconditionError)."""
    (tmp_path / "a_file").write_text("x")
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, 2, sequence_length=16)
    for path in (tmp_path / "a_file", tmp_path / "a_file" / "sub"):
        with pytest.raises(NotADirectoryError, match=r"a_file is a file; an export is a folder "
                                                     r"of versions: give a folder path$"):  # fmt: skip
            model.export(str(path), allow_untrained_head=True)


def test_an_export_dir_that_cannot_be_made_is_refused_before_loading(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.keras").write_bytes(b"")  # never read: the folder is checked first
    (tmp_path / "a_file").write_text("x")
    cannot = r"^--export_dir: cannot create the folder .*a_file/out \(Not a directory\); pass"
    with pytest.raises(ValueError, match=cannot):
        export.export_run(str(run), str(tmp_path / "a_file" / "out"), "m")
    with pytest.raises(ValueError, match=r"^--export_dir: .*a_file is a file, not a folder$"):
        export.export_run(str(run), str(tmp_path / "a_file"), "m")
