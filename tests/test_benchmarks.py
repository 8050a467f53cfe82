"""The benches' smoke test: each canonical bench run once at tiny sizes, as a user runs it, and
benchmarks.peers' bookkeeping. PyTorch's side needs the bench extra, so the peer benches run
their keras_bert worker alone. The runs are forked from one process that imported TensorFlow
once (tests/forked_binaries.py), two at a time."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, ROOT, run_forked

from benchmarks.peer_results import compare, summary


def rate(side, per_s):
    return {side: {"per_s": per_s}}


def test_each_setting_is_compared_with_pytorchs_best_job_and_setting():
    results = {
        "batch_1~threads=0": rate("keras_bert", 300.0),
        "batch_1~threads=1": rate("keras_bert", 330.0),
        "batch_1@bfloat16~threads=0": rate("pytorch", 220.0),
        "batch_1@bfloat16~threads=1": rate("pytorch", 165.0),
        "batch_1@float32~threads=0": rate("pytorch", 145.0),
        "batch_32~threads=0": rate("keras_bert", 1100.0),
        "batch_32@bfloat16~threads=0": rate("pytorch", 500.0),
    }
    compare(results)
    assert results["batch_1~threads=1"]["ratio"] == 1.5  # 330 / 220: best against best
    assert results["batch_1~threads=1"]["ratio_against"] == "batch_1@bfloat16~threads=0"
    assert results["batch_1~threads=0"]["ratio"] == 300.0 / 220.0
    assert results["batch_32~threads=0"]["ratio"] == 2.2  # batch 32 never against batch 1
    assert "ratio" not in results["batch_1@float32~threads=0"]


def test_jobs_both_sides_run_are_compared_across_settings_too():
    # The encoder's jobs have the same names on both sides (no @precision on PyTorch's).
    results = {
        "bfloat16/forward~threads=0": {**rate("keras_bert", 4000.0), **rate("pytorch", 3200.0)},
        "bfloat16/forward~threads=1": {**rate("keras_bert", 2400.0), **rate("pytorch", 1600.0)},
        "bfloat16/forward~stored_weights~threads=0": rate("keras_bert", 4400.0),
        "bfloat16/matmul_ceiling~threads=0": rate("keras_bert", 5000.0),
    }
    compare(results)
    assert results["bfloat16/forward~threads=0"]["ratio"] == 1.25
    assert results["bfloat16/forward~threads=1"]["ratio"] == 0.75  # against 3,200, not 1,600
    assert results["bfloat16/forward~stored_weights~threads=0"]["ratio"] == 1.375
    assert "ratio" not in results["bfloat16/matmul_ceiling~threads=0"]


def test_the_ratio_is_also_given_round_by_round():
    # Each round's pair ran seconds apart: a slow round on a busy machine slows both sides.
    def side(name, items, rounds_s):  # as benchmarks.peers summarises a side's rounds
        return {name: summary([{"seconds": s, "items": items, "unit": "sentences"}
                               for s in rounds_s])}  # fmt: skip

    results = {
        "batch_1": side("keras_bert", 64, [0.4, 0.8, 0.5]),
        "batch_1@float32": side("pytorch", 64, [1.0, 1.2, 0.8]),
        "batch_1@bfloat16": side("pytorch", 64, [2.0, 2.0, 2.0]),
    }
    compare(results)
    assert results["batch_1"]["ratio"] == 1.0 / 0.5  # the ratio of the medians
    by_round = results["batch_1"]["ratio_by_round"]  # against float32, the faster
    assert by_round == pytest.approx({"median": 1.6, "lowest": 1.5, "highest": 2.5})
    assert "ratio_by_round" not in results["batch_1@float32"]


def worker_info(options, env=None):
    """What a keras_bert worker (benchmarks.peer_tf) reports for `options`: it announces its
    jobs and set-up on its first line, then exits at the end of its (empty) input."""
    worker = subprocess.run([sys.executable, "-m", "benchmarks.peer_tf", json.dumps(options)],
                            cwd=ROOT, input="", capture_output=True, text=True, env=env,
                            timeout=600)  # fmt: skip
    assert worker.returncode == 0, worker.stderr[-3000:]
    return json.loads(worker.stdout.splitlines()[0])


def offered_jobs(options, env=None):
    return worker_info(options, env)["jobs"]


WORKER = """if True:
    import io, runpy, sys
    sys.stdin = io.StringIO(sys.argv[2])
    sys.argv = ["peer_tf", sys.argv[1]]
    runpy.run_module("benchmarks.peer_tf", run_name="__main__")
