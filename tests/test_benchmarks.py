"""benchmarks.peers' bookkeeping (the runs themselves need the bench extra's PyTorch)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.peer_results import compare, summary

from conftest import ROOT


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


def test_a_frozen_weights_worker_offers_nothing_that_trains():
    # TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 silently stalls training: a worker run with it (peers
    # --bench=encoder --onednn_frozen_weights) must time only what a served export runs.
    options = {"bench": "encoder", "batch_size": 1, "seq_length": 8, "steps": 1,
               "precisions": ["float32", "bfloat16"], "onednn_frozen_weights": True}
    env = {**os.environ, "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}
    offered = offered_jobs(options, env)
    assert sorted(offered) == ["bfloat16/forward~stored_weights", "bfloat16/matmul_ceiling",
                               "bfloat16/matmul_ceiling~in_order"]


def test_the_products_bench_offers_each_precision():
    # On a CPU whose bfloat16 products are slow, float32's are the ones to compare.
    options = {"bench": "products", "batch_size": 3, "precisions": ["float32", "bfloat16"]}
    assert sorted(offered_jobs(options)) == ["bfloat16/products", "float32/products"]


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


def test_the_products_bench_refuses_a_checkpoint_folder_without_a_config(tmp_path):
    # One usage line before any worker starts (a worker's traceback before); the same for
    # --widths=base with a checkpoint, whose widths it would ignore, and for another bench.
    for flags, line in (
        ([f"--checkpoint={tmp_path}"],
         f"--checkpoint={tmp_path}: no config.json or bert_config.json there, which the "
         "products take their widths from; give a checkpoint folder"),
        (["--widths=base", f"--checkpoint={tmp_path}"],
         "--widths=base takes no --checkpoint (the products' widths are then BERT-base's): "
         "leave one of the two out"),
        (["--widths=base", "--bench=tokenizer"],
         "--widths=base: for --bench=products, not tokenizer"),
    ):
        bench = subprocess.run([sys.executable, "-m", "benchmarks.peers", "--bench=products",
                                *flags], cwd=ROOT, capture_output=True, text=True,
                               timeout=600)  # fmt: skip
        assert bench.returncode == 1, bench.stderr[-3000:]
        assert bench.stderr.strip().splitlines()[-1] == line
        assert "Traceback" not in bench.stderr


def test_the_finetune_bench_offers_only_the_precisions_asked_for(tiny_checkpoint):
    # bfloat16 fine-tuning takes minutes a step on a CPU without bfloat16 instructions.
    options = {"bench": "finetune", "batch_size": 2, "steps": 1, "checkpoint": tiny_checkpoint}
    assert offered_jobs({**options, "precisions": ["float32"]}) == ["finetune~float32",
                                                                     "finetune~float32~xla"]
    assert sorted(offered_jobs({**options, "precisions": ["float32", "bfloat16"]})) == [
        "finetune", "finetune~float32", "finetune~float32~xla", "finetune~xla"]


def test_a_worker_that_runs_keras_bert_runs_it_as_a_users_program_does(tiny_checkpoint):
    # Importing keras_bert turns oneDNN on unless the environment says otherwise; the worker
    # must import it before TensorFlow, or it times TensorFlow's own kernels on a CPU where
    # TensorFlow leaves oneDNN off (AVX2 alone) while a user's program runs oneDNN's.
    options = {"bench": "finetune", "batch_size": 2, "steps": 1, "checkpoint": tiny_checkpoint,
               "precisions": ["float32"]}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    assert worker_info(options, env)["onednn"] is True
    assert worker_info(options, {**env, "TF_ENABLE_ONEDNN_OPTS": "0"})["onednn"] is False


def test_the_serving_bench_also_serves_the_export_as_tf_serving_loads_it(tiny_checkpoint,
                                                                          tmp_path):  # fmt: skip
    import keras_bert

    path = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint).export(
        str(tmp_path / "m"), allow_untrained_head=True)  # timed, not scored
    options = {"bench": "serving", "export": path, "scratch": str(tmp_path)}
    worker = subprocess.run([sys.executable, "-m", "benchmarks.peer_tf", json.dumps(options)],
                            cwd=ROOT, input="batch_1~tf_serving\n", capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert worker.returncode == 0, worker.stderr[-3000:]
    announced, report = (json.loads(line) for line in worker.stdout.splitlines())
    assert sorted(announced["jobs"]) == ["batch_1", "batch_1~tf_serving", "batch_32",
                                         "batch_32~tf_serving"]  # fmt: skip
    assert report["items"] == len(report["latencies"]) == 64  # one sentence a call
    # The worker checked that both loadings label the dev sentences alike, and saved them.
    assert np.load(tmp_path / "keras_bert_labels.npy").shape == (872,)


def test_onednn_variants_run_in_workers_with_that_setting():
    # peers --onednn=0,1: each keras_bert worker's environment sets TF_ENABLE_ONEDNN_OPTS, and
    # the worker reports what TensorFlow made of it. (In a process of its own: benchmarks.peers
    # defines absl flags that other modules in this pytest process define too.)
    code = """if True:
        import json
        from benchmarks.peers import Worker, keras_bert_variants
        options = {"bench": "products", "batch_size": 3, "precisions": ["float32"],
                   "onednn": ["0", "1"], "tf_env": None}
        for changes, name in keras_bert_variants(options):
            worker = Worker("keras_bert", {**options, **changes}, name)
            worker.close()
            print(json.dumps([worker.info["onednn"], worker.jobs]))
    """
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert reports == [[False, ["float32/products~onednn=0"]],
                       [True, ["float32/products~onednn=1"]]]  # fmt: skip


def test_tf_env_variants_run_in_workers_with_that_variable():
    # peers --tf_env=NAME=A,B: each keras_bert worker's environment sets NAME to its value, and
    # the worker reports the TensorFlow settings its environment holds.
    code = """if True:
        import json
        from absl import flags
        from benchmarks.peers import Worker, keras_bert_variants, options
        flags.FLAGS(["peers", "--bench=products", "--batch_size=3", "--precisions=float32",
                     "--tf_env=TF_ONEDNN_USE_SYSTEM_ALLOCATOR=0,1"])
        options = options()
        for changes, name in keras_bert_variants(options):
            worker = Worker("keras_bert", {**options, "threads": 0, **changes}, name)
            worker.close()
            environment = worker.info["environment"]
            print(json.dumps([environment["TF_ONEDNN_USE_SYSTEM_ALLOCATOR"],
                              "TF_ENABLE_ONEDNN_OPTS" in environment, worker.jobs]))
    """
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=600, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert reports == [["0", False, ["float32/products~TF_ONEDNN_USE_SYSTEM_ALLOCATOR=0"]],
                       ["1", False, ["float32/products~TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1"]]]


@pytest.mark.parametrize("flags, message", [
    (["--tf_env=TF_ONEDNN_USE_SYSTEM_ALLOCATOR"], "give NAME=A,B (an environment variable's "
     "name, then its values, none empty)"),
    (["--tf_env=SAME=a,a"], "give different values, one a worker"),
    (["--tf_env=TF_ENABLE_ONEDNN_OPTS=0,1", "--onednn=0,1"], "give one of them"),
    (["--tf_env=TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=0,1"], "use --onednn_frozen_weights"),
])  # fmt: skip
def test_the_peers_bench_refuses_a_tf_env_it_cannot_run(flags, message):
    bench = subprocess.run([sys.executable, "-m", "benchmarks.peers", "--bench=products",
                            *flags], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert bench.returncode == 1, bench.stderr[-3000:]
    last = bench.stderr.strip().splitlines()[-1]
    assert last.startswith("--tf_env") and message in last, last
    assert "Traceback" not in bench.stderr


def bench_report(module, *args):
    """The JSON a benchmarks script prints, run as a user runs it."""
    bench = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    return json.loads(bench.stdout)


def test_the_load_bench_reports_an_exports_load_time_and_memory(tiny_checkpoint, tmp_path):
    import keras_bert

    path = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint).export(
        str(tmp_path / "m"), allow_untrained_head=True)  # timed, not scored
    result = bench_report("serving_load", f"--exports={path}", "--processes=1")["results"][path]
    assert result["load_s"] > 0 and result["first_answer_s"] > 0
    # A TensorFlow session and graph take tens of MiB at least; the peak is never below the end.
    assert 10 < result["rss_added_mib"] <= result["peak_rss_added_mib"]
    missing = subprocess.run([sys.executable, "-m", "benchmarks.serving_load",
                              f"--exports={tmp_path / 'none'}", "--processes=1"], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert missing.returncode == 1 and f"loading {tmp_path / 'none'} failed" in missing.stderr


def test_the_headroom_bench_times_each_form_without_the_ops_it_names():
    result = bench_report("headroom", "--layers=2", "--batch_size=2", "--seq_length=9",
                          "--rounds=2", "--steps=1")  # fmt: skip
    counts = result["op_counts"]
    # Two blocks: 4 swaps and 2 LayerNorms each; the stand-ins leave the embeddings' gathers
    # and the first packing alone.
    assert counts["as_is"]["Transpose"] >= 8 and counts["as_is"]["FusedBatchNormV3"] >= 4
    assert counts["no_transposes"] == {**counts["as_is"], "Transpose": 0}
    assert counts["no_layer_norms"] == {**counts["as_is"], "FusedBatchNormV3": 0}
    none = counts["none_of_them"]
    assert none["Transpose"] == none["FusedBatchNormV3"] == 0
    # Each block's three spreads and its pack are gone; the packing before the blocks stays.
    assert none["GatherNd"] == 1 and none["GatherV2"] <= counts["as_is"]["GatherV2"] - 2 * 3
    assert result["speedup"]["as_is"] == 1.0
    assert all(ms > 0 for ms in result["ms_per_forward"].values())


def test_the_ceiling_runs_every_product_of_every_block(tmp_path):
    # Which ops ran (not a timing). Grappler prunes what no output needs, even a product a
    # control edge waits on: an early form of the in-order ceiling ran its last block alone.
    import tensorflow as tf

    from benchmarks.ceiling import matmul_ceiling, product_flops
    from benchmarks.profiling import op_times
    from keras_bert import BertConfig

    config = BertConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64)  # fmt: skip
    for in_order, variables, parts, dtype, classifier in (
            (False, False, 1, tf.float32, False), (True, False, 1, tf.float32, False),
            (True, True, 1, tf.float32, False), (True, True, 2, tf.float32, False),
            (True, True, 2, tf.bfloat16, False), (True, True, 2, tf.float32, True),
            (True, False, 1, tf.float32, True)):  # fmt: skip
        run = matmul_ceiling(config, batch=2, seq=8, dtype=dtype, in_order=in_order,
                             variables=variables, column_parts=parts, classifier=classifier)
        run().numpy()
        logdir = str(tmp_path / f"{in_order}-{variables}-{parts}-{dtype.name}-{classifier}")
        tf.profiler.experimental.start(logdir)
        run().numpy()
        tf.profiler.experimental.stop()
        ops = [op for _, op in op_times(logdir, 1)]
        # query, key, value, scores, context, output, up and down, a block, in each part (a
        # classifier's export: query, key and value in one product). In parts, the output and
        # down products are summed from row parts in float32 (two AddN a block), and in
        # bfloat16 joined before and after (four concats a block). The independent products'
        # one AddN keeps them all alive.
        form = (in_order, variables, parts, dtype.name, classifier, sorted(ops))
        split = parts > 1
        assert sum("MatMul" in op for op in ops) == (6 if classifier else 8) * 3 * parts, form
        assert sum(op == "AddN" for op in ops) == (
            2 * 3 if split and dtype == tf.float32 else not in_order), form
        assert sum(op == "ConcatV2" for op in ops) == (
            4 * 3 if split and dtype == tf.bfloat16 else 0), form
        # The report's GFLOP/s counts exactly these products' work: parts cut, add nothing.
        # A classifier's last block computes 1 of its 8 tokens past the projections.
        assert _graph_product_flops(run) == product_flops(config, 2, 8, classifier), form
    full, pooled = product_flops(config, 2, 8), product_flops(config, 2, 8, classifier=True)
    # A query row of the last block: scores and context over 8 keys; output, up and down.
    per_query_row = 2 * 2 * 2 * 8 * 32 + 2 * 2 * (32 * 32 + 2 * 32 * 64)  # both sequences
    assert full - pooled == 7 * per_query_row
    with pytest.raises(ValueError, match="in order only"):
        matmul_ceiling(config, batch=2, seq=8, dtype=tf.float32, classifier=True)


def _graph_product_flops(function):
    """2 m n k summed over the (batched) matrix products in `function`'s graph."""
    flops = 0
    for op in function.get_concrete_function().graph.get_operations():
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a, b = (t.shape.as_list() for t in op.inputs)
            adjoint_a = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            adjoint_b = op.get_attr("transpose_b" if op.type == "MatMul" else "adj_y")
            rows, inner = a[-1:-3:-1] if adjoint_a else a[-2:]
            columns = b[-2] if adjoint_b else b[-1]
            flops += 2 * rows * inner * columns * math.prod(a[:-2])
    return flops


