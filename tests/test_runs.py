"""A run's folder: settings that refuse stale results, one writer at a time, files readable by
all, backups that survive a kill while they are written, and resumption to the batch."""

import json
import os
import re
import stat
import subprocess
import sys

import pytest
from absl import app
from conftest import DATA, ROOT, run_binary

from tasks import backups, runs

SETTINGS = {"task": "sst-2", "learning_rate": 5e-05, "max_seq_length": 32}


def test_written_files_are_readable_by_all(tmp_path):
    old = os.umask(0o022)
    try:
        runs.write_atomically(str(tmp_path / "a.txt"), "text")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644
    assert os.listdir(tmp_path) == ["a.txt"]


def test_a_folder_holds_one_run_and_says_which(tmp_path):
    folder = str(tmp_path / "run")
    assert runs.claim(folder, SETTINGS) == "new"
    assert json.loads((tmp_path / "run" / "settings.json").read_text()) == SETTINGS
    with pytest.raises(app.UsageError, match="another run is writing to --output_dir"):
        runs.claim(folder, SETTINGS)  # a second writer, even in this process
    runs.release(folder)
    assert runs.claim(folder, SETTINGS) == "resume"
    runs.release(folder)
    runs.write_atomically(str(tmp_path / "run" / "model.keras"), "finished")
    assert runs.claim(folder, SETTINGS) == "finished"
    runs.release(folder)
    other = {**SETTINGS, "learning_rate": 1e-3}
    with pytest.raises(app.UsageError, match=r"other settings \(--learning_rate=5e-05 there, "
                                             r"0.001 now\): pass --overwrite_output_dir"):
        runs.claim(folder, other)
    runs.release(folder)
    assert runs.claim(folder, other, overwrite=True) == "new"
    assert sorted(os.listdir(folder)) == [".lock", "run_files.json", "settings.json"]
    runs.release(folder)


def test_a_folder_is_a_runs_only_if_runs_wrote_everything_in_it(tmp_path):
    """A folder holding files no run wrote is refused, --overwrite_output_dir or not, and
    nothing of it is touched; overwriting a run removes everything its runs wrote, predictions
    written after the run too, and what a killed writer left; nothing else."""
    mine = tmp_path / "mine"
    (mine / "logs").mkdir(parents=True)
    (mine / "backup").mkdir()
    (mine / "notes.txt").write_text("my own")
    for overwrite in (False, True):
        with pytest.raises(app.UsageError, match=rf"^--output_dir={mine} holds backup, logs, "
                                                 r"notes.txt, which no run wrote; pass an empty"):
            runs.claim(str(mine), SETTINGS, overwrite=overwrite)
        runs.release(str(mine))
    assert sorted(os.listdir(mine)) == [".lock", "backup", "logs", "notes.txt"]
    run = str(tmp_path / "run")
    assert runs.claim(run, SETTINGS) == "new"
    runs.write_atomically(os.path.join(run, "model.keras"), "finished")
    runs.release(run)
    runs.write_atomically(os.path.join(run, "test_results.tsv"), "predictions")  # after release
    (tmp_path / "run" / "tmpab12_x.tmp").write_text("half")  # write_atomically's, killed
    other = {**SETTINGS, "learning_rate": 1e-3}
    assert runs.claim(run, other, overwrite=True) == "new"
    assert sorted(os.listdir(run)) == [".lock", "run_files.json", "settings.json"]
    runs.release(run)
    (tmp_path / "run" / "yours.txt").write_text("")
    with pytest.raises(app.UsageError, match="holds yours.txt, which no run wrote"):
        runs.claim(run, other, overwrite=True)
    runs.release(run)
    assert os.path.exists(tmp_path / "run" / "settings.json")


def test_a_run_without_recorded_settings_is_not_reused(tmp_path):
    (tmp_path / "backup").mkdir()
    with pytest.raises(app.UsageError, match="holds backup, which no run wrote"):
        runs.claim(str(tmp_path), SETTINGS)
    runs.release(str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"^--output_dir: .*file is a file, not a folder$"):
        runs.claim(str(tmp_path / "file"), SETTINGS)


def glue_command(checkpoint, output_dir, *extra):
    return ["-m", "tasks.glue", "--task_name=SST-2",
            f"--data_dir={os.path.join(DATA, 'glue', 'SST-2')}", f"--init_checkpoint={checkpoint}",
            f"--output_dir={output_dir}", "--max_seq_length=32", "--train_batch_size=16",
            "--max_eval_examples=16", "--num_train_epochs=3", "--save_checkpoints_steps=1",
            *extra]  # fmt: skip