"""


def worker(options, *jobs):
    """A run of the keras_bert worker (benchmarks.peer_tf) on `options`, asked for `jobs`."""
    return {"code": WORKER, "args": [json.dumps(options), "".join(f"{j}\n" for j in jobs)]}


def bench(module, *args):
    return {"module": f"benchmarks.{module}", "args": list(args)}


# benchmarks.peers' flags it refuses before any worker starts: (flags, line start, message).
REFUSALS = [
    (["--tf_env=TF_ONEDNN_USE_SYSTEM_ALLOCATOR"], "--tf_env",
     "give NAME=A,B (an environment variable's name, then its values, none empty)"),
    (["--tf_env=SAME=a,a"], "--tf_env", "give different values, one a worker"),
    (["--tf_env=TF_ENABLE_ONEDNN_OPTS=0,1", "--onednn=0,1"], "--tf_env", "give one of them"),
    (["--widths=base", "--bench=tokenizer"], "--widths=base",
     "for --bench=products, not tokenizer"),
]  # fmt: skip


@pytest.fixture(scope="module")
def export(tiny_checkpoint, tmp_path_factory):
    import keras_bert

    folder = tmp_path_factory.mktemp("export")
    return keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint).export(
        str(folder / "m"), allow_untrained_head=True)  # timed, not scored


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return str(tmp_path_factory.mktemp("scratch"))


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, two_block_checkpoint, export, scratch):
    """{name: {"returncode", "stdout", "stderr"}} of every smoke run."""
    tiny = {"checkpoint": tiny_checkpoint, "scratch": scratch}
    results = os.path.join(scratch, "results.jsonl")
    learning_run = {"task": "SST-2", "glue_dir": os.path.join(DATA, "glue"),
                    "checkpoint": tiny_checkpoint, "learning_rate": 5e-5, "batch_size": 16,
                    "epochs": 1, "size": "32", "recipe": "plain_reference", "precision": "float32",
                    "seed": 3, "side": "keras_bert"}  # fmt: skip
    requests = {
        "encoder": worker({"bench": "encoder", "batch_size": 1, "seq_length": 8, "steps": 1,
                           "layers": 1, "precisions": ["float32"]},
                          "float32/forward", "float32/train_step", "float32/matmul_ceiling"),
        "encoder_frozen": worker({"bench": "encoder", "batch_size": 1, "seq_length": 8,
                                  "steps": 1, "layers": 1, "precisions": ["float32", "bfloat16"],
                                  "onednn_frozen_weights": True}),
        "tokenizer": worker({**tiny, "bench": "tokenizer", "batch_size": 32, "steps": 1},
                            "tokenize_and_pack"),
        "serving": worker({"bench": "serving", "export": export, "scratch": scratch},
                          "batch_1~tf_serving", "batch_32"),
        "finetune": worker({**tiny, "bench": "finetune", "batch_size": 2, "steps": 1,
                            "precisions": ["float32"]}, "finetune~float32"),
        "embed": worker({**tiny, "bench": "embed", "glue_dir": os.path.join(DATA, "glue")},
                        "embed_batch_1"),
        "products": worker({**tiny, "bench": "products", "batch_size": 3,
                            "precisions": ["float32", "bfloat16"]}, "float32/products"),
        "learning": {"module": "benchmarks.learning", "args": [json.dumps(learning_run)]},
        **{f"embed_learning_{task}": {"module": "benchmarks.embedding_learning", "args": [
            json.dumps({"side": "keras_bert", "task": task, "seed": 1, "batch_size": 8,
                        "epochs": 1, "learning_rate": 1e-4, "checkpoint": two_block_checkpoint,
                        "glue_dir": os.path.join(DATA, "glue")})]}
           for task in ("sts", "retrieval")},
        "ceiling": bench("ceiling", "--model=minilm", "--layers=1", "--batch_size=1",
                         "--seq_length=8", "--rounds=1", "--steps=1", "--column_parts=2",
                         "--intra_op_threads=1", f"--results={results}"),
        "ceiling_classifier": bench("ceiling", "--model=minilm", "--layers=1", "--batch_size=1",
                                    "--seq_length=8", "--rounds=1", "--steps=1",
                                    "--column_parts=2", "--classifier"),
        "serving_export": bench("serving", f"--export={export}", "--rounds=1", "--examples=4"),
        "serving_load": bench("serving_load", f"--exports={export}", "--processes=1"),
        "serving_load_missing": bench("serving_load", f"--exports={scratch}/none",
                                      "--processes=1"),
        "pretraining": bench("pretraining", "--model=small", "--rounds=1", "--train_steps=1",
                             "--nocreation"),
        "tricks": bench("tricks", f"--checkpoint={tiny_checkpoint}", "--rounds=1",
                        "--examples=4", "--threads=1"),
        "long_texts": bench("long_texts", f"--glue_dir={os.path.join(DATA, 'glue')}",
                            f"--squad_file={os.path.join(DATA, 'squad', 'dev-v1.1.json')}",
                            f"--checkpoint={tiny_checkpoint}", "--train_texts=4",
                            "--test_texts=4", "--filler_words=30", "--late_tokens=15",
                            "--sequence_length=16", "--max_windows=3", "--batch_size=2",
                            "--epochs=1", "--variants=truncate,attention"),
        "long_serving": bench("long_serving", f"--checkpoint={tiny_checkpoint}", "--tokens=60",
                              "--max_windows=4", "--sequence_length=16", "--rounds=1",
                              "--models=token_classifier"),
    }  # fmt: skip
    for i, (flags, _, _) in enumerate(REFUSALS):
        requests[f"refusal_{i}"] = bench("peers", "--bench=products", *flags)
    # The longest runs first: two run at a time, so one started last would run alone.
    longest = ("long_serving", "long_texts", "pretraining", "tricks")
    ordered = sorted(requests.items(), key=lambda item: (
        longest.index(item[0]) if item[0] in longest else len(longest)))
    replies = run_forked([{**r, "timeout": 600} for _, r in ordered], 1500)
    return {name: reply for (name, _), reply in zip(ordered, replies)}


def report_of(runs, name):
    reply = runs[name]
    assert reply["returncode"] == 0, reply["stderr"][-3000:]
    return reply["stdout"]


def worker_lines(runs, name):
    """The worker's announcement (its set-up and jobs) and its reports, one a job asked."""
    announced, *reports = (json.loads(line) for line in report_of(runs, name).splitlines())
    return announced, reports