def test_the_ceiling_bench_times_each_form():
    from benchmarks.ceiling import MODELS, product_flops
    from keras_bert import BertConfig

    report = bench_report("ceiling", "--model=minilm", "--layers=1", "--batch_size=1",
                          "--seq_length=8", "--rounds=1", "--steps=1", "--column_parts=2",
                          "--intra_op_threads=1")  # fmt: skip
    forms = [f"{order}/{weights}" for order in ("independent", "in_order", "in_column_parts")
             for weights in ("constants", "variables")]  # fmt: skip
    assert sorted(report["tokens_per_s"]) == sorted(forms)
    assert report["column_parts"] == 2 and report["intra_op_threads"] == 1
    assert all(rate > 0 for rate in report["tokens_per_s"].values())
    assert report["of_independent_constants"]["independent/constants"] == 1.0
    # MiniLM's widths, one block on 8 tokens: 2 x 8 x (4 x 384^2 + 2 x 384 x 1536) + 4 x 8^2 x 384.
    minilm = BertConfig(num_hidden_layers=1, **MODELS["minilm"])
    assert report["gflop_per_call"] == round(product_flops(minilm, 1, 8) / 1e9, 3) == 0.028
    for form, rate in report["tokens_per_s"].items():
        assert math.isclose(report["gflop_per_s"][form], product_flops(minilm, 1, 8) / 1e9 *
                            rate / 8, rel_tol=1e-3, abs_tol=0.1)  # fmt: skip
        assert math.isclose(report["sequences_per_s"][form], rate / 8, rel_tol=1e-3, abs_tol=0.1)
    assert not report["classifier"]

    # As a served classifier's export computes them: the last block past its query, key and
    # value product for the first token alone, 2 x 8 x 3 x 384^2 + 4 x 8 x 384 + 2 x (384^2 +
    # 2 x 384 x 1536) in all.
    report = bench_report("ceiling", "--model=minilm", "--layers=1", "--batch_size=1",
                          "--seq_length=8", "--rounds=1", "--steps=1", "--column_parts=2",
                          "--intra_op_threads=1", "--classifier")  # fmt: skip
    pooled = product_flops(minilm, 1, 8, classifier=True) / 1e9
    assert report["classifier"] and report["gflop_per_call_in_order"] == round(pooled, 3) == 0.01
    for form, rate in report["tokens_per_s"].items():
        work = product_flops(minilm, 1, 8) / 1e9 if form.startswith("independent") else pooled
        assert math.isclose(report["gflop_per_s"][form], work * rate / 8, rel_tol=1e-3,
                            abs_tol=0.1), form  # fmt: skip


