"""keras_bert side by side with PyTorch, each side in its own process, printed as JSON.

    pip install -e '.[bench]'          # PyTorch, transformers, tokenizers, sentence-transformers
    python -m benchmarks.peers --bench=encoder      # BERT-base forward / training step, f32 and bf16
    python -m benchmarks.peers --bench=tokenizer    # strings to packed ids: BertPreprocessor against
                                                    # the Rust tokenizer, both on Python lists
    python -m benchmarks.peers --bench=serving      # strings in, labels out (needs an export)
        [--onednn_frozen_weights]                   # ... as the README's TF Serving setting
        [--threads=1]                               # ... one thread an op, on both sides
        [--threads=1,0]                             # ... both settings in one run
        [--onednn=0,1]                              # ... keras_bert, oneDNN off and on
        [--tf_env=NAME=A,B]                         # ... keras_bert, an environment variable
                                                    #     set to A in one worker, B in another
        [--precisions=float32]                      # ... PyTorch in float32 alone (a CPU
                                                    #     without bfloat16 instructions)
    python -m benchmarks.peers --bench=encoder --onednn_frozen_weights
                                                    # ... also the forward a bf16 export serves
    python -m benchmarks.peers --bench=finetune     # fine-tuning MiniLM on SST-2, examples/s
    python -m benchmarks.peers --bench=embed [--glue_dir=DIR]
                                                    # strings to sentence vectors, batch 1 and
                                                    # 32, against sentence-transformers; with
                                                    # --glue_dir, each side's STS-B dev Spearman
    python -m benchmarks.peers --bench=embed_learning --glue_dir=DIR
                                                    # what fine-tuning a text embedder learns
                                                    # against sentence-transformers' fit
                                                    # (benchmarks/embedding_learning.py)
    python -m benchmarks.peers --bench=learning --glue_dir=DIR
                                                    # what fine-tuning learns on the same
                                                    # data (benchmarks/learning.py)
    python -m benchmarks.peers --bench=products --threads=1,2
                                                    # a 25-token sentence's dense products alone
        [--widths=base --batch_size=1024]           # ... BERT-base's, at the encoder bench's
                                                    #     8 x 128 tokens
        [--onednn_frozen_weights]                   # ... also with oneDNN's weights kept

Each side runs in a worker process (benchmarks/peer_tf.py, benchmarks/peer_torch.py) that sets
up once and then times one job at a time when asked. This process asks the two sides in turn,
round after round, in alternating order (the machine is shared and noisy), and reports for each
job both sides' medians and the ratio keras_bert / PyTorch (> 1: keras_bert is faster), also
round by round (`ratio_by_round`: each round's two timings ran seconds apart, so a change in
the machine's load between rounds moves both).
Jobs only one side has (the bare matrix-product ceiling, benchmarks/ceiling.py; `~in_order`:
the same products, each waiting for those a forward pass computes it from) are reported alone,
and the bfloat16 forward as a fraction of each (`..._of_ceiling`); a job `X~variant` is a
variant of X on one side, compared with the other side's X. With several --threads
settings, each side runs a worker per setting, in the same alternating rounds, and every job is
named `X~threads=N`: each of keras_bert's settings is compared with PyTorch's best job and
setting, so that the best ratio is best against best, measured in one run.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from absl import app, flags, logging

import benchmarks
from benchmarks import newest_export, print_report
from benchmarks.peer_results import compare, summary
from benchmarks.peer_worker import checkpoint_config, checkpoint_folder

FLAGS = flags.FLAGS
flags.DEFINE_enum("bench", "encoder",
                  ["encoder", "tokenizer", "serving", "finetune", "products", "learning",
                   "embed", "embed_learning"],
                  "What to compare (see the module docstring).")  # fmt: skip
flags.DEFINE_integer("rounds", 5, "Alternating rounds; each round times every job once a side.")
flags.DEFINE_integer("batch_size", None, "Examples per call. Default: 8 for encoder, 32 for "
                     "finetune and tokenizer; serving always measures batch 1 and batch 32; "
                     "products: the rows (tokens) each product sees, 25 (a mean SST-2 dev "
                     "sentence's tokens).")
flags.DEFINE_integer("seq_length", 128, "encoder: tokens per sequence (no padding).")
flags.DEFINE_integer("steps", 3, "encoder: steps per timed job; tokenizer: passes over "
                     "the 872 sentences per timed job; finetune: 10x this.")
flags.DEFINE_list("precisions", ["float32", "bfloat16"], "encoder, products and finetune: "
                  "precisions to measure; serving: PyTorch's (the export has its own). On a "
                  "CPU without bfloat16 instructions PyTorch's bfloat16 is several times "
                  "slower than its float32 and fine-tuning in it very slow: --precisions=float32 "
                  "there.")
flags.DEFINE_string("export", None, "serving: the SavedModel version folder of a MiniLM "
                    "SST-2 classifier. Default: the newest under exported/sst-2 (made by "
                    "python -m tasks.quickstart).")
flags.DEFINE_string("run_dir", os.path.join("runs", "quickstart"), "serving: the run the "
                    "export came from; the PyTorch side loads its weights.")
flags.DEFINE_string("checkpoint", None, "finetune, tokenizer and products: the checkpoint "
                    "folder (products: its config's widths). Default: MiniLM.")
flags.DEFINE_enum("widths", "checkpoint", ["checkpoint", "base"], "products: the widths "
                  "and blocks of the products: the checkpoint's (--checkpoint), or BERT-base's "
                  "(hidden 768, 12 blocks; with --batch_size=1024 the shapes the encoder bench "
                  "trains and runs its forward on).")
flags.DEFINE_string("output", None, "Also write the JSON report to this file.")
flags.DEFINE_string("glue_dir", None, "learning: the GLUE folder, holding <task>/train.tsv "
                    "and <task>/dev.tsv; embed: the GLUE folder whose STS-B/dev.tsv each side "
                    "scores (optional).")
flags.DEFINE_enum("task", "SST-2", ["SST-2", "MRPC"], "learning: the GLUE task.")
flags.DEFINE_list("sizes", ["512", "2000", "8000"], "learning: training examples, the last N "
                  "of the training file; 'all' for every one.")
flags.DEFINE_integer("seeds", 3, "learning, embed_learning: seeds per setting (first_seed, "
                     "first_seed + 1, ...).")
flags.DEFINE_list("embed_tasks", ["sts", "retrieval"], "embed_learning: sts and/or retrieval "
                  "(benchmarks/embedding_learning.py says what each is).")
flags.DEFINE_integer("first_seed", 0, "learning, embed_learning: the first seed.")
flags.DEFINE_list("recipes", ["plain", "library"], "learning: some of plain, plain_reference "
                  "and library "
                  "(benchmarks/learning.py says what each is).")
flags.DEFINE_float("learning_rate", 5e-5, "learning, embed_learning: the (peak) learning "
                   "rate (sentence-transformers' default is 2e-5).")
flags.DEFINE_integer("epochs", 1, "learning, embed_learning: passes over the training "
                     "examples.")
flags.DEFINE_list("threads", [], "Threads each side computes an op with (TensorFlow's "
                  "intra-op threads, torch.set_num_threads), the same on both sides; 0 is each "
                  "framework's own default (one per core). A list (1,0) measures every setting "
                  "in one run. Default: 0 alone.")
flags.DEFINE_list("onednn", [], "keras_bert side: run a worker with TF_ENABLE_ONEDNN_OPTS set "
                  "to each value (0: TensorFlow's own kernels, 1: oneDNN's), in the same "
                  "rounds, its jobs named X~onednn=N. Default: the environment's setting, and "
                  "where it has none, keras_bert's (on) for the jobs that import it and "
                  "TensorFlow's (on only with AVX512 VNNI, AVX512-BF16 or AMX) for serving "
                  "and products, which import TensorFlow alone (serving: as TF Serving does).")
flags.DEFINE_string("tf_env", None, "keras_bert side, NAME=A,B,...: run a worker with the "
                    "environment variable NAME set to each value, in the same rounds, its jobs "
                    "named X~NAME=A, to compare TensorFlow settings read from the environment "
                    "(e.g. TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=0,1). A name TensorFlow does "
                    "not read (e.g. SAME=a,b) runs identical workers: how far two workers "
                    "differ by chance. Not with --onednn.")
flags.DEFINE_bool("onednn_frozen_weights", False, "serving: run the keras_bert side with "
                  "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1, the TF Serving setting the README "
                  "recommends for bfloat16 exports (oneDNN keeps its reordered weights between "
                  "calls). encoder: also run a keras_bert worker with it, in the same rounds, "
                  "that times the bfloat16 forward with stored weights (what such an export "
                  "runs) and the ceiling, its jobs named X~frozen_weights. products: the "
                  "same, a worker whose products run with it.")

SIDES = ("keras_bert", "pytorch")


class Worker:
    """One side's process: `ask(job)` times a job there and returns its report."""

    def __init__(self, side, options, suffix=""):
        module = {"keras_bert": "benchmarks.peer_tf", "pytorch": "benchmarks.peer_torch"}[side]
        self.side = side
        self.suffix = suffix  # added to the side's job names, which it does not know
        env = dict(os.environ)
        env.pop("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", None)  # only where asked: it stalls training
        if side == "keras_bert" and options.get("onednn_frozen_weights"):
            env["TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"] = "1"
        if side == "keras_bert":
            env.update(options.get("env") or {})  # --onednn, --tf_env: keras_bert_variants
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self.info = self._read()  # {"jobs": [...], anything the side reports about itself}
        self.jobs = [job + suffix for job in self.info["jobs"]]

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} worker stopped (exit {self.process.wait()})")
        return json.loads(line)

    def ask(self, job):
        self.process.stdin.write(job.removesuffix(self.suffix) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def options():
    if FLAGS.onednn_frozen_weights and FLAGS.bench not in ("serving", "encoder", "products"):
        raise app.UsageError(f"--onednn_frozen_weights: for --bench=serving, encoder or "
                             f"products, not {FLAGS.bench}")  # fmt: skip
    if not FLAGS.precisions or set(FLAGS.precisions) - {"float32", "bfloat16"}:
        raise app.UsageError(f"--precisions={','.join(FLAGS.precisions)}: give float32, "
                             "bfloat16 or both")  # fmt: skip
    if FLAGS.checkpoint and not os.path.isdir(FLAGS.checkpoint):
        raise app.UsageError(f"--checkpoint={FLAGS.checkpoint}: no such folder; give a "
                             "checkpoint folder, or leave the flag out for MiniLM")  # fmt: skip
    if FLAGS.widths != "checkpoint" and FLAGS.bench != "products":
        raise app.UsageError(f"--widths={FLAGS.widths}: for --bench=products, not "
                             f"{FLAGS.bench}")  # fmt: skip
    if FLAGS.widths != "checkpoint" and FLAGS.checkpoint:
        raise app.UsageError(f"--widths={FLAGS.widths} takes no --checkpoint (the products' "
                             "widths are then BERT-base's): leave one of the two out")  # fmt: skip
    if FLAGS.bench == "products" and FLAGS.checkpoint and not checkpoint_config(FLAGS.checkpoint):
        raise app.UsageError(f"--checkpoint={FLAGS.checkpoint}: no config.json or "
                             "bert_config.json there, which the products take their widths "
                             "from; give a checkpoint folder")  # fmt: skip
    batch_size = FLAGS.batch_size or {"encoder": 8, "products": 25}.get(FLAGS.bench, 32)
    export = FLAGS.export
    if FLAGS.bench == "serving" and not export:
        export = newest_export("sst-2")
    return {"bench": FLAGS.bench, "batch_size": batch_size, "seq_length": FLAGS.seq_length,
            "steps": FLAGS.steps, "precisions": FLAGS.precisions, "export": export,
            "run_dir": FLAGS.run_dir, "checkpoint": FLAGS.checkpoint, "widths": FLAGS.widths,
            "onednn_frozen_weights": FLAGS.onednn_frozen_weights,
            "threads": thread_settings(), "onednn": onednn_settings(), "tf_env": tf_env(),
            "glue_dir": FLAGS.glue_dir if FLAGS.bench == "embed" else None,
            "scratch": tempfile.mkdtemp(prefix="peers-")}  # fmt: skip


def thread_settings():
    """--threads as a list of int (0: the framework's default)."""
    try:
        settings = [int(n) for n in FLAGS.threads] or [0]
    except ValueError:
        raise app.UsageError(f"--threads={','.join(FLAGS.threads)}: give whole numbers, "
                             "such as 1 or 1,0") from None  # fmt: skip
    if min(settings) < 0 or len(set(settings)) < len(settings):
        raise app.UsageError(f"--threads={','.join(FLAGS.threads)}: give different numbers, "
                             "none negative (0: the framework's default)")  # fmt: skip
    return settings


def onednn_settings():
    """--onednn as a list of "0" / "1", or [None]: the environment's setting alone."""
    if any(value not in ("0", "1") for value in FLAGS.onednn):
        raise app.UsageError(f"--onednn={','.join(FLAGS.onednn)}: give 0, 1 or 0,1")
    return sorted(set(FLAGS.onednn)) or [None]


def tf_env():
    """--tf_env as (NAME, [values]), or None."""
    if FLAGS.tf_env is None:
        return None
    name, _, values = FLAGS.tf_env.partition("=")
    values = values.split(",")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or "" in values:
        raise app.UsageError(f"--tf_env={FLAGS.tf_env}: give NAME=A,B (an environment "
                             "variable's name, then its values, none empty)")  # fmt: skip
    if len(set(values)) < len(values):
        raise app.UsageError(f"--tf_env={FLAGS.tf_env}: give different values, one a worker")
    if FLAGS.onednn:
        raise app.UsageError("--tf_env and --onednn: give one of them (--tf_env="
                             "TF_ENABLE_ONEDNN_OPTS=0,1 is --onednn=0,1)")  # fmt: skip
    if name == "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS":
        raise app.UsageError(f"--tf_env={FLAGS.tf_env}: it would stall the training jobs; "
                             "use --onednn_frozen_weights, which sets it only where the "
                             "weights never change")  # fmt: skip
    return name, values


def keras_bert_variants(opts):
    """A keras_bert worker's changes to the options and its jobs' suffix, one per --onednn or
    --tf_env value."""
    if opts["tf_env"]:
        name, values = opts["tf_env"]
        return [({"env": {name: value}}, f"~{name}={value}") for value in values]
    return [({"env": {"TF_ENABLE_ONEDNN_OPTS": onednn}}, f"~onednn={onednn}")
            if onednn is not None else ({}, "") for onednn in opts["onednn"]]  # fmt: skip


def prepare(opts):
    """What the PyTorch side needs first: for serving, the run's weights in its layout."""
    if opts["bench"] == "serving":
        logging.info("writing %s's weights for the PyTorch side", opts["run_dir"])
        subprocess.run([sys.executable, "-m", "benchmarks.peer_tf",
                        json.dumps({**opts, "bench": "prepare_serving", "threads": 0})],
                       check=True)  # fmt: skip


def agreement(opts):
    """Do both sides compute the same thing? Token ids, or the labels of the dev sentences."""
    def load(name):
        return np.load(os.path.join(opts["scratch"], name), allow_pickle=True)

    if opts["bench"] == "tokenizer":
        ours, theirs = load("keras_bert_ids.npy"), load("pytorch_ids.npy")
        return {"sentences_with_equal_ids": sum(list(a) == list(b) for a, b in zip(ours, theirs)),
                "sentences": len(ours)}  # fmt: skip
    if opts["bench"] == "serving":
        ours, theirs = load("keras_bert_labels.npy"), load("pytorch_labels.npy")
        return {"equal_labels": int(np.sum(ours == theirs)), "sentences": len(ours)}
    if opts["bench"] == "embed":
        ours, theirs = load("keras_bert_vectors.npy"), load("pytorch_vectors.npy")
        cosines = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) *
                                            np.linalg.norm(theirs, axis=1))  # fmt: skip
        return {"lowest_cosine": float(cosines.min()), "sentences": len(ours)}
    return None