def test_the_encoder_bench_times_a_forward_a_training_step_and_the_ceiling(runs):
    announced, reports = worker_lines(runs, "encoder")
    assert sorted(announced["jobs"]) == ["float32/forward", "float32/matmul_ceiling",
                                         "float32/matmul_ceiling~in_order", "float32/train_step"]
    assert [(r["items"], r["unit"]) for r in reports] == [(8, "tokens")] * 3  # a step of 1 x 8
    assert announced["keras"] and announced["onednn"] in (True, False)


def test_a_frozen_weights_worker_offers_nothing_that_trains(runs):
    # TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 silently stalls training: a worker run with it (peers
    # --bench=encoder --onednn_frozen_weights) must time only what a served export runs.
    announced, _ = worker_lines(runs, "encoder_frozen")
    assert sorted(announced["jobs"]) == ["bfloat16/forward~stored_weights",
                                         "bfloat16/matmul_ceiling",
                                         "bfloat16/matmul_ceiling~in_order"]  # fmt: skip


def test_the_tokenizer_bench_packs_every_dev_sentence(runs, scratch):
    _, [report] = worker_lines(runs, "tokenizer")
    assert (report["items"], report["unit"]) == (872, "sentences")
    ids = np.load(os.path.join(scratch, "keras_bert_ids.npy"), allow_pickle=True)
    assert len(ids) == 872 and all(row[0] == 101 and row[-1] == 102 for row in ids)  # CLS, SEP