def test_the_dense_forms_bench_times_each_form_of_each_product():
    report = bench_report("dense_forms", "--precision=float32", "--batch_size=1",
                          "--seq_length=8", "--rounds=1", "--steps=2")  # fmt: skip
    forms = [f"{shape}/{form}" for shape in ("square", "up", "down")
             for form in ("fused", "batch_matmul", "matmul_alone")]  # fmt: skip
    assert sorted(report["ms"]) == sorted(forms) and report["tokens"] == 8
    assert all(ms > 0 for ms in report["ms"].values())
    for form, speed in report["speed_of_fused"].items():
        fused = report["ms"][form.split("/")[0] + "/fused"]
        assert math.isclose(speed, fused / report["ms"][form], rel_tol=0.02, abs_tol=0.002), form
    # The batched product and its bias (and GELU) are the fused form's numbers: only the kernels
    # differ. In float32, to the rounding of the last bits.
    assert sorted(report["batch_matmul_max_difference"]) == ["down", "square", "up"]
    assert all(d < 1e-5 for d in report["batch_matmul_max_difference"].values()), report


def test_the_onednn_kernels_bench_reads_an_isa_whose_name_holds_commas():
    # An AMX CPU's name, as oneDNN prints it, has a comma: the report once kept the part before.
    from benchmarks.profiling import END, START, kernel_times

    amx = ("Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX "
           "with bfloat16 and 8-bit integer support")  # fmt: skip
    exec_line = ("onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,"
                 "src:bf16::blocked:ab::f0 wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,"
                 "attr-scratchpad:user,,1024x768:768x768,{ms}")  # fmt: skip
    lines = ["onednn_verbose,v1,info,cpu,runtime:threadpool,nthr:2",
             f"onednn_verbose,v1,info,cpu,isa:{amx}", exec_line.format(ms=9.0), START,
             exec_line.format(ms=1.5), exec_line.format(ms=2.5), END]  # fmt: skip
    report = kernel_times(lines, steps=2, top=5)
    assert report["cpu_isa"] == amx
    # Only the lines between the markers count, summed and divided by the steps.
    assert report["ms_per_step"] == 2.0
    assert report["by_shape"] == {"matmul brg_matmul:avx10_1_512_amx 1024x768:768x768": {
        "ms_per_step": 2.0, "calls_per_step": 1.0}}