# Runs a binary with Model.save_weights replaced: its third call writes the start of an HDF5
# file where it was told to write, then the process kills itself (SIGKILL), mid-backup.
KILL_DURING_THIRD_BACKUP = """
import os, runpy, signal, sys
import keras
calls = []
save_weights = keras.Model.save_weights
def save_then_die(self, filepath, *args, **kwargs):
    calls.append(filepath)
    if len(calls) == 3:
        with open(filepath, "wb") as f:
            f.write(b"\\x89HDF\\r\\n\\x1a\\n" + bytes(100))
        os.kill(os.getpid(), signal.SIGKILL)
    return save_weights(self, filepath, *args, **kwargs)
keras.Model.save_weights = save_then_die
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def run(args, expect=0):
    result = run_binary(args)
    assert result.returncode == expect, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_a_kill_while_the_backup_is_written_loses_nothing(tmp_path, tiny_checkpoint):
    command = glue_command(tiny_checkpoint, tmp_path)
    killed = run(["-c", KILL_DURING_THIRD_BACKUP, *command[1:]], expect=-9)
    assert "training steps 1 to 12" in killed.stderr  # 3 epochs of 4 batches, one call
    backup = tmp_path / "backup"
    assert len(os.listdir(backup)) == 2  # the complete backup of step 2, the cut-short third
    # Started again: the complete backup is used, and the run goes on from its batch to the
    # same end, the rest of epoch 1 first.
    again = run(command)
    assert "resuming from the backup at step 2 of 12" in again.stderr
    assert "training steps 3 to 4" in again.stderr and "training steps 5 to 12" in again.stderr
    assert os.listdir(backup) == ["latest.weights.h5"]
    assert [h["epoch"] for h in json.loads((tmp_path / "metrics.json").read_text())] == [1, 2, 3]
    # The same command once more: finished, nothing trained.
    same = run(command)
    assert "holds this run, finished" in same.stderr and "training steps" not in same.stderr
    # Another learning rate into the same folder: one line, no traceback, nothing touched.
    before = (tmp_path / "model.keras").stat().st_mtime_ns
    other = run(command + ["--learning_rate=1e-3"], expect=1)
    assert other.stderr.strip().splitlines()[-1].startswith(
        f"error: --output_dir={tmp_path} holds a run with other settings (--learning_rate=5e-05 "
        "there, 0.001 now)")  # fmt: skip
    assert "Traceback" not in other.stderr
    assert (tmp_path / "model.keras").stat().st_mtime_ns == before
    replaced = run(command + ["--learning_rate=1e-3", "--overwrite_output_dir"])
    assert "training steps 1 to 12" in replaced.stderr
    assert json.loads((tmp_path / "settings.json").read_text())["learning_rate"] == 1e-3
    assert stat.S_IMODE(os.stat(tmp_path / "metrics.json").st_mode) == 0o644


@pytest.mark.slow
@pytest.mark.parametrize("flag, message", [
    ("--max_seq_length=600", "error: --max_seq_length=600 must be between 3 and the checkpoint's "
                             "max_position_embeddings=128"),
    ("--train_batch_size=0", "error: --train_batch_size must be at least 1, got 0"),
    ("--data_dir=/nowhere", "error: --data_dir=/nowhere: no such folder"),
])  # fmt: skip
def test_user_mistakes_get_one_line(tmp_path, tiny_checkpoint, flag, message):
    result = run(glue_command(tiny_checkpoint, tmp_path, flag), expect=1)
    assert result.stderr.strip().splitlines()[-1] == message
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "settings.json").exists()  # refused before the run started


@pytest.mark.slow
def test_a_healthy_run_prints_only_what_it_does(tmp_path, tiny_checkpoint):
    """No TensorFlow notices (cuInit, oneDNN, the absl banner, SavedModel internals) and no
    error-level lines; a line before the slow first step, then the loss, examples/s and tokens/s
    every --log_every_steps steps (stderr is a pipe here, not a terminal); speeds in TensorBoard.
    TF_CPP_MIN_LOG_LEVEL set by the user brings TensorFlow's lines back."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    command = [sys.executable, *glue_command(tiny_checkpoint, tmp_path / "a", "--log_every_steps=2")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    ours = (r"I\d{4} [\d:.]+ +\d+ ((common|trainer|driver|progress|glue)\.py:\d+\] |"
            r"__init__\.py:\d+\] loaded a huggingface checkpoint)")  # keras_bert/checkpoints
    noise = [line for line in lines if not re.match(ours, line)]
    assert noise == [], noise
    said = [line.split("] ", 1)[1] for line in lines]
    assert said.index("building the training step (the first step traces and compiles it)") < 3 + [
        i for i, s in enumerate(said) if s.startswith("first step done in")][0]
    speeds = [s for s in said if s.startswith("step ")]
    assert [s.split(":")[0] for s in speeds] == ["step 2/12", "step 4/12", "step 6/12",
                                                 "step 8/12", "step 10/12", "step 12/12"]
    assert all(re.search(r"loss \d\.\d{4}, [\d.]+ steps/s, [\d.,]+ examples/s, [\d,]+ tokens/s", s)
               for s in speeds), speeds  # fmt: skip
    examples, tokens = [re.search(r"([\d.,]+) examples/s, ([\d,]+) tokens/s", s).groups()
                        for s in speeds][-1]  # fmt: skip
    ratio = float(tokens.replace(",", "")) / float(examples.replace(",", ""))
    assert 3 < ratio <= 32  # real tokens per example: SST-2 sentences cut at 32
    assert os.listdir(tmp_path / "a" / "logs" / "speed")

    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    command = [sys.executable, "-m", "tasks.glue", "--task_name=SST-2", "--data_dir=/nowhere"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 1  # TensorFlow's own C++ lines (cuInit, oneDNN) are back:
    assert re.search(r"^[IWE]\d{4} [\d:.]+ +\d+ \w+\.cc:\d+\] ", result.stderr, re.M)


def test_an_output_dir_that_cannot_be_made_or_written_is_refused(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("x")
    cannot = r"^--output_dir: cannot create the folder .*a_file/run \(Not a directory\); pass"
    with pytest.raises(ValueError, match=cannot):
        runs.claim(str(tmp_path / "a_file" / "run"), {"seed": 1})
    # A read-only file system (os.access is what sees it, for root too).
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ValueError, match=r"^--output_dir: cannot write in the folder .*/run; "):
        runs.claim(str(tmp_path / "run"), {"seed": 1})


def test_settings_are_the_flags_of_our_modules_only():
    from absl import flags

    values = flags.FlagValues()
    for name, module in [("ours", os.path.join(os.path.dirname(runs.__file__), "glue.py")),
                         ("shared", "tasks.common"), ("verbosity", "absl.logging"),
                         ("hbm_oom_exit", "tensorflow.python.tpu.client.client")]:  # fmt: skip
        flags.DEFINE_integer(name, len(name), "", flag_values=values, module_name=module)
    values.mark_as_parsed()
    assert runs.settings_of(values, "glue") == {"task": "glue", "ours": 4, "shared": 6}


def test_a_diverged_run_is_stopped_and_neither_backed_up_nor_saved(tmp_path):
    import keras
    import numpy as np

    from tasks import trainer

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="run")
    model.compile(optimizer="adam", loss="mse")
    backup = backups.RunBackup(str(tmp_path / "backup"), save_freq=1)
    backup.set_model(model)
    backup.save()  # finite weights: backed up
    assert os.path.exists(backup.path)
    before = os.path.getmtime(backup.path)
    stop = backups.StopOnNonFiniteLoss()
    stop.set_model(model)
    stop.on_train_batch_end(0, {"loss": 0.25})  # a finite loss goes on
    with pytest.raises(ValueError, match=r"^the training loss is nan at step 0: training "
                                         r"diverged; lower --learning_rate"):  # fmt: skip
        stop.on_train_batch_end(0, {"loss": float("nan")})
    kernel = model.get_layer("dense").kernel
    kernel.assign(np.where(np.eye(3, 2) > 0, np.inf, 1.0).astype("float32"))
    with pytest.raises(ValueError, match=r"^run/dense/kernel holds nan or inf: training diverged"):
        backup.save()
    assert os.path.getmtime(backup.path) == before  # the last good backup stays
    with pytest.raises(ValueError, match="holds nan or inf"):
        trainer.save_run(str(tmp_path / "run"), model)
    assert not os.path.exists(tmp_path / "run" / "model.keras")