def test_the_serving_bench_also_serves_the_export_as_tf_serving_loads_it(runs, scratch):
    announced, reports = worker_lines(runs, "serving")
    assert sorted(announced["jobs"]) == ["batch_1", "batch_1~tf_serving", "batch_32",
                                         "batch_32~tf_serving"]  # fmt: skip
    assert [r["items"] for r in reports] == [64, 256]  # SERVING_SENTENCES
    assert [len(r["latencies"]) for r in reports] == [64, 8]  # one a call
    # The worker checked that both loadings label the dev sentences alike, and saved them.
    assert np.load(os.path.join(scratch, "keras_bert_labels.npy")).shape == (872,)


def test_the_finetune_bench_offers_only_the_precisions_asked_for(runs):
    # bfloat16 fine-tuning takes minutes a step on a CPU without bfloat16 instructions.
    announced, [report] = worker_lines(runs, "finetune")
    assert announced["jobs"] == ["finetune~float32", "finetune~float32~xla"]
    assert (report["items"], report["unit"]) == (20, "examples")  # 2 a step, 10 steps


def test_the_embed_bench_times_both_batches_and_scores_sts_b(runs, scratch):
    announced, [report] = worker_lines(runs, "embed")
    assert announced["jobs"] == ["embed_batch_1", "embed_batch_32", "embed_batch_1~tf_serving",
                                 "embed_batch_32~tf_serving"]  # fmt: skip
    assert announced["export_max_difference"] < 1e-5
    assert (report["items"], len(report["latencies"])) == (64, 64)  # one sentence a call
    assert -1.0 <= announced["stsb_dev_spearman"] <= 1.0  # 24 pairs of tests/data
    vectors = np.load(os.path.join(scratch, "keras_bert_vectors.npy"))
    assert vectors.shape == (256, 12)  # the agreement check's, unit length
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_the_products_bench_offers_each_precision(runs):
    # On a CPU whose bfloat16 products are slow, float32's are the ones to compare.
    announced, [report] = worker_lines(runs, "products")
    assert sorted(announced["jobs"]) == ["bfloat16/products", "float32/products"]
    assert report["unit"] == "calls" and report["items"] > 0


def test_the_learning_bench_trains_and_scores_the_keras_bert_side(runs):
    scored = json.loads(report_of(runs, "learning").strip().splitlines()[-1])
    assert 0.0 <= scored["accuracy"] <= 1.0 and 0.0 <= scored["f1"] <= 1.0


def test_the_embed_learning_bench_scores_the_keras_bert_side_before_and_after(runs):
    sts = json.loads(report_of(runs, "embed_learning_sts").strip().splitlines()[-1])
    retrieval = json.loads(report_of(runs, "embed_learning_retrieval").strip().splitlines()[-1])
    assert -1.0 <= sts["spearman"] <= 1.0 and sts["spearman"] != sts["before"]["spearman"]
    assert 0.0 <= retrieval["mrr@10"] <= retrieval["recall@10"] <= 1.0
    assert retrieval["recall@10"] == 1.0  # 40% of 16 pairs: fewer sentences than the top 10


def test_the_ceiling_bench_times_each_form_and_appends_its_report(runs, scratch):
    from benchmarks.ceiling import MODELS, product_flops
    from keras_bert import BertConfig

    report = json.loads(report_of(runs, "ceiling"))
    forms = [f"{order}/{weights}" for order in ("independent", "in_order", "in_column_parts")
             for weights in ("constants", "variables")]  # fmt: skip
    assert sorted(report["tokens_per_s"]) == sorted(forms)
    assert report["of_independent_constants"]["independent/constants"] == 1.0
    # MiniLM's widths, one block on 8 tokens: 2 x 8 x (4 x 384^2 + 2 x 384 x 1536) + 4 x 8^2 x 384.
    minilm = BertConfig(num_hidden_layers=1, **MODELS["minilm"])
    assert report["gflop_per_call"] == round(product_flops(minilm, 1, 8) / 1e9, 3) == 0.028
    for form, rate in report["tokens_per_s"].items():
        assert math.isclose(report["gflop_per_s"][form], product_flops(minilm, 1, 8) / 1e9 *
                            rate / 8, rel_tol=1e-3, abs_tol=0.1)  # fmt: skip
    # --results appended the report as one line, with where and how it was measured.
    with open(os.path.join(scratch, "results.jsonl"), encoding="utf-8") as f:
        [line] = [json.loads(line) for line in f]
    assert line["report"] == report and line["command"].startswith("python -m benchmarks.ceiling")
    assert line["cpu"] and line["date"]
    # As a served classifier's export computes them: the last block past its query, key and
    # value product for the first token alone, 2 x 8 x 3 x 384^2 + 4 x 8 x 384 + 2 x (384^2 +
    # 2 x 384 x 1536) in all.
    report = json.loads(report_of(runs, "ceiling_classifier"))
    pooled = product_flops(minilm, 1, 8, classifier=True) / 1e9
    assert report["classifier"] and report["gflop_per_call_in_order"] == round(pooled, 3) == 0.01