def test_the_onednn_kernels_bench_names_each_products_kernel():
    forward = bench_report("onednn_kernels", "--precision=float32", "--layers=1",
                           "--batch_size=2", "--seq_length=16", "--steps=2")  # fmt: skip
    assert forward["form"] == "forward" and forward["steps"] == 2 and forward["cpu_isa"]
    # One block's six dense products (query, key, value, attention output, up, down) run as
    # oneDNN inner products, fused with their biases; the up product also with its GELU. A
    # 16-token attention runs on TensorFlow's own kernels, so no batched product is here.
    assert forward["by_kind"]["inner_product"]["calls_per_step"] == 6
    gelu = [row for row in forward["by_shape"] if "eltwise_gelu" in row]
    assert len(gelu) == 1 and "mb32ic768oc3072" in gelu[0], forward["by_shape"]
    assert forward["by_shape"][gelu[0]]["calls_per_step"] == 1
    assert math.isclose(forward["ms_per_step"], sum(
        kind["ms_per_step"] for kind in forward["by_kind"].values()), abs_tol=0.01)
    assert all(row["ms_per_step"] > 0 for row in forward["by_implementation"].values())
    # The bare products of the same block in bfloat16: where TensorFlow hands bfloat16 products
    # to oneDNN (a CPU with AVX-512, which oneDNN emulates bfloat16 on, or with bfloat16
    # instructions), eight oneDNN matmuls (six dense, the scores and the context). (In float32
    # TensorFlow runs a bare MatMul itself, on oneDNN's GEMM function, reported as gemm_api.)
    ceiling = bench_report("onednn_kernels", "--form=ceiling", "--precision=bfloat16",
                           "--layers=1", "--batch_size=2", "--seq_length=16",
                           "--steps=2")  # fmt: skip
    isa = ceiling["cpu_isa"]
    assert isa == forward["cpu_isa"]
    if "AVX-512" in isa or "bfloat16" in isa:
        assert list(ceiling["by_kind"]) == ["matmul"], (isa, ceiling["by_kind"])
        assert ceiling["by_kind"]["matmul"]["calls_per_step"] == 8
        # The bfloat16 forward (mixed precision) fuses as the float32 one does: six inner
        # products, the up product with its exact GELU (oneDNN's gelu_erf).
        mixed = bench_report("onednn_kernels", "--precision=bfloat16", "--layers=1",
                             "--batch_size=2", "--seq_length=16", "--steps=2")  # fmt: skip
        assert mixed["by_kind"]["inner_product"]["calls_per_step"] == 6, mixed["by_kind"]
        gelu = [row for row in mixed["by_shape"] if "eltwise_gelu_erf" in row]
        assert len(gelu) == 1 and "mb32ic768oc3072" in gelu[0], mixed["by_shape"]
    else:
        # Otherwise (AVX2 alone, say) TensorFlow gives oneDNN no bfloat16 product: its own
        # kernel runs each one as float32 GEMM calls on blocks of it, many a product.
        assert list(ceiling["by_kind"]) == ["gemm_api"], ceiling["by_kind"]
        assert ceiling["by_kind"]["gemm_api"]["calls_per_step"] > 8


