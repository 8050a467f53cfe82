"""Every task model trains, evaluates and predicts in steps compiled with XLA
(`compile(jit_compile=True)`): the encoder then runs on static shapes (packing.py), and with
dropout off an XLA step's loss and outputs equal the plain (packed) step's on the same batches.
XLA on the CPU compiles the step a TPU or GPU would get."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, TINY, random_inputs

import keras_bert
from keras_bert.models import static_steps

PASSAGE = "The Normans gave their name to Normandy, a region in France, in the 10th century."
QUESTIONS = ["Who gave their name to Normandy?", "Where is Normandy?", "When?"]
ANSWERS = ["The Normans", "France", "the 10th century"]
TEXTS = ["a fine film", "a dull film that goes on and on and on", "what a film", "bad",
         "good fun for all the family", "it is long", "not my kind of thing", "yes"]  # fmt: skip


def _no_dropout(model):
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    return model


def _pretraining_pairs():
    with open(os.path.join(DATA, "pretrain", "bert_sample_text.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    return (lines[:8], lines[8:16]), [0, 1] * 4


def _task(kind, checkpoint):
    """A task model on `checkpoint` and a little data for it: (model, x, y)."""
    if kind == "single":
        model = keras_bert.BertClassifier.from_checkpoint(checkpoint, 3, sequence_length=16)
        return model, TEXTS, [0, 1, 2, 0, 1, 2, 0, 1]
    if kind == "pair":
        model = keras_bert.BertClassifier.from_checkpoint(checkpoint, 1, sequence_length=24,
                                                          num_segments=2)  # fmt: skip
        return model, (TEXTS, TEXTS[::-1]), [0.5, 1.0, 2.0, 0.0, 1.5, 3.0, 4.0, 2.5]
    if kind == "choice":
        model = keras_bert.BertMultipleChoice.from_checkpoint(checkpoint, 2, sequence_length=24)
        endings = [[a, b] for a, b in zip(TEXTS, TEXTS[1:] + TEXTS[:1])]
        return model, (TEXTS, endings), [0, 1, 1, 0, 1, 0, 0, 1]
    if kind == "spans":
        model = keras_bert.BertQuestionAnswerer.from_checkpoint(
            checkpoint, sequence_length=32, max_query_length=12, doc_stride=8)
        starts = [PASSAGE.index(a) for a in ANSWERS]
        ends = [s + len(a) for s, a in zip(starts, ANSWERS)]
        return model, (QUESTIONS * 2, [PASSAGE] * 6), (starts * 2, ends * 2)
    if kind == "tags":
        model = keras_bert.BertTokenClassifier.from_checkpoint(
            checkpoint, ["O", "B-PER", "B-LOC"], sequence_length=16)
        sentences = ["John lives in Paris", "Mary sat", "the cat sat on the mat in Rome", "Bob"]
        tags = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O"], ["O"] * 7 + ["B-LOC"], ["B-PER"]]
        return model, sentences * 2, tags * 2
    model = keras_bert.BertPretrainer.from_checkpoint(checkpoint, sequence_length=32,
                                                      max_predictions=5)  # fmt: skip
    # The masking is drawn at random in tf.data: both runs take the same draw, made once.
    global _MASKED
    if _MASKED is None:
        _MASKED = next(iter(model.make_dataset(*_pretraining_pairs(), batch_size=8)))
    return model, tf.data.Dataset.from_tensors(_MASKED), None


_MASKED = None


KINDS = ["single", "pair", "choice", "spans", "tags", "pretrain"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_xla_step_learns_what_the_plain_step_learns(tiny_checkpoint, kind):
    runs = {}
    for jit in (False, True):
        keras.utils.set_random_seed(5)
        model, x, y = _task(kind, tiny_checkpoint)
        _no_dropout(model).compile(learning_rate=1e-3, warmup_proportion=0.0, jit_compile=jit)
        assert model.jit_compile is jit and model.compiles_with_xla() is jit
        # One batch of 8 (one shape to compile a step for, to keep the test short).
        history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        evaluated = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
        predicted = model.predict(x, batch_size=8, verbose=0)
        if not model.decodes_predictions and y is not None:  # the same one batch, in one call
            tf.nest.map_structure(np.testing.assert_array_equal, model.predict_on_batch(x),
                                  predicted)  # fmt: skip
        runs[jit] = history.history["loss"], evaluated, predicted
        assert not model.encoder.static_shapes  # the encoder is packed outside XLA steps
    (plain_loss, plain_eval, plain_out), (xla_loss, xla_eval, xla_out) = runs[False], runs[True]
    assert plain_loss[2] != plain_loss[0]  # the steps changed the model
    np.testing.assert_allclose(xla_loss, plain_loss, rtol=1e-4)
    # Every entry: the total loss, each output's own (the question answerer's windows are a
    # dataset of unknown cardinality: static_steps._after) and the metrics.
    assert sorted(xla_eval) == sorted(plain_eval)
    for name in plain_eval:
        np.testing.assert_allclose(xla_eval[name], plain_eval[name], rtol=1e-4, atol=1e-6,
                                   err_msg=name)  # fmt: skip
    for a, b in zip(tf.nest.flatten(xla_out), tf.nest.flatten(plain_out)):
        if np.asarray(a).dtype.kind == "f":
            np.testing.assert_allclose(a, b, atol=1e-4)
        else:
            np.testing.assert_array_equal(a, b)


def test_static_and_packed_encoders_agree_at_real_positions():
    encoder = keras_bert.BertEncoder(**TINY)
    x = random_inputs(3, 9, lengths=[9, 4, 1])
    packed = encoder(x)
    encoder.static_shapes = True
    static = encoder(x)
    assert all(layer.static_shapes for layer in encoder._flatten_layers()
               if hasattr(type(layer), "static_shapes"))  # fmt: skip
    for name in ("sequence_output", "pooled_output", "pooled_output_only"):
        np.testing.assert_allclose(static[name], packed[name], atol=2e-6, err_msg=name)
    padded = np.asarray(static["sequence_output"])[x["input_mask"] == 0]
    assert padded.size and not padded.any()  # padded positions are 0 in both forms


def test_batches_for_xla_are_padded_to_a_few_lengths(tiny_checkpoint):
    assert [int(static_steps.static_length(n, 128)) for n in (1, 32, 33, 100, 128)] == [32, 32, 64, 128,
                                                                                   128]  # fmt: skip
    assert [int(static_steps.static_length(n, 20)) for n in (3, 8, 9, 17)] == [8, 8, 16, 20]
    model = keras_bert.BertTokenClassifier.from_checkpoint(tiny_checkpoint, ["O", "B-PER"],
                                                           sequence_length=32)  # fmt: skip
    model.compile(jit_compile=True)
    dataset = model.make_dataset(["John runs", "Mary sat down"], [["B-PER", "O"], ["B-PER", "O", "O"]])
    x, y = next(iter(dataset))
    assert x["input_word_ids"].shape == (2, 8) and y.shape == (2, 8)
    assert y.numpy()[0, 4:].tolist() == [keras_bert.models.tagging.IGNORE] * 4
    pretrainer = keras_bert.BertPretrainer.from_checkpoint(tiny_checkpoint, sequence_length=32,
                                                           max_predictions=7)  # fmt: skip
    pretrainer.compile(jit_compile=True)
    x, y, weights = next(iter(pretrainer.make_dataset(*_pretraining_pairs(), batch_size=8)))
    assert x["masked_lm_positions"].shape == (8, 7) and y["masked_lm"].shape == (8, 7)
    assert weights["masked_lm"].shape == (8, 7)


def test_the_whole_training_step_compiles_as_one_xla_cluster(tiny_checkpoint):
    """The forward pass, the gradients and the optimizer's update (the library's AdamW, the
    schedule, the clipping) in one XLA computation: what a TPU runs as a step."""
    model, x, y = _task("single", tiny_checkpoint)
    model.compile(jit_compile=True, total_steps=10, warmup_proportion=0.0)
    batch = next(iter(model.make_dataset(x, y, batch_size=4)))
    step = tf.function(model.train_step, jit_compile=True)
    hlo = step.experimental_get_compiler_ir(batch)(stage="hlo")
    before = [w.numpy() for w in model.trainable_weights]
    step(batch)
    assert model.optimizer.iterations.numpy() == 1
    changed = [not np.array_equal(b, w.numpy()) for b, w in zip(before, model.trainable_weights)]
    assert all(changed)
    # One computation, whose parameters are the batch and the variables (weights, optimizer
    # slots, step counter, dropout seeds): nothing of the step runs outside it.
    assert hlo.count("ENTRY") == 1
    entry = next(line for line in hlo.splitlines() if line.startswith("ENTRY"))
    assert entry.count(": s32[4,16]") == 3 and entry.count("arg") > 3 * len(changed)


def test_a_binary_trains_with_xla_in_groups_of_steps(tmp_path, tiny_checkpoint):
    """--jit_compile and --steps_per_execution: the steps run compiled with XLA, two a call."""
    from test_distribute import glue_command, run

    result = run(glue_command(tiny_checkpoint, tmp_path, "--jit_compile", "--steps_per_execution=2",
                              "--num_train_epochs=1", "--max_train_examples=64",
                              "--save_checkpoints_steps=2"))  # fmt: skip
    assert "training steps compiled with XLA, on static shapes, 2 per execution" in result.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics[0]["epoch"] == 1 and 0 <= metrics[0]["dev"]["accuracy"] <= 1


def test_backups_count_the_steps_of_each_execution(monkeypatch):
    """With --steps_per_execution=k Keras reports every kth step: the backup every 4 steps
    still comes every 4, and each epoch still ends backed up."""
    from tasks import backups

    backup = backups.RunBackup("unused", save_freq=4)
    saved = []
    monkeypatch.setattr(backup, "save", lambda: (saved.append(backup._batches),
                                                 setattr(backup, "_batches", 0)))  # fmt: skip
    for epoch in range(2):
        backup.on_epoch_begin(epoch)
        for last in (1, 3, 5, 6):  # executions of 2 steps, and the epoch's last, of 1
            backup.on_train_batch_end(last)
        backup.on_epoch_end(epoch)
    assert saved == [4, 3, 4, 3]



def test_an_epochs_last_step_is_backed_up_after_the_epochs_own_callbacks(monkeypatch):
    """A backup due at an epoch's last step is written at the epoch's end (the backup is the
    last callback): the callbacks that write the epoch's metrics come first, so a kill between
    them never leaves a backup that skips an epoch whose metrics were not written."""
    from tasks import backups

    backup = backups.RunBackup("unused", save_freq=3)
    backup.set_params({"steps": 6})
    saved = []
    monkeypatch.setattr(backup, "save", lambda: (saved.append((moment, backup._batches)),
                                                 setattr(backup, "_batches", 0)))  # fmt: skip
    backup.on_epoch_begin(0)
    for moment in ("step 3", "step 6"):
        backup.on_train_batch_end(int(moment[-1]) - 1)
    moment = "epoch end"
    backup.on_epoch_end(0)
    assert saved == [("step 3", 3), ("epoch end", 3)]