def test_the_serving_bench_serves_an_export_at_batch_1_and_32(runs, export):
    report = json.loads(report_of(runs, "serving_export"))
    assert report["export"] == export and report["examples_per_round"] == 4
    assert sorted(report["results"]) == ["batch_1", "batch_32"]


def test_the_load_bench_reports_an_exports_load_time_and_memory(runs, export, scratch):
    result = json.loads(report_of(runs, "serving_load"))["results"][export]
    # A TensorFlow session and graph take tens of MiB at least; the peak is never below the end.
    assert 10 < result["rss_added_mib"] <= result["peak_rss_added_mib"]
    missing = runs["serving_load_missing"]
    assert missing["returncode"] == 1 and missing["stderr"].strip().splitlines()[-1] == (
        f"--exports: {scratch}/none holds no saved_model.pb; give "
        "SavedModel version folders, such as exported/sst-2/1")


def test_the_pretraining_bench_times_both_precisions(runs):
    timed = json.loads(report_of(runs, "pretraining"))["small_model_pretraining_batch32_seq64"]
    assert sorted(timed) == ["float32", "mixed_bfloat16"]
    for precision in timed.values():
        steps = precision["keras_bert"]
        assert math.isclose(steps["tokens_per_s"], 32 * 64 * steps["steps_per_s"], rel_tol=1e-6)


def test_the_long_texts_bench_scores_each_model_on_early_and_late_sentences(runs):
    report = json.loads(report_of(runs, "long_texts"))
    # One variant of each path: a text cut to its first window, and one read in windows
    # (mean and max differ from attention only in the pooling layer, tested in the library).
    assert [run["variant"] for run in report["runs"]] == ["truncate", "attention"]
    for run in report["runs"]:
        parts = [run["early_accuracy"], run["late_accuracy"]]
        assert all(0.0 <= v <= 1.0 for v in parts) and run["accuracy"] == np.mean(parts)


def test_the_long_serving_bench_times_each_request_of_the_exports_asked_for(runs):
    report = json.loads(report_of(runs, "long_serving"))
    assert report["long_text_pieces"] >= 60 and list(report["results"]) == ["token_classifier"]
    for requests in report["results"].values():
        assert sorted(requests) == ["long_1", "long_32", "one_window"]
        peaks = [requests[r]["peak_rss_mb"] for r in ("one_window", "long_1", "long_32")]
        assert peaks == sorted(peaks) and all(r["median_ms"] > 0 for r in requests.values())


def test_the_special_paths_bench_exports_each_variant(runs):
    report = json.loads(report_of(runs, "tricks"))
    assert sorted(report["results"]) == ["default", "no_column_parts"]
    assert report["results"]["default"]["batch_1"]["default_over_this"] == 1.0


@pytest.mark.parametrize("index", range(len(REFUSALS)))
def test_the_peers_bench_refuses_flags_it_cannot_run_in_one_line(runs, index):
    _, start, message = REFUSALS[index]
    reply = runs[f"refusal_{index}"]
    assert reply["returncode"] == 1, reply["stderr"][-3000:]
    last = reply["stderr"].strip().splitlines()[-1]
    assert last.startswith(start) and message in last, last
    assert "Traceback" not in reply["stderr"]