def test_inner_products_are_fitted_over_the_rows_they_ran_on():
    from benchmarks.profiling import END, START, inner_product_rows

    def run(kind, shape, ms, post_ops=""):
        return (f"onednn_verbose,v1,primitive,exec,cpu,{kind},brgemm:avx512_core_bf16,"
                f"forward_inference,src:bf16::blocked:ab::f0,attr-scratchpad:user{post_ops},,"
                f"{shape},{ms}")  # fmt: skip

    # ic8oc4 costs 10 us plus 2 a row: on 1, 3 and 5 rows (5 rows twice: its median counts,
    # weighted by its two calls). ic8oc4 with a GELU is another shape, run on one row count.
    lines = [run("inner_product", "mb1ic8oc4", 0.012), START,
             run("inner_product", "mb1ic8oc4", 0.012), run("inner_product", "mb3ic8oc4", 0.016),
             run("inner_product", "mb5ic8oc4", 0.019), run("inner_product", "mb5ic8oc4", 0.021),
             run("inner_product", "mb2ic8oc4", 0.5, " attr-post-ops:eltwise_gelu_erf"),
             run("matmul", "2x8:8x4", 0.3), END,
             run("inner_product", "mb9ic8oc4", 9.0)]  # fmt: skip
    report = inner_product_rows(lines, steps=2)
    assert sorted(report) == ["ic8oc4", "ic8oc4 eltwise_gelu_erf"]
    fit = report["ic8oc4"]
    assert fit["calls_per_step"] == 2.0 and fit["mean_rows"] == 3.5
    assert fit["mean_us"] == round((12 + 16 + 19 + 21) / 4, 2)
    assert math.isclose(fit["fixed_us"], 10, abs_tol=0.01)
    assert math.isclose(fit["us_per_row"], 2, abs_tol=0.001)
    assert fit["fixed_share"] == round(fit["fixed_us"] / fit["mean_us"], 3)
    # One row count fits no line.
    assert report["ic8oc4 eltwise_gelu_erf"] == {
        "calls_per_step": 0.5, "mean_rows": 2.0, "mean_us": 500.0, "fixed_us": None,
        "us_per_row": None, "fixed_share": None}


