"""The library's task models as a Keras user meets them: raw strings in fit / evaluate /
predict, one self-contained .keras file, and one export call."""

import copy
import json
import os
import subprocess
import sys
import warnings
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import graph_float_bytes, run_binary, served_in_clean_process

import keras_bert
from keras_bert.model import packing

SENTENCES = ["a gripping , moving film", "dull and far too long", "a delight", "tedious mess"]
LABELS = [1, 0, 1, 0]


@pytest.fixture
def classifier(tiny_checkpoint):
    return keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                     sequence_length=32, labels=["neg", "pos"])  # fmt: skip


def weights_bytes(model):
    return sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights)


def test_public_names_need_no_submodules():
    for name in ("BertClassifier", "BertMultipleChoice", "BertQuestionAnswerer",
                 "BertTokenClassifier", "BertPretrainer", "BertEncoder", "BertTokenizer",
                 "BertPacker", "BertPreprocessor", "load_checkpoint", "save_checkpoint",
                 "create_optimizer"):  # fmt: skip
        assert hasattr(keras_bert, name), name


def test_classifier_learns_from_lists_arrays_and_datasets(classifier):
    classifier.compile(learning_rate=2e-2)
    x, y = SENTENCES * 8, LABELS * 8
    before = classifier.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    classifier.fit(x * 20, y * 20, batch_size=8, verbose=0)  # 20 passes as one epoch
    after = classifier.evaluate(np.array(x), np.array(y), verbose=0, return_dict=True)
    assert after["loss"] < 0.5 * before and after["accuracy"] == 1.0
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
    assert classifier.evaluate(dataset, verbose=0, return_dict=True)["accuracy"] == 1.0
    logits = classifier.predict(SENTENCES, verbose=0)
    assert logits.shape == (4, 2) and logits.argmax(-1).tolist() == LABELS
    from_dataset = classifier.predict(tf.data.Dataset.from_tensor_slices(SENTENCES).batch(3),
                                      verbose=0)  # fmt: skip
    np.testing.assert_allclose(from_dataset, logits, atol=1e-5)


def test_preprocessing_is_traced_once_and_predict_runs_the_exports_graph(classifier,
                                                                         monkeypatch):  # fmt: skip
    traces = []  # preprocess_batch's Python body runs only while a graph is traced
    preprocess = type(classifier).preprocess_batch
    monkeypatch.setattr(type(classifier), "preprocess_batch",
                        lambda self, *data: traces.append(1) or preprocess(self, *data))
    logits = classifier.predict(SENTENCES, verbose=0)
    traced = len(traces)
    np.testing.assert_allclose(classifier.predict(SENTENCES[::-1], verbose=0), logits[::-1],
                               atol=1e-6)  # fmt: skip
    # Batches of 2 then 1: other shapes, which Keras alone traced again, twice in one call.
    np.testing.assert_allclose(classifier.predict(SENTENCES[:3], batch_size=2, verbose=0),
                               logits[:3], atol=1e-6)  # fmt: skip
    assert traced == 1 and len(traces) == 1  # the first call's graph serves any batch size
    # The strings are preprocessed in the predict step: the graph an export runs, number for number.
    direct = tf.function(lambda s: classifier(classifier.preprocessor(s)))(tf.constant(SENTENCES))
    np.testing.assert_array_equal(logits, direct.numpy())
    classifier.compile()
    classifier.evaluate(SENTENCES, LABELS, verbose=0)
    classifier.evaluate(SENTENCES[::-1], LABELS[::-1], verbose=0)
    assert len(traces) == 2  # evaluate's tf.data map: one more graph, kept for the next call


def test_fit_and_evaluate_trace_their_step_once(classifier, monkeypatch):
    """Without a strategy, Keras builds the loss and metric trackers while tracing the first
    step; the variables that creates made tf.function trace the step twice (15 s of a 43 s
    first fit on MiniLM). BertTask builds them before the trace."""
    traces = {"train": 0, "test": 0}  # a step's Python body runs only while it is traced
    cls = type(classifier)
    for kind in traces:
        step = getattr(cls, f"{kind}_step")
        monkeypatch.setattr(cls, f"{kind}_step", lambda self, data, kind=kind, step=step: (
            traces.__setitem__(kind, traces[kind] + 1) or step(self, data)))  # fmt: skip
    classifier.compile(learning_rate=1e-3)
    history = classifier.fit(SENTENCES, LABELS, batch_size=2, epochs=2, verbose=0).history
    results = classifier.evaluate(SENTENCES, LABELS, batch_size=2, verbose=0, return_dict=True)
    assert traces == {"train": 1, "test": 1}
    assert set(history) == set(results) == {"loss", "accuracy"}  # the trackers built early report
    assert np.isfinite(history["loss"]).all() and np.isfinite(results["loss"])


def test_preprocessors_called_from_python_run_one_traced_graph(tiny_checkpoint, monkeypatch,
                                                                tmp_path):  # fmt: skip
    from tensorflow.python.saved_model import loader_impl

    from keras_bert.models.spans import SpanWindows
    from keras_bert.models.tagging import WordTagger

    tokenizer = keras_bert.BertTokenizer.from_checkpoint(tiny_checkpoint)
    pairs = [SENTENCES[:3], SENTENCES[1:]]
    choices = [SENTENCES[:2], [SENTENCES, SENTENCES[::-1]]]
    cases = [  # (preprocessor, texts as a user passes them: lists, arrays, tensors, dicts)
        (keras_bert.BertPreprocessor.from_tokenizer(tokenizer, 16),
         [SENTENCES, np.array(SENTENCES[:2]), tf.constant(SENTENCES[1:])]),
        (keras_bert.BertPreprocessor.from_tokenizer(tokenizer, 16, num_segments=2),
         [pairs, tuple(tf.constant(t) for t in pairs),
          {"sentence1": pairs[0][:1], "sentence2": pairs[1][:1]}]),
        (keras_bert.BertMultipleChoicePreprocessor.from_tokenizer(tokenizer, 16, num_choices=4),
         [choices, {"context": choices[0][:1], "endings": choices[1][:1]}]),
        (WordTagger.from_tokenizer(tokenizer, 12, tags=["O", "B-X", "I-X"]), [SENTENCES]),
        (SpanWindows.from_tokenizer(tokenizer, 24, max_query_length=6, doc_stride=6),
         [[["what is it ?"], [" ".join(SENTENCES)]]]),
    ]  # fmt: skip
    for preprocessor, inputs in cases:
        calls = []  # call's Python body: once per eager call op by op, once in all when traced
        call = type(preprocessor).call
        monkeypatch.setattr(preprocessor, "call", lambda x, c=call, p=preprocessor:
                            calls.append(1) or c(p, x))  # fmt: skip
        for x in inputs * 2:
            traced, op_by_op = preprocessor(x), keras.layers.Layer.__call__(preprocessor, x)
            assert traced.keys() == op_by_op.keys()
            for key in traced:
                np.testing.assert_array_equal(traced[key], op_by_op[key])
        assert len(calls) == 1 + 2 * len(inputs), type(preprocessor).__name__
        with pytest.raises(ValueError, match="must be strings"):
            preprocessor([np.arange(2)] * 2 if preprocessor.num_segments == 2 else np.arange(2))

    def saved_functions(layer, name):  # what tf.saved_model.save keeps of a layer
        tf.saved_model.save(layer, str(tmp_path / name))
        graph = loader_impl.parse_saved_model(str(tmp_path / name)).meta_graphs[0].graph_def
        return len(graph.library.function)

    fresh = keras_bert.BertPreprocessor.from_tokenizer(tokenizer, 16)
    assert saved_functions(cases[0][0], "called") == saved_functions(fresh, "fresh")
    # Masking stays op by op: it repeats after the same seed, as random ops run eagerly do.
    masking = keras_bert.BertPretrainer.from_checkpoint(tiny_checkpoint, sequence_length=64)
    texts = [[" ".join(SENTENCES)] * 4] * 2  # 4 pairs of 33 tokens: about 5 masked in each
    masked = []
    for seed in (3, 3, 4):
        keras.utils.set_random_seed(seed)
        masked.append(masking.preprocessor(texts)["input_word_ids"].numpy())
    np.testing.assert_array_equal(masked[0], masked[1])
    assert not np.array_equal(masked[0], masked[2])