def learning_report():
    from benchmarks import learning

    return learning.main({
        "task": FLAGS.task, "glue_dir": FLAGS.glue_dir, "sizes": FLAGS.sizes,
        "recipes": FLAGS.recipes, "precisions": FLAGS.precisions, "seeds": FLAGS.seeds,
        "first_seed": FLAGS.first_seed,
        "checkpoint": checkpoint_folder({"checkpoint": FLAGS.checkpoint}),
        "learning_rate": FLAGS.learning_rate,
        "batch_size": FLAGS.batch_size or 16, "epochs": FLAGS.epochs})  # fmt: skip


def embed_learning_report():
    from benchmarks import embedding_learning

    return embedding_learning.main({
        "tasks": FLAGS.embed_tasks, "glue_dir": FLAGS.glue_dir, "seeds": FLAGS.seeds,
        "first_seed": FLAGS.first_seed,
        "checkpoint": checkpoint_folder({"checkpoint": FLAGS.checkpoint}),
        "learning_rate": FLAGS.learning_rate, "epochs": FLAGS.epochs})  # fmt: skip


def write_report(report):
    if FLAGS.output:
        tmp = f"{FLAGS.output}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2) + "\n")
        os.replace(tmp, FLAGS.output)
    print_report(report)


def main(argv):
    del argv
    if FLAGS.bench == "learning":
        return write_report(learning_report())
    if FLAGS.bench == "embed_learning":
        return write_report(embed_learning_report())
    opts = options()
    prepare(opts)
    settings = opts["threads"]
    workers = []  # (side, worker): a worker per side and thread setting (and variant)
    for threads in settings:
        suffix = f"~threads={threads}" if len(settings) > 1 else ""
        # serving: keras_bert's worker runs with the setting; encoder, products: a third does.
        frozen = opts["onednn_frozen_weights"]
        variants = [("keras_bert", {"onednn_frozen_weights": frozen and opts["bench"] == "serving",
                                    **changes}, suffix + name)
                    for changes, name in keras_bert_variants(opts)]  # fmt: skip
        variants.append(("pytorch", {}, suffix))
        if frozen and opts["bench"] in ("encoder", "products"):
            variants.append(("keras_bert", {"onednn_frozen_weights": True},
                             suffix + "~frozen_weights"))  # fmt: skip
        for side, changes, name in variants:  # one at a time: each set-up uses both cores
            logging.info("starting the %s side%s", side, name)
            workers.append((side, Worker(side, {**opts, "threads": threads, **changes}, name)))
    jobs = {side: [job for s, w in workers if s == side for job in w.jobs] for side in SIDES}
    all_jobs = sorted(set(jobs["keras_bert"]) | set(jobs["pytorch"]))
    reports = {side: {job: [] for job in jobs[side]} for side in SIDES}
    for side, worker in workers:
        for job in worker.jobs:
            for _ in range(2):  # warm up: Keras traces again for the second shapes it sees
                worker.ask(job)
    for r in range(FLAGS.rounds):
        for side, worker in workers if r % 2 == 0 else workers[::-1]:
            for job in worker.jobs:
                reports[side][job].append(worker.ask(job))
        logging.info("round %d of %d done", r + 1, FLAGS.rounds)
    for _, worker in workers:
        worker.close()
    results = {}
    for job in all_jobs:
        results[job] = {side: summary(reports[side][job]) for side in SIDES if job in jobs[side]}
    compare(results)
    infos = {f"{side}{worker.suffix}": worker.info for side, worker in workers}
    report = {"bench": FLAGS.bench, "rounds": FLAGS.rounds, "options": opts,
              "sides": infos, "results": results, "agreement": agreement(opts)}
    for suffix in {worker.suffix for _, worker in workers}:
        for variant in ("", "~in_order"):  # the goal's ceiling; the products in a forward's order
            ceiling = results.get(f"bfloat16/matmul_ceiling{variant}{suffix}", {})
            for job in ("bfloat16/forward" + suffix, "bfloat16/forward~stored_weights" + suffix):
                if "keras_bert" in ceiling and job in results:
                    rate = results[job]["keras_bert"]["per_s"]
                    report[f"{job}_of_ceiling{variant}"] = rate / ceiling["keras_bert"]["per_s"]
    write_report(report)


if __name__ == "__main__":
    flags.adopt_module_key_flags(benchmarks)  # --help lists --results
    app.run(main)