def test_a_worker_that_runs_keras_bert_runs_it_as_a_users_program_does(tiny_checkpoint):
    # Importing keras_bert turns oneDNN on unless the environment says otherwise; the worker
    # must import it before TensorFlow, or it times TensorFlow's own kernels on a CPU where
    # TensorFlow leaves oneDNN off (AVX2 alone) while a user's program runs oneDNN's. (A fresh
    # process: a forked one has TensorFlow loaded already.)
    options = {"bench": "finetune", "batch_size": 2, "steps": 1, "checkpoint": tiny_checkpoint,
               "precisions": ["float32"]}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    run = subprocess.run([sys.executable, "-m", "benchmarks.peer_tf", json.dumps(options)],
                         cwd=ROOT, input="", capture_output=True, text=True, env=env,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[0])["onednn"] is True


def test_the_products_bench_takes_its_widths_from_the_checkpoint_or_bert_base(tiny_checkpoint,
                                                                              tmp_path):
    # Both sides build the products from the checkpoint's config (the PyTorch worker cannot
    # import keras_bert's), in the Hugging Face layout or the Google release's; --widths=base
    # gives BERT-base's, the encoder bench's model, with no checkpoint.
    from benchmarks.peer_worker import encoder_products, products_widths
    from keras_bert import BertConfig

    with open(os.path.join(tiny_checkpoint, "config.json")) as f:
        config = json.load(f)
    google = {"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2}
    (tmp_path / "bert_config.json").write_text(json.dumps(google))
    base = BertConfig().to_dict()
    for opts, c in (({"checkpoint": tiny_checkpoint}, config),
                    ({"checkpoint": str(tmp_path)}, google),
                    ({"widths": "base"}, base)):  # fmt: skip
        hidden, inner = c["hidden_size"], c["intermediate_size"]
        x, layers = encoder_products(products_widths(opts), 5, np.random.default_rng(0))
        assert x.shape == (5, hidden)
        block = [(hidden, hidden, hidden)] * 4 + [(hidden, inner, inner), (inner, hidden, hidden)]
        assert [w.shape + b.shape for w, b in layers] == c["num_hidden_layers"] * block
    assert (base["hidden_size"], base["num_hidden_layers"]) == (768, 12)


def test_the_learning_bench_pairs_both_sides_on_one_order_and_head(tmp_path):
    """benchmarks.learning's bookkeeping: each seed's two sides train on the same examples in
    the same order from the same head, and the summary is our mean minus PyTorch's."""
    from absl import app

    from benchmarks import learning

    options = {"task": "SST-2", "glue_dir": os.path.join(DATA, "glue"), "checkpoint": "ckpt",
               "learning_rate": 5e-5, "batch_size": 16, "epochs": 1, "sizes": ["32"],
               "recipes": ["plain"], "precisions": ["float32"], "seeds": 2, "first_seed": 7}
    runs = list(learning.runs(options))
    assert [(r["seed"], r["side"]) for r in runs] == [
        (7, "keras_bert"), (7, "pytorch"), (8, "keras_bert"), (8, "pytorch")]
    texts, labels = learning.training_set(runs[0])
    all_texts, all_labels = learning.read_split(options["glue_dir"], "SST-2", "train")
    assert sorted(zip(texts, labels.tolist())) == sorted(zip(all_texts[-32:], all_labels[-32:].tolist()))
    again, _ = learning.training_set(runs[1])
    other, _ = learning.training_set(runs[2])
    assert again == texts and other != texts
    kernel, bias = learning.head_weights(runs[0], 384, 2)
    assert np.array_equal(kernel, learning.head_weights(runs[1], 384, 2)[0])
    assert kernel.shape == (384, 2) and np.abs(kernel).max() <= 2 * learning.HEAD_STDDEV
    assert not bias.any()
    results = [{**r, "accuracy": a, "f1": 0.5} for r, a in zip(runs, [0.70, 0.72, 0.80, 0.74])]
    entry = learning.summarise(results)["SST-2 N=32 plain float32 lr=5e-05"]["accuracy"]
    assert entry == {"keras_bert": 0.75, "pytorch": 0.73, "difference_points": 2.0}
    with pytest.raises(app.UsageError, match=r"--sizes: \['ten'\] are not example counts"):
        learning.check({**options, "sizes": ["ten"]})
    with pytest.raises(app.UsageError, match="has no MRPC/dev.tsv|has no MRPC/train.tsv"):
        learning.check({**options, "task": "MRPC", "glue_dir": str(tmp_path)})
