"""The README's commands are the ones that run: CI runs the test command verbatim."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return re.findall(r"```(?:sh|bash)\n(.*?)\n```", f.read(), re.S)


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in readme_commands() if "pytest" in c)
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert test_command in f.read()


@pytest.mark.slow
def test_main_job_encodes_and_compares_sentences():
    main_job = next(c for c in readme_commands() if "tasks.encode" in c)
    assert main_job.rstrip().endswith("python -m tasks.encode")
    result = subprocess.run([sys.executable, "-m", "tasks.encode", "--sentences", "A cat sat.",
                             "--sentences", "A kitten was sitting.", "--sentences", "Stocks fell."],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sequence_output (3, " in result.stdout and ", 384)" in result.stdout
    rows = [line.split()[:3] for line in result.stdout.splitlines() if "] " in line]
    similarity = [[float(v) for v in row] for row in rows]
    assert similarity[0][0] == pytest.approx(1.0, abs=1e-3)
    assert similarity[0][1] > similarity[0][2] + 0.3  # cat ~ kitten, not stocks


def test_help_explains_every_flag():
    result = subprocess.run([sys.executable, "-m", "tasks.encode", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    for flag in ("--checkpoint", "--sentences", "--max_seq_length", "--pooling"):
        assert flag in result.stdout