def test_preprocessing_graphs_follow_a_new_vocabulary_and_sequence_length(tiny_checkpoint):
    """Every graph kept between calls that preprocesses (a preprocessor called from Python, a
    task model's dataset map and its predict step) is traced again when what it baked in
    changes: before, a vocabulary set after the first call left each on the old one's ids."""
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                      sequence_length=16)  # fmt: skip
    preprocessor, tokenizer = model.preprocessor, model.preprocessor.tokenizer
    vocabulary = list(tokenizer.vocabulary)
    first, second = vocabulary.index("gripping"), vocabulary.index("moving")
    texts = SENTENCES[:1]  # "a gripping , moving film"

    def ids():  # as a preprocessor called from Python, fit's dataset, a step's graph
        dataset = next(iter(model.make_dataset(texts, [1])))[0]["input_word_ids"]
        return preprocessor(texts)["input_word_ids"].numpy(), dataset.numpy()

    for found in ids():
        assert list(found[0, 2:5]) == [first, 1010, second]
    before = model.predict(texts, verbose=0)

    vocabulary[first], vocabulary[second] = "moving", "gripping"
    tokenizer.set_vocabulary(vocabulary)
    op_by_op = keras.layers.Layer.__call__(preprocessor, texts)["input_word_ids"]
    for found in ids():
        np.testing.assert_array_equal(found, op_by_op)
        assert list(found[0, 2:5]) == [second, 1010, first]
    after = model.predict(texts, verbose=0)
    model.predict_function = None  # a predict step made afresh
    np.testing.assert_array_equal(after, model.predict(texts, verbose=0))
    assert not np.allclose(after, before)

    preprocessor.packer.sequence_length = 4
    assert [found.shape for found in ids()] == [(1, 4), (1, 4)]


def test_untruncated_lengths_are_what_the_packer_packs_without_truncation(tiny_checkpoint):
    from keras_bert.models.tagging import WordTagger

    tokenizer = keras_bert.BertTokenizer.from_checkpoint(tiny_checkpoint)
    long = " ".join(SENTENCES)  # 15 word pieces
    pairs = [[long, "tedious mess"], ["a delight", "a delight"]]
    cases = [  # (preprocessor class, its extra arguments, texts)
        (keras_bert.BertPreprocessor, {}, SENTENCES + [long]),
        (keras_bert.BertPreprocessor, {"num_segments": 2}, pairs),
        (keras_bert.BertMultipleChoicePreprocessor, {"num_choices": 2}, (pairs[0], pairs)),
        (WordTagger, {"tags": ["O", "B-X", "I-X"]}, SENTENCES + [long]),
    ]  # fmt: skip
    for kind, arguments, texts in cases:
        full = kind.from_tokenizer(tokenizer, 64, **arguments)
        lengths = full.untruncated_lengths(texts).numpy()
        np.testing.assert_array_equal(lengths, full(texts)["input_mask"].numpy().sum(-1))
        short = kind.from_tokenizer(tokenizer, 12, **arguments)
        np.testing.assert_array_equal(short.untruncated_lengths(texts), lengths)
        np.testing.assert_array_equal(short(texts)["input_mask"].numpy().sum(-1),
                                      np.minimum(lengths, 12))  # fmt: skip
        assert (lengths > 12).any() and (lengths <= 12).any(), kind.__name__


def test_predict_under_a_strategy_preprocesses_in_tf_data(classifier, tiny_checkpoint):
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        placed = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                           sequence_length=32)  # fmt: skip
    placed.set_weights(classifier.get_weights())
    assert classifier._preprocesses_in_step() and not placed._preprocesses_in_step()
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        assert not classifier._preprocesses_in_step()  # a strategy in scope at the call
    np.testing.assert_allclose(placed.predict(SENTENCES, verbose=0),
                               classifier.predict(SENTENCES, verbose=0), atol=1e-6)  # fmt: skip


def test_datasets_built_from_lists_run_without_tf_data_autotuning(classifier):
    """Its thread's sleep (up to 10 s) delays the end of a fit: see batching.without_autotuning.
    A Dataset the user passes keeps the options the user gave it."""
    built = classifier.make_dataset(SENTENCES, LABELS, training=True)
    assert built.options().autotune.enabled is False
    assert [len(x["input_word_ids"]) for x, _ in built] == [4]
    users = tf.data.Dataset.from_tensor_slices((SENTENCES, LABELS)).batch(2)
    assert classifier.make_dataset(users).options().autotune.enabled is not False


def test_compile_auto_counts_the_steps_of_its_warmup_and_decay(classifier):
    classifier.compile(learning_rate=1e-3, warmup_proportion=0.5)
    classifier.fit(SENTENCES * 4, LABELS * 4, batch_size=4, epochs=2, verbose=0)
    schedule = classifier.optimizer._learning_rate  # Keras keeps the schedule object only here
    assert (schedule.total_steps, schedule.warmup_steps) == (8, 4)
    assert classifier.optimizer.global_clipnorm == 1.0
    assert float(classifier.optimizer.learning_rate) == 0.0  # decayed to 0 at the last step