def test_the_onednn_kernels_bench_fits_a_served_exports_products(tiny_checkpoint, tmp_path):
    import keras_bert

    path = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint).export(
        str(tmp_path / "m"), allow_untrained_head=True)  # timed, not scored
    # oneDNN on, whatever TensorFlow's default for this CPU: with it off there is no kernel.
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"}
    bench = subprocess.run([sys.executable, "-m", "benchmarks.onednn_kernels", "--form=served",
                            f"--export={path}", "--sentences=4", "--steps=2"], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    report = json.loads(bench.stdout)
    assert (report["form"], report["export"]) == ("served", path)
    assert (report["sentences"], report["passes"], report["steps"]) == (4, 2, 8)
    # The tiny model's blocks (hidden 12, feed-forward 38, 2 heads) in 2 column parts: a
    # call computes each part's query, key and value (12 x 18) in the first block, its up
    # product with the GELU (12 x 19) in both blocks, and the classifier's product on [CLS].
    # (A float32 export's attention output and down products sum partial products of their
    # rows, which oneDNN runs in more than one form: not counted here.)
    fits = report["inner_products_by_rows"]
    assert fits["ic12oc18"]["calls_per_step"] == 2, fits
    assert fits["ic12oc19 eltwise_gelu_erf"]["calls_per_step"] == 4, fits
    assert fits["ic12oc2"]["calls_per_step"] == 1 and fits["ic12oc2"]["mean_rows"] == 1, fits
    # The first block's products run on every token: on each sentence's own count.
    assert fits["ic12oc18"]["mean_rows"] > 1 and fits["ic12oc18"]["us_per_row"] is not None
    assert math.isclose(report["by_kind"]["inner_product"]["calls_per_step"],
                        sum(fit["calls_per_step"] for fit in fits.values()))  # fmt: skip
    missing = subprocess.run([sys.executable, "-m", "benchmarks.onednn_kernels", "--form=served",
                              f"--export={tmp_path / 'none'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    assert missing.returncode == 1
    assert f"--export={tmp_path / 'none'} holds no SavedModel" in missing.stderr


def test_the_served_products_bench_times_an_export_against_its_products_alone(minilm_dir,
                                                                               tmp_path):  # fmt: skip
    import keras

    import keras_bert
    from keras_bert import checkpoints

    # One block of MiniLM's widths, random: the products alone are those of such a block.
    keras.utils.set_random_seed(3)
    encoder = keras_bert.BertEncoder(vocab_size=30522, hidden_size=384, num_hidden_layers=1,
                                     num_attention_heads=12, intermediate_size=1536,
                                     max_position_embeddings=128)  # fmt: skip
    folder = str(tmp_path / "checkpoint")
    vocab = os.path.join(minilm_dir, "vocab.txt")
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(encoder, vocab, True), folder)
    path = keras_bert.BertClassifier.from_checkpoint(folder).export(
        str(tmp_path / "m"), allow_untrained_head=True)  # timed, not scored
    report = bench_report("served_products", f"--export={path}", "--layers=1", "--sentences=3",
                          "--rounds=2", "--seq_lengths=8,9")  # fmt: skip
    assert report["sentences"] == 3 and report["column_parts"] == 2
    assert report["precision"] == "float32"
    rates = report["sentences_per_s"]
    assert sorted(rates) == ["export", "products_8_tokens", "products_9_tokens"]
    assert all(rate > 0 for rate in rates.values())
    for seq in (8, 9):
        assert math.isclose(report["export_of_products"][f"{seq}_tokens"],
                            rates["export"] / rates[f"products_{seq}_tokens"], rel_tol=0.01)
    assert all(len(times) == 2 for times in report["rounds_s"].values())
    # Products of other widths would bound nothing: a block count or width the export does not
    # compute is refused, naming the flags.
    wrong = subprocess.run([sys.executable, "-m", "benchmarks.served_products",
                            f"--export={path}", "--layers=2"], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert wrong.returncode == 1
    assert "does not compute --layers=2 blocks of --model=minilm's widths" in wrong.stderr
    assert "it holds 2 feed-forward weights of 384 x 768, not 4" in wrong.stderr


def test_the_served_products_bench_takes_the_exports_precision_and_only_a_pooled_classifier(
        tmp_path):  # fmt: skip
    import tensorflow as tf
    from absl import app

    from benchmarks.served_products import export_precision
    from keras_bert import BertConfig

    def export_with(dtype, query_key_value_parts):
        """An export's weights as far as the bench reads them: one block of hidden 8 in 2 column
        parts, its feed-forward's and (unless pooled-only) its query, key and value's."""
        folder = tmp_path / f"{dtype.name}-{query_key_value_parts}"
        weights = [tf.Variable(tf.zeros((8, 16), dtype)) for _ in range(2)]
        weights += [tf.Variable(tf.zeros((8, 12), dtype)) for _ in range(query_key_value_parts)]
        tf.train.Checkpoint(weights=weights).write(str(folder / "variables" / "variables"))
        return str(folder)

    config = BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)  # fmt: skip
    assert export_precision(export_with(tf.float32, 0), config, 2) == tf.float32
    # A bfloat16 export's products are timed in bfloat16: float32 ones would bound nothing.
    assert export_precision(export_with(tf.bfloat16, 0), config, 2) == tf.bfloat16
    # A last block computing every token (not a pooled-only classifier) is refused.
    with pytest.raises(app.UsageError, match="is not a pooled-only classifier's export"):
        export_precision(export_with(tf.float32, 2), config, 2)


def test_a_calls_time_is_cut_by_how_many_threads_ran_an_op():
    from benchmarks.served_threads import occupancy

    # (start, end, thread, node, op type) in microseconds: a product on thread 0 from 2 to 12,
    # one on thread 1 from 5 to 20, then an add on thread 0 from 21 to 23, in a call of 0 to 25.
    ops = [(2, 12, 0, "a", "MatMul"), (5, 20, 1, "b", "_FusedMatMul"), (21, 23, 0, "c", "AddV2")]
    busy, alone = occupancy(0, 25, ops, threads=2)
    assert busy == {0: 2 + 1 + 2, 1: 3 + 8 + 2, 2: 7}
    assert alone == {"MatMul": 3, "_FusedMatMul": 8, "AddV2": 2}
    # An op that outlasts the call counts up to the call's end.
    busy, _ = occupancy(0, 10, [(4, 30, 0, "a", "MatMul")], threads=2)
    assert busy == {0: 4, 1: 6, 2: 0}


def test_the_served_threads_bench_cuts_each_served_call_by_the_threads_in_an_op(
        tiny_checkpoint, tmp_path):  # fmt: skip
    import keras_bert

    path = keras_bert.BertClassifier.from_checkpoint(tiny_checkpoint).export(
        str(tmp_path / "m"), allow_untrained_head=True)  # timed, not scored
    report = bench_report("served_threads", f"--export={path}", "--sentences=3", "--passes=2",
                          "--top=3")  # fmt: skip
    assert (report["sentences"], report["passes"], report["calls"]) == (3, 2, 6)
    cut = report["threads_in_an_op_ms"]
    assert sorted(cut) == [str(n) for n in range(report["compute_threads"] + 1)]
    # The cut covers each call once: its parts add up to the call (each rounded to 1e-3 ms).
    assert math.isclose(sum(cut.values()), report["call_ms"], abs_tol=0.005)
    assert 0 < report["before_first_op_ms"] < report["call_ms"]
    assert 0 <= report["alone_in_dense_products_ms"] <= cut["1"]
    assert len(report["op_ms_by_type"]) == 3
    assert 0 < report["dense_products_fastest_pass_ms"] <= report["dense_products_ms"]
    missing = subprocess.run([sys.executable, "-m", "benchmarks.served_threads",
                              f"--export={tmp_path / 'none'}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    assert missing.returncode == 1
    assert f"--export={tmp_path / 'none'} holds no SavedModel" in missing.stderr


@pytest.mark.parametrize("precision, width", [("float32", 4), ("bfloat16", 2)])
def test_the_call_costs_bench_times_products_reads_and_calls(precision, width):
    report = bench_report("call_costs", "--rows=1,3", "--weights=2", "--rounds=1", "--steps=1",
                          "--calls=3", f"--precision={precision}")  # fmt: skip
    # A served MiniLM's column-part products by default: 2 parts of 12 heads, hidden 384. A
    # float32 export's attention output and down products take a share of their rows, a
    # bfloat16 export's a share of their columns, as `ColumnParts` splits them.
    shapes = {"query_key_value 384x576": 384 * 576, "up 384x768": 384 * 768}
    if precision == "float32":
        shapes.update({"attention_output 192x384": 192 * 384, "down 768x384": 768 * 384})
    else:
        shapes.update({"attention_output 384x192": 384 * 192, "down 1536x192": 1536 * 192})
    assert sorted(report["product_us"]) == sorted(report["read_us"]) == sorted(shapes)
    assert report["model"] == "minilm" and report["column_parts"] == 2 and report["weights"] == 2
    assert report["precision"] == precision
    for name, size in shapes.items():
        products, read = report["product_us"][name], report["read_us"][name]
        assert sorted(products) == ["1", "3"] and min(products.values()) > 0 and read > 0
        assert math.isclose(report["one_row_over_read"][name], products["1"] / read,
                            rel_tol=0.01, abs_tol=0.01)  # fmt: skip
        # The rate counts the bytes a weight takes in the precision timed.
        assert math.isclose(report["read_gb_s"][name], width * size / (read * 1e3),
                            rel_tol=0.01, abs_tol=0.1)  # fmt: skip
    calls = report["call_us"]
    assert sorted(calls) == ["caller_thread", "inter_op_threads"] and min(calls.values()) > 0
    assert math.isclose(report["handoffs_us"],
                        calls["inter_op_threads"] - calls["caller_thread"], abs_tol=0.11)


def test_the_call_costs_bench_refuses_rows_that_are_not_positive():
    bad = subprocess.run([sys.executable, "-m", "benchmarks.call_costs", "--rows=1,0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert bad.returncode == 1 and "--rows=1,0: give positive whole numbers" in bad.stderr


def test_the_learning_bench_pairs_both_sides_on_one_order_and_head(tmp_path):
    """benchmarks.learning's bookkeeping: each seed's two sides train on the same examples in
    the same order from the same head, and the summary is our mean minus PyTorch's."""
    from absl import app
    from conftest import DATA

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
