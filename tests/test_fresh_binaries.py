"""The SQuAD, NER and SWAG binaries and the export binary, each run end to end once in a process
of its own, as a user starts them (the export after SWAG's run). The other tests call the
tasks' run() in a process that has imported keras_bert and tasks already, or fork their
binaries from one (conftest.run_binary): a binary that forgets an import of its own passes
those."""

import json
import os

import pytest
from conftest import DATA, run_binary

pytestmark = pytest.mark.slow

SMALL = ["--max_seq_length=64", "--num_train_epochs=1", "--learning_rate=1e-3",
         "--train_batch_size=8", "--eval_batch_size=8"]  # fmt: skip


def run_fresh(args):
    result = run_binary(args, fresh=True)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def epochs(run_dir):
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("module, files, flags, metric", [
    ("tasks.squad", {"train_file": "squad/train-v1.1.json", "predict_file": "squad/dev-v1.1.json"},
     ["--max_query_length=16", "--doc_stride=24"], "f1"),
    ("tasks.ner", {"train_file": "conll/eng.train", "dev_file": "conll/valid.txt"},
     ["--max_eval_examples=20"], "f1"),
    ("tasks.swag", {"train_file": "swag_sample.jsonl", "dev_file": "swag_sample.jsonl"}, [],
     "accuracy"),
])  # fmt: skip
def test_a_task_binary_trains_scores_and_exports_in_a_fresh_process(
        module, files, flags, metric, tiny_checkpoint, tmp_path):  # fmt: skip
    run_dir = str(tmp_path / "run")
    files = [f"--{flag}={os.path.join(DATA, name)}" for flag, name in files.items()]
    run_fresh(["-m", module, *files, *flags, *SMALL, f"--output_dir={run_dir}",
               f"--init_checkpoint={tiny_checkpoint}"])  # fmt: skip
    [epoch] = epochs(run_dir)
    assert epoch["epoch"] == 1 and 0 <= epoch["dev"][metric] <= 100, epoch
    # The export binary afresh once (after SWAG's run), forked after the others.
    exported = run_binary(["-m", "exports.export", f"--run_dir={run_dir}",
                           f"--export_dir={tmp_path / 'exported'}", "--model_name=m"],
                          fresh=module == "tasks.swag")  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    path = exported.stdout.strip().splitlines()[-1]
    assert path == str(tmp_path / "exported" / "m" / "1")
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))
