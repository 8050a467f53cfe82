"""The corpus of bad inputs (tests/data/bad/cases.tsv), each run through its binary: a user's
mistake must end with exit code 1 and one `error:` line that names the file and line or the flag
and says what is wrong, never with a Python traceback.

The binaries run when the first case asks for the results, two at a time, each in a process of
its own forked from one that has imported TensorFlow (tests/forked_binaries.py): a binary spends
most of a bad input's few seconds importing it.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import DATA, ROOT, run_forked

BAD = os.path.join(DATA, "bad")


def read_cases():
    cases = []
    with open(os.path.join(BAD, "cases.tsv"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                case_id, module, args, pattern = line.rstrip("\n").split("\t")
                cases.append((case_id, module, args.split(" "), pattern))
    return cases


CASES = read_cases()


def prepare(args, scratch):
    os.makedirs(scratch)

    def fill(arg):
        def copy(match):
            target = os.path.join(scratch, "copy", match.group(1))
            shutil.copytree(os.path.join(BAD, match.group(1)), target)
            return target

        arg = re.sub(r"\{copy:([^}]+)\}", copy, arg)
        return arg.replace("{bad}", BAD).replace("{out}", os.path.join(scratch, "out"))

    return [fill(arg) for arg in args]


@pytest.fixture(scope="session")
def results(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("bad_inputs")
    requests = [{"module": module, "args": prepare(args, str(scratch / case_id)), "timeout": 300}
                for case_id, module, args, _ in CASES]  # fmt: skip
    return {case[0]: subprocess.CompletedProcess(case[1], **result)
            for case, result in zip(CASES, run_forked(requests, 1800))}  # fmt: skip


def test_the_corpus_is_well_formed():
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 50
    for _, module, _, pattern in CASES:
        assert os.path.isfile(os.path.join(ROOT, *module.split(".")) + ".py"), module
        re.compile(pattern)


@pytest.mark.slow
@pytest.mark.parametrize("case_id,module,args,pattern", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_gets_one_line(results, case_id, module, args, pattern):
    result = results[case_id]
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-3000:]
    assert result.returncode == 1, output[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert re.search(pattern, errors[0]), errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("module,flag", [("tasks.encode", "--sentences"),
                                         ("tasks.quickstart", "--classify")])
def test_command_line_text_that_is_not_utf8_gets_one_line(module, flag):
    # Bytes the shell passes that are not UTF-8 (the corpus file itself must be UTF-8).
    result = subprocess.run([sys.executable, "-m", module, flag.encode() + b"=caf\xe9"],
                            cwd=ROOT, capture_output=True, timeout=300)  # fmt: skip
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (f"error: {flag}: sentence 1 is not valid UTF-8 "
                                               "(byte 0xe9 at character 4); pass UTF-8 text")