def test_a_backup_keeps_the_state_of_the_random_draws(tmp_path):
    from conftest import TINY

    import keras_bert

    def model(dropout):
        return keras_bert.BertEncoder(**{**TINY, "hidden_dropout_prob": dropout,
                                         "attention_probs_dropout_prob": dropout})

    trained = model(0.1)
    generators = backups.seed_generators(trained)
    assert len(generators) == 1 + 3 * TINY["num_hidden_layers"]  # embeddings', then 3 a block
    for i, generator in enumerate(generators):  # as if training had drawn masks
        generator.state.assign([1000 + i, 7 * i + 3])
    path = str(tmp_path / "latest.weights.h5")
    trained.save_weights(path)
    backups.save_random_state(trained, path)
    resumed = model(0.1)
    resumed.load_weights(path)
    backups.restore_random_state(resumed, path)
    assert [g.state.numpy().tolist() for g in backups.seed_generators(resumed)] == [
        [1000 + i, 7 * i + 3] for i in range(len(generators))]
    # A model without dropout has no generators: its backups hold an empty state.
    plain = model(0.0)
    plain.save_weights(path)
    backups.save_random_state(plain, path)
    backups.restore_random_state(plain, path)
    with pytest.raises(ValueError, match="0 random states, the model has"):
        backups.restore_random_state(trained, path)


def test_a_run_from_before_the_manifest_is_read_as_a_run(tmp_path):
    for name, text in [("settings.json", json.dumps(SETTINGS)), ("model.keras", "finished"),
                       ("test_results.tsv", "predictions")]:  # fmt: skip
        (tmp_path / name).write_text(text)
    assert runs.claim(str(tmp_path), SETTINGS) == "finished"
    runs.release(str(tmp_path))
    recorded = json.loads((tmp_path / "run_files.json").read_text())
    assert recorded == ["model.keras", "settings.json", "test_results.tsv"]
