"""The README's commands are the ones that run: CI runs the test command verbatim."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, run_binary, run_forked


def readme_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(r"```(?:sh|bash)\n(.*?)\n```", f.read(), re.S)


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in readme_commands() if "pytest" in c)
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert test_command in f.read()


@pytest.mark.slow
def test_main_job_fine_tunes_exports_and_classifies(tmp_path):
    main_job = next(c for c in readme_commands() if "install -e ." in c and "[test]" not in c)
    assert main_job.rstrip().endswith("python -m tasks.quickstart")
    result = subprocess.run([sys.executable, "-m", "tasks.quickstart",
                             f"--output_dir={tmp_path / 'run'}", f"--export_dir={tmp_path / 'exp'}",
                             "--classify=What a wonderful, moving film.",
                             "--classify=A dull, lifeless mess."],
                            cwd=ROOT, capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = float(result.stdout.split("dev accuracy: ")[1].split()[0])
    assert accuracy > 0.78  # 4,000 sentences, one epoch; chance is 0.5
    assert f"exported: {tmp_path / 'exp' / 'sst-2' / '1'}" in result.stdout
    lines = result.stdout.splitlines()
    assert lines[-2].split()[0] == "1" and lines[-1].split()[0] == "0"  # positive, negative


@pytest.mark.slow
def test_encode_job_compares_sentences():
    result = subprocess.run([sys.executable, "-m", "tasks.encode", "--sentences", "A cat sat.",
                             "--sentences", "A kitten was sitting.", "--sentences", "Stocks fell."],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sequence_output (3, " in result.stdout and ", 384)" in result.stdout
    rows = [line.split()[:3] for line in result.stdout.splitlines() if "] " in line]
    similarity = [[float(v) for v in row] for row in rows]
    assert similarity[0][0] == pytest.approx(1.0, abs=1e-3)
    assert similarity[0][1] > similarity[0][2] + 0.3  # cat ~ kitten, not stocks


@pytest.mark.slow
def test_encode_job_warns_of_each_sentence_it_truncates():
    # Forked (the test above runs the binary afresh).
    result = run_binary(["-m", "tasks.encode", "--max_seq_length=6", "--sentences", "A cat sat.",
                         "--sentences", "A kitten was sitting."])  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if "packs to" in line]
    assert warnings == ["sentence [1] packs to 7 tokens, more than --max_seq_length=6: its vector "
                        "ignores the rest"]  # fmt: skip


HELP_FLAGS = [
    ("tasks.encode", ["--checkpoint", "--sentences", "--max_seq_length", "--pooling"]),
    ("tasks.glue", ["--task_name", "--data_dir", "--tfds", "--init_checkpoint", "--output_dir",
                    "--max_windows", "--window_stride",
                    "--strategy", "--mixed_precision", "--learning_rate", "--bucket_by_length"]),
    ("tasks.swag", ["--train_file", "--dev_file", "--init_checkpoint", "--strategy"]),
    ("tasks.squad", ["--train_file", "--predict_file", "--version_2_with_negative",
                     "--max_seq_length", "--doc_stride", "--max_query_length", "--n_best_size",
                     "--max_answer_length", "--null_score_diff_threshold", "--do_lower_case",
                     "--init_checkpoint", "--output_dir"]),
    ("tasks.ner", ["--train_file", "--dev_file", "--test_file", "--init_checkpoint", "--documents",
                   "--max_windows", "--window_stride",
                   "--output_dir", "--max_seq_length"]),
    ("tasks.quickstart", ["--classify", "--task_name", "--learning_rate"]),
    ("tasks.pretrain", ["--text_file", "--input_file", "--num_train_steps", "--learning_rate"]),
    ("exports.export", ["--run_dir", "--export_dir", "--model_name", "--hub_layout"]),
    # Benchmarks: their own flags, and --results from benchmarks/__init__.py.
    ("benchmarks.ceiling", ["--precision", "--seq_length", "--rounds", "--steps", "--results"]),
    ("benchmarks.peers", ["--bench", "--rounds", "--threads", "--output", "--results"]),
    ("benchmarks.tricks", ["--checkpoint", "--threads", "--results"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def helps():
    """Each binary's `--help`, run as `python -m <module> --help` would be, forked from one
    process that imported TensorFlow once (tests/forked_binaries.py): in fresh processes each
    took about 7 s on 2 cores, most of it TensorFlow's import."""
    requests = [{"module": module, "args": ["--help"], "timeout": 300} for module, _ in HELP_FLAGS]
    return {module: result for (module, _), result in zip(HELP_FLAGS, run_forked(requests, 900))}


@pytest.mark.parametrize("module, flags", HELP_FLAGS)
def test_help_explains_every_flag(helps, module, flags):
    stdout = helps[module]["stdout"]
    assert "flags:" in stdout, helps[module]["stderr"][-2000:]  # absl exits 1 after --help
    for flag in flags:  # boolean flags show as --[no]name
        assert flag in stdout or flag.replace("--", "--[no]") in stdout, flag


def test_pretraining_help_leaves_out_fine_tuning_flags(helps):
    """tasks.pretrain shares the fine-tuning binaries' flags but for these (it refuses them:
    tests/data/bad/cases.tsv)."""
    stdout = helps["tasks.pretrain"]["stdout"]
    assert "--num_train_epochs" not in stdout and "--do_eval" not in stdout