def test_each_fit_runs_a_schedule_and_none_trains_past_its_end(classifier):
    """The recipe's rate decays to 0 at the schedule's last step. A second fit reused the first
    fit's schedule, ended, and changed not one weight while Keras reported its loss."""
    def weights():
        return [w.numpy().copy() for w in classifier.trainable_weights]

    def changed(before):
        return any(np.abs(a - b).max() > 0 for a, b in zip(before, weights()))

    classifier.compile(learning_rate=1e-3)
    classifier.fit(SENTENCES, LABELS, batch_size=2, verbose=0)
    before = weights()
    classifier.fit(SENTENCES, LABELS, batch_size=2, epochs=3, initial_epoch=1, verbose=0)
    schedule = classifier.optimizer._learning_rate
    assert (schedule.total_steps, int(classifier.optimizer.iterations)) == (4, 4)
    assert changed(before)
    with pytest.raises(ValueError, match=r"cannot count the steps .* compile\(total_steps"):
        classifier.train_on_batch(SENTENCES, LABELS)
    for kwargs, message in [  # they failed in the schedule: "total_steps must be positive"
        (dict(epochs=0), "epochs must be a whole number of at least 1, got 0"),
        (dict(epochs=2, initial_epoch=2), r"at least 3 \(more than initial_epoch=2\), got 2"),
        (dict(epochs=1.5), "epochs must be a whole number of at least 1, got 1.5"),
        (dict(initial_epoch=-1), "initial_epoch must be a whole number of at least 0"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            classifier.fit(SENTENCES, LABELS, verbose=0, **kwargs)
    # A schedule given its length spans every call until it ends, and is not run past it.
    classifier.compile(learning_rate=1e-3, total_steps=3)
    classifier.fit(SENTENCES, LABELS, batch_size=2, verbose=0)
    before = weights()
    classifier.train_on_batch(SENTENCES, LABELS)
    assert changed(before) and int(classifier.optimizer.iterations) == 3
    before = weights()
    with pytest.raises(ValueError, match="training steps 4 to 5 would run past the end of the "
                       "learning-rate schedule at step 3, where the rate is 0"):
        classifier.fit(SENTENCES, LABELS, batch_size=2, verbose=0)
    with pytest.raises(ValueError, match="training step 4 would run past .* at step 3"):
        classifier.train_on_batch(SENTENCES, LABELS)
    assert not changed(before)


def test_a_second_fit_restarts_the_recipe_in_the_steps_already_traced(tiny_checkpoint):
    """Under compile()'s recipe each fit starts a fresh AdamW and schedule: restarted in place,
    the second fit trains to the same bits as on a model compiled anew before it, and Keras
    keeps its traced steps, the predict step traced before the first fit included (a new
    optimizer made it trace each again)."""
    def trained(recompile):
        keras.utils.set_random_seed(3)  # the same weights and dropout seeds on both models
        model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=2,
                                                          sequence_length=32)  # fmt: skip
        model.compile(learning_rate=1e-2)
        model.predict(SENTENCES, verbose=0)
        predict_step = model.predict_function
        model.fit(SENTENCES, LABELS, batch_size=2, epochs=2, shuffle=False, verbose=0)
        model.predict(SENTENCES, verbose=0)
        steps = model.train_function, predict_step
        if recompile:
            model.compile(learning_rate=1e-2)
        model.fit(SENTENCES[:3], LABELS[:3], batch_size=2, shuffle=False, verbose=0)
        model.predict(SENTENCES, verbose=0)
        return model, steps

    restarted, (train_step, predict_step) = trained(recompile=False)
    assert restarted.train_function is train_step
    assert restarted.predict_function is predict_step
    schedule = restarted.optimizer._learning_rate
    assert (schedule.total_steps, schedule.warmup_steps) == (2, 0)  # the second fit's own
    assert int(restarted.optimizer.iterations) == 2
    anew, _ = trained(recompile=True)
    assert anew.optimizer is not restarted.optimizer
    for a, b in zip(restarted.weights, anew.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # The next fit made in a process of its own from the saved file follows the recipe too.
    assert restarted.optimizer.get_config()["learning_rate"]["config"]["total_steps"] == 2


def test_fit_makes_one_iterator_and_each_epoch_is_one_whole_pass(classifier, monkeypatch):
    """Told a dataset's length, Keras's loop made an iterator at each epoch's (and each
    evaluation's) start and end, each instantiating the preprocessing graph again: fit and
    evaluate hand it the dataset repeated, with its steps, so it makes one for fit's epochs and
    one an evaluation; an epoch is still one pass, a short last batch included."""
    made = []
    iterate = tf.data.Dataset.__iter__
    monkeypatch.setattr(tf.data.Dataset, "__iter__",
                        lambda dataset: made.append(dataset) or iterate(dataset))  # fmt: skip

    sizes = []  # batches trained, an epoch

    class Batches(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            sizes.append(0)

        def on_train_batch_end(self, batch, logs=None):
            sizes[-1] += 1

    texts, labels = SENTENCES + ["fine"], LABELS + [1]  # batches of 2, 2 and 1
    classifier.compile()
    history = classifier.fit(texts, labels, batch_size=2, epochs=3, shuffle=False, verbose=0,
                             validation_data=(texts, labels), callbacks=[Batches()])  # fmt: skip
    assert sizes == [3, 3, 3] and int(classifier.optimizer.iterations) == 9
    assert len(made) == 1 + 3  # fit's, and one for each epoch's validation
    made.clear()
    evaluated = classifier.evaluate(texts, labels, batch_size=2, verbose=0, return_dict=True)
    assert len(made) == 1
    made.clear()
    assert classifier.predict(texts, batch_size=2, verbose=0).shape == (5, 2) and len(made) == 1
    # The evaluation after the last epoch saw the same weights and the same one pass.
    assert evaluated["loss"] == pytest.approx(history.history["val_loss"][-1], rel=1e-6)
    assert evaluated["accuracy"] == history.history["val_accuracy"][-1]


def test_a_model_with_weights_stored_for_inference_refuses_to_train(classifier):
    """with_precision(..., for_inference=True) stores bfloat16 weights; its fit failed with
    TensorFlow's "Input 'y' of 'Mul' Op has type float32 that does not match type bfloat16"."""
    stored = classifier.with_precision("bfloat16", for_inference=True)
    for train in (lambda: stored.fit(SENTENCES, LABELS, verbose=0),
                  lambda: stored.train_on_batch(SENTENCES, LABELS)):  # fmt: skip
        message = r"stores its weights in bfloat16 for inference .* with_precision\('bfloat16'\)"
        with pytest.raises(ValueError, match=message):
            train()
    assert stored.predict(SENTENCES, verbose=0).shape == (4, 2)
    classifier.with_precision("bfloat16").fit(SENTENCES, LABELS, verbose=0)


def test_compile_refuses_recipe_settings_that_would_train_wrongly(classifier):
    """Each of these compiled and trained without a word: a NaN rate made every weight NaN, a
    negative one or a negative decay trained away from the targets, a clipping norm of 0
    stopped training, layer_decay=0 meant none, total_steps=0 was counted again by fit."""
    for kwargs, message in [
        (dict(learning_rate=float("nan")), "learning_rate must be a finite number above 0"),
        (dict(learning_rate=-1e-3), "learning_rate .* got -0.001"),
        (dict(warmup_proportion=-0.1), "warmup_proportion must be a fraction from 0 to 1"),
        (dict(weight_decay=-1.0), "weight_decay must be a finite number of at least 0"),
        (dict(clipnorm=0), "clipnorm must be a finite number above 0, or None"),
        (dict(layer_decay=0), r"layer_decay must be a number in \(0, 1\], or None"),
        (dict(total_steps=0), "total_steps must be a whole number of at least 1"),
        (dict(total_steps=2.5), "total_steps .* got 2.5"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            classifier.compile(**kwargs)
    classifier.compile(learning_rate=1, clipnorm=None, total_steps=4)  # an int rate is a rate
    assert float(classifier.optimizer.learning_rate) == 1.0  # 10% of 4 steps: no warmup
    assert classifier.optimizer.global_clipnorm is None


def test_a_model_compiled_again_reports_its_new_metrics(classifier):
    """compile() keeps its recipe until fit counts the steps; its metrics were kept where Keras
    tracked them as the model's own, so a second compile (with total_steps, say) reported the
    first's accuracy, never updated: 0 whatever the model predicted."""
    keras.utils.set_random_seed(0)
    x, y = SENTENCES * 2, [1, 1, 1, 0, 1, 0, 1, 0]  # not all of one class either way
    for steps in ([], ["fit"]):
        classifier.compile(learning_rate=1e-3)
        if steps:
            classifier.fit(x, y, verbose=0)
        classifier.compile(learning_rate=1e-3, total_steps=3)
        correct = classifier.predict(x, verbose=0).argmax(-1) == y
        accuracy = classifier.evaluate(x, y, verbose=0, return_dict=True)["accuracy"]
        assert accuracy == pytest.approx(correct.mean()) and 0 < accuracy < 1
        assert [m.name for m in classifier.metrics].count("accuracy") == 0  # in compile_metrics


def test_task_models_choose_xla_as_keras_does_and_other_models_refuse_it(
        classifier, tiny_checkpoint, monkeypatch):  # fmt: skip
    """Keras's jit_compile="auto" picks XLA wherever a GPU is present (a fake one here). A task
    model takes it (its compiled steps run the encoder static, tests/test_xla.py). A model of
    your own around a packed encoder, or around the tokenizer's string ops, says it cannot:
    the packed tokens' count is known only as the graph runs, and XLA compiles no string op."""
    real = tf.config.list_physical_devices
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: real(kind) + ([gpu] if kind in (None, "GPU") else []))
    encoder = keras_bert.load_checkpoint(tiny_checkpoint).encoder
    inputs = {name: keras.Input((None,), dtype="int32", name=name)
              for name in ("input_word_ids", "input_mask", "input_type_ids")}
    logits = keras.layers.Dense(2)(encoder(inputs)["pooled_output"])
    own = keras.Model(inputs, logits)  # a user's model around the encoder
    preprocessor = keras_bert.BertPreprocessor.from_tokenizer(
        keras_bert.BertTokenizer.from_checkpoint(tiny_checkpoint))
    texts = keras.Input((), dtype="string")
    tokens = keras.Model(texts, preprocessor(texts)["input_word_ids"])  # strings to ids alone
    classifier.compile(learning_rate=1e-3)
    assert classifier.jit_compile is True
    for model in (own, tokens):
        model.compile(loss="mse")
        assert model.jit_compile is False, model.name
    encoder.static_shapes = True  # your own model's encoder, set static: XLA can compile it
    own.compile(loss="mse")
    assert own.jit_compile is True
    monkeypatch.setattr(tf.config, "list_physical_devices", real)
    classifier.compile(learning_rate=1e-3)  # no GPU: Keras's "auto" picks none
    assert classifier.jit_compile is False
    classifier.compile(learning_rate=1e-3, jit_compile=True)
    assert classifier.jit_compile is True and not classifier.encoder.static_shapes
    assert not any(isinstance(layer, packing.TokenLayout) and layer.supports_jit
                   for layer in classifier._flatten_layers())  # fmt: skip


def test_pair_classifier_and_regression(tiny_checkpoint):
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=1,
                                                      num_segments=2, sequence_length=16)  # fmt: skip
    first, second = ["a cat", "a dog", "the mat"], ["a cat", "a fish", "on it"]
    model.compile(learning_rate=1e-2)
    history = model.fit((first, second), [5.0, 1.0, 2.5], epochs=6, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.predict((first, second), verbose=0).shape == (3, 1)
    with pytest.raises(ValueError, match="takes 2 text"):
        model.predict(first, verbose=0)
    with pytest.raises(ValueError, match=r"the parts of x differ in length \(2, 3\)"):
        model.predict((first, second[:2]), verbose=0)
    one_line_error(lambda: model.predict(("a cat", "a dog"), verbose=0),
                   "x holds one text where a list of them belongs: pass a batch, [text] for one "
                   "example, ([first], [second]) for one pair")  # fmt: skip
    # One target or weight where a list belongs: a TypeError from len().
    for y, weight, message in [(5.0, None, "y is one value where a list of them belongs: give "
                                           "one target per example, [y] for one example"),
                               ([5.0], 0.5, "sample_weight is one value where a list of them "
                                            "belongs: give one weight per example, "
                                            "[sample_weight] for one example")]:  # fmt: skip
        one_line_error(lambda: model.fit((first[:1], second[:1]), y, sample_weight=weight,
                                         verbose=0), message)  # fmt: skip
    # Targets of two columns were broadcast by Keras's loss against the one prediction.
    one_line_error(lambda: model.fit((first, second), np.ones((3, 2)), verbose=0),
                   "y has shape (3, 2): give one regression target per example")
    two_columns = tf.data.Dataset.from_tensor_slices(((first, second), np.ones((3, 2)))).batch(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one regression target per example"):
        model.fit(two_columns, verbose=0)
    column = tf.data.Dataset.from_tensor_slices(((first, second), [[5.0], [1.0], [2.5]])).batch(3)
    assert np.isfinite(model.fit(column, verbose=0).history["loss"][0])


def test_bad_model_settings_are_refused_in_one_line(tiny_checkpoint):
    """num_classes 0 built a head of no classes, and repeated label names made an export
    answer one name for two classes."""
    for kwargs, message in [(dict(num_classes=0), "num_classes must be a whole number of at "
                                                  r"least 1 \(1 for regression\), got 0"),
                            (dict(num_classes=2.5), "got 2.5"),
                            (dict(num_classes=True), "got True"),
                            (dict(num_classes=2, labels=["pos", "pos"]), "label names repeat")]:
        with pytest.raises(ValueError, match=message):
            keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, sequence_length=16, **kwargs)
    with pytest.raises(ValueError, match="num_choices must be a whole number of at least 2"):
        keras_bert.BertMultipleChoice.from_checkpoint(tiny_checkpoint, num_choices=1)
    # A string of tags was read character by character (tag ' ' was refused), and a repeated
    # tag made a second class of it, never trained.
    for tags, message in [("O B-PER", "tags must be a list of tag names, got the string "
                                      "'O B-PER'"),
                          (["O", "B-PER", "O"], "tags must each appear once, got 'O' 2 times"),
                          (["O"], "the tag set is 'O' alone: a tagger needs at least one entity tag "
                                  "(B-PER, say) beside it")]:
        one_line_error(lambda: keras_bert.BertTokenClassifier.from_checkpoint(
            tiny_checkpoint, tags, sequence_length=16), message)  # fmt: skip
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, num_classes=np.int64(3),
                                                      sequence_length=16)  # fmt: skip
    assert model.predict(SENTENCES, verbose=0).shape == (4, 3)
    # Keras's functional Model dropped a keyword argument it did not know: a misspelt setting
    # built the model with the default (here 2 classes) without a word.
    for model_class, kwargs in [(keras_bert.BertClassifier, dict(num_clases=3)),
                                (keras_bert.BertTokenClassifier, dict(tags=["O", "B-PER"], dropuot=0.2)),
                                (keras_bert.BertPretrainer, dict(masked_lm_porb=0.2))]:  # fmt: skip
        message = f"{model_class.__name__} got unexpected argument.* {list(kwargs)[-1]}: it takes"
        with pytest.raises(TypeError, match=message):
            model_class.from_checkpoint(tiny_checkpoint, sequence_length=16, **kwargs)
    named = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, sequence_length=16,
                                                      name="mine", trainable=False)  # fmt: skip
    assert (named.name, named.trainable) == ("mine", False)


def test_one_model_fits_without_then_with_sample_weights(classifier):
    """The preprocessing function a model traces once took the element's parts as separate
    arguments; called with two, then three (x, y, sample_weight), TensorFlow's retracing
    raised IndexError. Weights reach the loss: with one example weighted 1 and the others 0,
    the loss is that example's alone over the batch's size (Keras's default reduction)."""
    classifier.compile()
    classifier.fit(SENTENCES, LABELS, verbose=0)
    classifier.fit(SENTENCES, LABELS, sample_weight=[1.0, 0.0, 2.0, 1.0], verbose=0)
    weighted = classifier.evaluate(SENTENCES, LABELS, sample_weight=[0, 0, 1, 0], verbose=0)
    alone = classifier.evaluate(SENTENCES[2:3], LABELS[2:3], verbose=0)
    np.testing.assert_allclose(weighted[0] * len(SENTENCES), alone[0], rtol=1e-5)


def test_bad_labels_and_inputs_are_refused_in_one_line(classifier):
    """Labels in memory are checked before any graph runs, each mistake in one line naming the
    first bad label (a label of 0.5 used to be cast to class 0 and trained on); a Dataset's are
    checked in the graph."""
    classifier.compile()
    for labels, message in [
        ([0, 1, 2, 1], r"y\[2\] is 2: labels must be whole numbers from 0 to 1"),
        ([0, 1, 0.5, 1], r"y\[2\] is 0.5"), ([0, np.nan, 1, 1], r"y\[1\] is nan"),
        ([0, -1, 1, 1], r"y\[1\] is -1"),
        (["a", "b", "a", "b"], r"y\[0\] is 'a', not one of the model's labels"),
        ([0, 1, 1], r"len\(x\) is 4 but len\(y\) is 3"),
        ([[1, 0], [0, 1], [1, 0], [0, 1]], r"y has shape \(4, 2\): give one label per example"),
    ]:
        with pytest.raises(ValueError, match=message):
            classifier.fit(SENTENCES, labels, verbose=0)
    for labels, message in [([0.0, 1.0, 0.5, 1.0], "a label is not a whole number"),
                            ([0, 1, 2, 1], "a label is not below 2")]:  # fmt: skip
        dataset = tf.data.Dataset.from_tensor_slices((SENTENCES, labels)).batch(4)
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            classifier.evaluate(dataset, verbose=0)
    with pytest.raises(ValueError, match=r"len\(x\) is 4 but len\(sample_weight\) is 2"):
        classifier.fit(SENTENCES, LABELS, sample_weight=[1.0, 1.0], verbose=0)
    for weights, message in [([1, np.nan, 1, 1], r"sample_weight\[1\] is nan"),
                             ([1, 1, 1, -2], r"sample_weight\[3\] is -2.0: weights must be "
                                             "finite numbers of at least 0"),
                             (["a", "b", "c", "d"], "sample_weight must be numbers")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            classifier.fit(SENTENCES, LABELS, sample_weight=weights, verbose=0)
    classifier.fit(SENTENCES, LABELS, sample_weight=[0, 1, 2, 0.5], verbose=0)
    with pytest.raises(ValueError, match=r"one text where a list of them belongs.*\[text\]"):
        classifier.predict("a single sentence", verbose=0)
    assert classifier.evaluate(SENTENCES, np.array(LABELS, "float32"), verbose=0)[1] >= 0
    with pytest.raises(ValueError, match="takes 1 text"):
        classifier.predict((SENTENCES, SENTENCES), verbose=0)
    with pytest.raises(ValueError, match="must be strings"):
        classifier.predict([1, 2, 3], verbose=0)
    for empty in ([], np.array([], dtype=object), ()):
        with pytest.raises(ValueError, match="x is empty"):
            classifier.predict(empty, verbose=0)
    classifier.fit(SENTENCES, [[0], [1], [0], [1]], verbose=0)  # a column of ids is fine
    with pytest.raises(ValueError, match="evaluate needs targets: pass y"):
        classifier.evaluate(SENTENCES, verbose=0)
    for size in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=f"batch_size must be a whole number of at least 1, "
                                             f"got {size}"):  # fmt: skip
            classifier.predict(SENTENCES, batch_size=size, verbose=0)
    forever = tf.data.Dataset.from_tensor_slices((SENTENCES, LABELS)).batch(2).repeat()
    with pytest.raises(ValueError, match="repeats forever: pass steps_per_epoch"):
        classifier.fit(forever, verbose=0)


def one_line_error(call, message):
    """The ValueError `call` raises: exactly `message`, one line (no listing of frames or of
    a layer's arguments around it)."""
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


def test_mistakes_found_while_tracing_and_missing_targets_are_one_line(tiny_checkpoint):
    """fit without targets failed deep in Keras ("None values not supported"); a Dataset's
    mistakes found while its preprocessing traced came wrapped in autograph's listing of frames
    (and Keras's of the layer's arguments); predict_on_batch([]) said the texts were floats."""
    model = keras_bert.BertClassifier.from_checkpoint(
        tiny_checkpoint, num_classes=2, num_segments=2, sequence_length=16)
    first, second = ["a cat", "a dog"], ["on a mat", "in a box"]
    model.compile(learning_rate=1e-3, total_steps=4)
    one_line_error(lambda: model.fit((first, second), verbose=0),
                   "fit needs targets: pass y (one per example), or x as a batched "
                   "tf.data.Dataset of (x, y)")  # fmt: skip
    unlabelled = tf.data.Dataset.from_tensor_slices(((first, second),)).batch(2)
    for entry in ("fit", "evaluate"):
        one_line_error(lambda: getattr(model, entry)(unlabelled, verbose=0),
                       f"{entry} needs targets: x is a tf.data.Dataset of inputs alone; make "
                       "its elements (x, y)")  # fmt: skip
        one_line_error(lambda: getattr(model, entry)(unlabelled, [1, 0], verbose=0),
                       "x is a tf.data.Dataset: put the targets in its elements, (x, y), "
                       "rather than passing y")  # fmt: skip
    # A model made from its config alone has no vocabulary: Keras's listing of the tokenizer's
    # arguments wrapped the line.
    from_json = keras.models.model_from_json(model.to_json())
    one_line_error(lambda: from_json.predict((first, second), verbose=0),
                   "this BertTokenizer has no vocabulary: pass one (a list of tokens or the path "
                   "of a vocab.txt) or call set_vocabulary (a model made from its config alone, "
                   "by from_config or model_from_json, has none: load its saved .keras file)")
    flat_pairs = tf.data.Dataset.from_tensor_slices((first, second)).batch(2)
    for entry in ("fit", "evaluate", "predict"):
        one_line_error(lambda: getattr(model, entry)(flat_pairs, verbose=0),
                       "this model takes 2 text(s) per example, got 1; pass a pair (first "
                       "texts, second texts), each a list of strings (a tf.data.Dataset's "
                       "element (first, second) reads as (x, y): make it ((first, second), y), "
                       "or ((first, second),) to predict)")  # fmt: skip
    # validation_data without targets: Keras's "None values not supported" after a whole epoch.
    one_line_error(lambda: model.fit((first, second), [1, 0], validation_data=((first, second),),
                                     verbose=0),
                   "validation_data needs targets: make it (x, y) or (x, y, sample_weight), or "
                   "a batched tf.data.Dataset of (x, y)")  # fmt: skip
    one_line_error(lambda: model.fit((first, second), [1, 0], validation_data=unlabelled,
                                     verbose=0),
                   "validation_data needs targets: it is a tf.data.Dataset of inputs alone; "
                   "make its elements (x, y)")  # fmt: skip
    # A mistake in validation_data's targets named as its own, not as one in fit's y.
    one_line_error(lambda: model.fit((first, second), [1, 0],
                                     validation_data=((first, second), [1, 5]), verbose=0),
                   "validation_data: y[1] is 5: labels must be whole numbers from 0 to 1")
    # Called directly on texts, Keras said the model "expects 3 named input(s)".
    one_line_error(lambda: model((first, second)),
                   "BertClassifier called directly takes token ids, "
                   "model(model.preprocessor(texts)); predict(texts) takes the texts themselves")
    assert model(model.preprocessor((first, second))).shape == (2, 2)
    named = tf.data.Dataset.from_tensor_slices(((first, second), ["yes", "no"])).batch(2)
    one_line_error(lambda: model.fit(named, verbose=0),
                   "labels given as strings need a model made with their names, "
                   "labels=[...]; or give class ids")  # fmt: skip
    labelled = tf.data.Dataset.from_tensor_slices(((first, second), [1, 0])).batch(2)
    assert np.isfinite(model.fit(labelled, verbose=0).history["loss"][0])
    one_line_error(lambda: model.predict_on_batch(([], [])),
                   "x is empty: pass at least one example")
    # The preprocessor itself takes an empty batch (it said the texts were floats).
    empty = model.preprocessor(([], []))
    assert {name: int(t.shape[0]) for name, t in empty.items()} == dict.fromkeys(
        ["input_word_ids", "input_mask", "input_type_ids"], 0)
    with pytest.raises(ValueError, match=r"max_query_length \(64\) leaves no room for the "
                                         r"passage in windows of sequence_length=64 tokens: "
                                         r"pass max_query_length=60 or less"):  # fmt: skip
        keras_bert.BertQuestionAnswerer.from_checkpoint(tiny_checkpoint, sequence_length=64)


def test_an_untrained_head_is_not_exported(tiny_checkpoint, tmp_path):
    """A new head's weights are random: an export of it served answers that meant nothing, with
    nothing to say so. It is refused until training (or weights set) changes the head, also
    after a save and load and in a copy of another precision."""
    model = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint, sequence_length=16)
    refusal = ("this BertClassifier's head has never been trained (its weights are those it was "
               "made with), so its answers would mean nothing: fit it first, or load a trained "
               "one; allow_untrained_head=True exports it anyway")  # fmt: skip
    one_line_error(lambda: model.export(str(tmp_path / "m")), refusal)
    model.save(str(tmp_path / "untrained.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "untrained.keras"))
    one_line_error(lambda: reloaded.export(str(tmp_path / "m")), refusal)
    one_line_error(lambda: model.with_precision("bfloat16").export(str(tmp_path / "m")),
                   refusal)  # fmt: skip
    assert not os.path.exists(tmp_path / "m")
    model.compile(learning_rate=1e-3, total_steps=1)
    model.train_on_batch(["a cat", "a dog"], [1, 0])
    assert not model.head_is_untrained()
    assert "untrained_head" not in model.get_config()
    model.save(str(tmp_path / "trained.keras"))
    assert not keras.saving.load_model(str(tmp_path / "trained.keras")).head_is_untrained()
    reloaded.set_weights(model.get_weights())  # weights set count as trained ones
    assert not reloaded.head_is_untrained()
    # Every task model's new head is seen as such; the encoder's weights are not the head's.
    for model in [
        keras_bert.BertMultipleChoice.from_checkpoint(tiny_checkpoint, 2, sequence_length=16),
        keras_bert.BertQuestionAnswerer.from_checkpoint(tiny_checkpoint, sequence_length=64,
                                                        max_query_length=16),
        keras_bert.BertTokenClassifier.from_checkpoint(tiny_checkpoint, tags=["O", "B-PER"],
                                                       sequence_length=16),
    ]:  # fmt: skip
        assert model.head_is_untrained()
        model.encoder.pooler.dense.bias.assign(model.encoder.pooler.dense.bias + 1.0)
        assert model.head_is_untrained()
        model.head.weights[-1].assign(model.head.weights[-1] + 1.0)
        assert not model.head_is_untrained()


def test_targets_laid_out_wrongly_are_one_line(tiny_checkpoint):
    """A token classifier's tags given as one string were read character by character, and a
    Dataset's dense tags failed with an AttributeError; a question answerer's Dataset with
    only the starts as y failed in a GatherV2 shape error."""
    tagger = keras_bert.BertTokenClassifier.from_checkpoint(
        tiny_checkpoint, ["O", "B-PER", "I-PER"], sequence_length=16)
    tagger.compile(learning_rate=1e-3, total_steps=4)
    one_line_error(lambda: tagger.fit(["John runs"], ["B-PER O"], verbose=0),
                   "example 0: give its tags as a list, one per word, not one string "
                   "('B-PER O')")  # fmt: skip
    dense = tf.data.Dataset.from_tensor_slices((["John runs", "Mary sat"], [[1, 0], [1, 0]]))
    one_line_error(lambda: tagger.fit(dense.batch(2), verbose=0),
                   "a tf.data.Dataset's tags must be ragged, (batch, (words)), one per word "
                   "(tf.ragged.constant), not a tensor of shape (None, 2)")  # fmt: skip
    answerer = keras_bert.BertQuestionAnswerer.from_checkpoint(
        tiny_checkpoint, sequence_length=32, max_query_length=8, doc_stride=8)
    answerer.compile(learning_rate=1e-3, total_steps=4)
    x = (["who runs?"], ["John runs."])
    starts_only = tf.data.Dataset.from_tensor_slices((x, [0])).batch(1)
    one_line_error(lambda: answerer.fit(starts_only, verbose=0),
                   "y must be (answer_starts, answer_ends), or rows of (start, end); got y of "
                   "shape (None,)")  # fmt: skip
    one_line_error(lambda: answerer.fit(x, (0, 4), verbose=0),
                   "y must be (answer_starts, answer_ends), each a list with one entry a "
                   "question: ([start], [end]) for one question")  # fmt: skip
    # Several answers a question (SQuAD's dev set has them) failed mid-epoch in tf.data.
    several = ([[0, 0]], [[4, 4]])
    one_line_error(lambda: answerer.fit(x, several, verbose=0),
                   "y must be (answer_starts, answer_ends), one start and one end a question, "
                   "got shapes (1, 2) and (1, 2); where a question has several answers, train "
                   "on one of them")  # fmt: skip
    one_line_error(lambda: answerer.fit(tf.data.Dataset.from_tensor_slices((x, several)).batch(1),
                                        verbose=0),
                   "y must be (answer_starts, answer_ends), one start and one end a question, "
                   "got shapes (None, 2) and (None, 2); where a question has several answers, "
                   "train on one of them")  # fmt: skip
    rows = tf.data.Dataset.from_tensor_slices((x, [[0, 4]])).batch(1)  # as in memory
    assert np.isfinite(answerer.fit(rows, verbose=0).history["loss"][0])


# Plain Keras training in a process with oneDNN's frozen-weights setting: what fit refuses.
_STALE_TRAINING = """
import numpy as np, keras
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).standard_normal((64, 256)).astype("float32")
y = (x[:, 0] > 0).astype("int32")
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="gelu"),
                          keras.layers.Dense(2)])
model.compile(keras.optimizers.SGD(0.1),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True))
print(model.fit(x, y, epochs=4, batch_size=64, verbose=0).history["loss"])
"""


def test_training_is_refused_where_onednn_assumes_frozen_weights(classifier, monkeypatch):
    # Why: with the setting, the products keep their first weights and plain Keras training
    # stalls (measured: loss 0.798 -> 0.795 in 4 steps, against 0.798 -> 0.273 without it;
    # only the biases, which the products do not cache, still move). TensorFlow turns oneDNN on
    # by itself only on CPUs with AVX512 VNNI, BF16 or AMX; on others (AVX2) the setting does
    # nothing unless oneDNN is asked for, as it is here, so the stall shows on every x86 CPU.
    def losses(setting):
        env = {**os.environ, "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": setting, "CUDA_VISIBLE_DEVICES": "",
               "TF_ENABLE_ONEDNN_OPTS": "1"}  # fmt: skip
        done = subprocess.run([sys.executable, "-c", _STALE_TRAINING], env=env, text=True,
                              capture_output=True, check=True)  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])

    trained, stalled = losses("0"), losses("1")
    assert trained[0] - trained[-1] > 0.4
    assert stalled[0] - stalled[-1] < 0.1 * (trained[0] - trained[-1])
    for setting in ("1", "true", "TRUE"):
        monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", setting)
        with pytest.raises(ValueError, match="FROZEN_WEIGHTS=.* unset it to train"):
            classifier.fit(SENTENCES, LABELS, verbose=0)
    monkeypatch.setenv("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "0")
    classifier.fit(SENTENCES, LABELS, verbose=0)


def test_a_save_that_fails_part_way_leaves_the_old_file(classifier, tmp_path, monkeypatch):
    import errno

    from keras.src.saving import saving_lib

    path = tmp_path / "model.keras"
    classifier.save(str(path))
    good = path.read_bytes()
    write = saving_lib.save_model

    def full_disk(model, filepath, *args, **kwargs):
        write(model, filepath, *args, **kwargs)  # the whole file, then the disk is full
        with open(filepath, "r+b") as f:
            f.truncate(100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(saving_lib, "save_model", full_disk)
    with pytest.raises(OSError, match="No space left"):
        classifier.save(str(path))
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["model.keras"]  # nor a temporary file beside it
    monkeypatch.undo()
    with pytest.raises(FileExistsError, match=r"model.keras exists; pass overwrite=True"):
        classifier.save(str(path), overwrite=False)


def test_saved_file_stands_alone_without_optimizer_state(classifier, tmp_path):
    classifier.compile(learning_rate=2e-2)
    classifier.fit(SENTENCES * 8, LABELS * 8, batch_size=8, epochs=8, verbose=0)
    path = str(tmp_path / "alone" / "model.keras")
    os.makedirs(os.path.dirname(path))
    classifier.save(path)
    assert os.listdir(tmp_path / "alone") == ["model.keras"]
    with zipfile.ZipFile(path) as archive:
        weights = archive.getinfo("model.weights.h5").file_size
        assert any(name.endswith("vocab.txt") for name in archive.namelist())
    assert weights < 1.1 * weights_bytes(classifier)  # AdamW's two slots per weight are absent
    classifier.save(str(tmp_path / "with.keras"), include_optimizer=True)
    with zipfile.ZipFile(str(tmp_path / "with.keras")) as archive:
        assert archive.getinfo("model.weights.h5").file_size > 2.5 * weights_bytes(classifier)
    script = (  # in a process that never built the model, away from the repository
        "import json, os, sys, numpy as np, keras_bert, keras\n"
        "os.chdir(os.path.dirname(sys.argv[1]))\n"
        "model = keras.saving.load_model(sys.argv[1])\n"
        "print(json.dumps(model.predict(json.loads(sys.argv[2]), verbose=0).tolist()))\n"
    )
    result = run_binary(["-c", script, path, json.dumps(SENTENCES)], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    reloaded = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(reloaded, classifier.predict(SENTENCES, verbose=0), atol=1e-5)


def test_a_file_saved_with_its_optimizer_trains_on_where_it_stopped(classifier, tmp_path):
    """Keras's load compiles no model whose compile is its own: such a file loaded uncompiled,
    with a warning, and its fit failed ("object has no attribute 'optimizer'")."""
    classifier.compile(learning_rate=1e-3, total_steps=4)
    classifier.fit(SENTENCES, LABELS, batch_size=2, verbose=0)  # steps 1 and 2 of 4
    path = str(tmp_path / "with.keras")
    classifier.save(path, include_optimizer=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras's "compile() was not called" among them
        loaded = keras.saving.load_model(path)
    assert int(loaded.optimizer.iterations) == 2
    for mine, saved in zip(loaded.optimizer.variables, classifier.optimizer.variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), saved.numpy())
    assert float(loaded.optimizer.learning_rate) == float(classifier.optimizer.learning_rate)
    history = loaded.fit(SENTENCES, LABELS, batch_size=2, verbose=0).history  # steps 3 and 4
    assert set(history) == {"loss", "accuracy"}
    with pytest.raises(ValueError, match="training step 5 would run past .* at step 4"):
        loaded.train_on_batch(SENTENCES, LABELS)
    # compile()'s recipe comes back as it was: the next fit counts its own steps.
    classifier.compile(learning_rate=3e-4, warmup_proportion=0.5)
    classifier.save(path, include_optimizer=True)
    loaded = keras.saving.load_model(path)
    loaded.fit(SENTENCES, LABELS, batch_size=2, epochs=2, verbose=0)
    schedule = loaded.optimizer._learning_rate
    assert (schedule.learning_rate, schedule.total_steps, schedule.warmup_steps) == (3e-4, 4, 2)
    # Files saved before the recipe rode on the optimizer kept it beside Keras's settings.
    config = {**classifier.get_compile_config(), "optimizer": "adam", "optimizer_built": False,
              "recipe": {"learning_rate": 2e-4, "warmup_proportion": 0.25,
                         "weight_decay": 0.0, "clipnorm": 1.0}}  # fmt: skip
    loaded.compile_from_config(config)
    loaded.fit(SENTENCES, LABELS, batch_size=2, epochs=2, verbose=0)
    schedule = loaded.optimizer._learning_rate
    assert (schedule.learning_rate, schedule.total_steps, schedule.warmup_steps) == (2e-4, 4, 1)


def test_deepcopy_is_a_whole_model_and_clone_model_copies_a_compiled_one(classifier):
    """README: copy.deepcopy copies everything; keras.models.clone_model makes a plain Keras
    model on token ids, as Keras does for every subclass of its functional model, compiled
    as the model was. A compiled model's clone failed there ("compile() got an unexpected
    keyword argument 'optimizer_built'"), and a deep copy of one never trained warned that its
    optimizer's variables were skipped."""
    classifier.compile(learning_rate=1e-3, warmup_proportion=0.5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*optimizer")
        fresh = copy.deepcopy(classifier)
    assert fresh.compiled and fresh.optimizer.recipe == classifier.optimizer.recipe
    classifier.fit(SENTENCES, LABELS, batch_size=2, verbose=0)
    before = classifier.predict(SENTENCES, verbose=0)
    copied = copy.deepcopy(classifier)
    assert type(copied) is keras_bert.BertClassifier and copied.labels == ["neg", "pos"]
    np.testing.assert_array_equal(copied.predict(SENTENCES, verbose=0), before)
    assert int(copied.optimizer.iterations) == int(classifier.optimizer.iterations) == 2
    copied.fit(SENTENCES, LABELS, batch_size=2, epochs=3, verbose=0)
    schedule = copied.optimizer._learning_rate  # the recipe's, over the copy's own fit
    assert (schedule.learning_rate, schedule.total_steps, schedule.warmup_steps) == (1e-3, 6, 3)
    assert not np.allclose(copied.predict(SENTENCES, verbose=0), before)
    np.testing.assert_array_equal(classifier.predict(SENTENCES, verbose=0), before)

    clone = keras.models.clone_model(classifier)
    assert type(clone) is not keras_bert.BertClassifier and not hasattr(clone, "preprocessor")
    assert clone.compiled and clone.get_compile_config() == classifier.get_compile_config()
    assert clone.optimizer.built  # built by Keras, as it builds a loaded model's
    inputs = classifier.preprocessor(SENTENCES)
    assert not np.allclose(clone.predict(inputs, verbose=0), before)  # fresh weights
    loss = clone.fit(inputs, np.array(LABELS), verbose=0).history["loss"][0]
    assert np.isfinite(loss)
    np.testing.assert_array_equal(classifier.predict(SENTENCES, verbose=0), before)


def test_export_serves_strings_with_inference_weights_only(classifier, tmp_path):
    classifier.compile(learning_rate=3e-3)
    classifier.fit(SENTENCES * 4, LABELS * 4, batch_size=8, epochs=1, verbose=0)
    path = classifier.export(str(tmp_path / "sst2"))
    assert path == str(tmp_path / "sst2" / "1")
    # The weights are variables, once, and no optimizer state; the graph holds none of them
    # (TF Serving keeps several copies of a graph's constants: README, Export and TF Serving).
    variables = os.path.join(path, "variables")
    size = sum(os.path.getsize(os.path.join(variables, n)) for n in os.listdir(variables))
    assert 0.9 * weights_bytes(classifier) < size < 1.1 * weights_bytes(classifier)
    assert graph_float_bytes(path) < 0.05 * weights_bytes(classifier)
    body = (
        "out = f(sentence=tf.constant(json.loads(sys.stdin.read())))\n"
        "empty = f(sentence=tf.constant([], tf.string))\n"
        "print(json.dumps({'label': [x.decode() for x in out['label'].numpy()],"
        " 'probabilities': out['probabilities'].numpy().tolist(),"
        " 'empty': {k: list(v.shape) for k, v in empty.items()}}))\n"
    )
    served = served_in_clean_process(path, body, json.dumps(SENTENCES))
    assert served["empty"] == {"label": [0], "label_id": [0], "probabilities": [0, 2]}
    expected = tf.nn.softmax(classifier.predict(SENTENCES, verbose=0)).numpy()
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    assert served["label"] == [["neg", "pos"][i] for i in expected.argmax(-1)]
    # The export computes its blocks in 2 column parts, whose weights it stores instead of the
    # whole ones; the same numbers as one part. The model itself stays whole and trainable.
    whole = classifier.export(str(tmp_path / "sst2"), column_parts=1)
    shapes = {name: {tuple(v.shape) for v in tf.saved_model.load(p).model_weights}
              for name, p in (("parts", path), ("whole", whole))}  # fmt: skip
    assert (12, 19) in shapes["parts"] and (12, 38) not in shapes["parts"]
    assert (12, 38) in shapes["whole"] and (12, 19) not in shapes["whole"]
    texts = tf.constant([f"{s} {' '.join(['and'] * i)}" for i in range(5) for s in SENTENCES])
    served = [tf.saved_model.load(p).signatures["serving_default"](sentence=texts)
              ["probabilities"] for p in (path, whole)]  # fmt: skip
    np.testing.assert_allclose(served[0], served[1], atol=1e-6)
    assert all(getattr(b, "_column_parts", None) is None
               for b in classifier.encoder.transformer_layers)  # fmt: skip
    classifier.fit(SENTENCES, LABELS, batch_size=8, epochs=1, verbose=0)


def test_multiple_choice_learns_and_reloads(tiny_checkpoint, tmp_path):
    model = keras_bert.BertMultipleChoice.from_checkpoint(tiny_checkpoint, num_choices=3,
                                                          sequence_length=16)  # fmt: skip
    contexts = ["the cat sat", "a dog ran", "hello world"] * 4
    endings = [["on the mat", "a a a", "the the"], ["a a a", "far away", "the the"],
               ["the the", "a a a", "again !"]] * 4  # fmt: skip
    labels = [0, 1, 2] * 4
    model.compile(learning_rate=2e-2)
    with pytest.raises(ValueError, match=r"y\[2\] is 3: choices must be whole numbers from 0 to 2"):
        model.fit((contexts, endings), [0, 1, 3] * 4, verbose=0)
    with pytest.raises(ValueError, match="one text where a list of them belongs"):
        model.predict((contexts[0], endings[0]), verbose=0)
    flat = tf.data.Dataset.from_tensor_slices((contexts, endings, labels)).batch(4)
    one_line_error(lambda: model.fit(flat, verbose=0),
                   "expected (contexts, endings): a list of strings and a list of 3-string lists "
                   "(a tf.data.Dataset's element (contexts, endings, y) reads as (x, y, "
                   "sample_weight): make it ((contexts, endings), y))")  # fmt: skip
    model.fit((contexts * 10, endings * 10), labels * 10, batch_size=4, verbose=0)  # one epoch
    assert model.predict((contexts, endings), verbose=0).argmax(-1).tolist() == labels
    model.save(str(tmp_path / "swag.keras"))
    reloaded = keras.saving.load_model(str(tmp_path / "swag.keras"))
    np.testing.assert_allclose(reloaded.predict((contexts[:3], endings[:3]), verbose=0),
                               model.predict((contexts[:3], endings[:3]), verbose=0), atol=1e-5)


def test_export_computes_in_the_precision_asked_not_the_one_it_trained_in(two_block_checkpoint,
                                                                           tmp_path):  # fmt: skip
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:  # two blocks: one rounds too little for the precisions' outputs to differ clearly
        model = keras_bert.BertClassifier.from_checkpoint(two_block_checkpoint, sequence_length=32)
    finally:
        keras.config.set_dtype_policy("float32")
    kernel, bias = model.head.dense.get_weights()  # logits of a few units, not near 0
    model.head.dense.set_weights([np.random.default_rng(0).normal(size=kernel.shape), bias])
    as_float32 = model.with_precision("float32")
    assert as_float32.encoder.policy.name == "float32" and model.with_precision("bfloat16") is model
    assert as_float32.preprocessor is model.preprocessor
    # For inference the dense weights are stored in bfloat16: the numbers mixed precision
    # computes (it casts them on every call), to the bit.
    stored = model.with_precision("bfloat16", for_inference=True)
    assert stored.encoder.pooler.dense.kernel.dtype == "bfloat16"
    assert stored.encoder.transformer_layers[0].intermediate.kernel.dtype == "bfloat16"
    assert stored.encoder.embeddings.word_embeddings.embeddings.dtype == "float32"
    assert stored.head.dense.kernel.dtype == "float32"  # logits are computed in float32
    np.testing.assert_array_equal(stored.predict(SENTENCES, verbose=0),
                                  model.predict(SENTENCES, verbose=0))  # fmt: skip
    expected = {"bfloat16": tf.nn.softmax(model.predict(SENTENCES, verbose=0)).numpy(),
                "float32": tf.nn.softmax(as_float32.predict(SENTENCES, verbose=0)).numpy()}
    gap = np.abs(expected["bfloat16"] - expected["float32"]).max()
    assert gap > 1e-4  # the two precisions give distinguishable numbers on these sentences
    body = "print(json.dumps(f(sentence=tf.constant(json.loads(sys.stdin.read())))" \
           "['probabilities'].numpy().tolist()))\n"  # fmt: skip
    for precision in ("float32", "bfloat16"):
        path = model.export(str(tmp_path / "m"), precision=precision)
        served = np.array(served_in_clean_process(path, body, json.dumps(SENTENCES)))
        np.testing.assert_allclose(served, expected[precision], atol=gap / 10)
        assert graph_float_bytes(path) < 0.05 * weights_bytes(model)  # weights in variables
    with pytest.raises(ValueError, match="unknown precision 'int8'"):
        model.export(str(tmp_path / "m"), precision="int8")
