"""What fine-tuning a text embedder learns, keras_bert against sentence-transformers' own `fit`
on the same data with the same recipe, as JSON.

    pip install -e '.[bench]'     # sentence-transformers, with what its fit needs
    python -m benchmarks.peers --bench=embed_learning --glue_dir=DIR [--seeds=3
        --embed_tasks=sts,retrieval --learning_rate=2e-5 --epochs=1]

Tasks:
  sts        STS-B train's scored pairs (5,749), CoSENT loss (scale 20), batch 16; scored by
             STS-B dev's Spearman correlation of cosine similarity with the gold scores.
  retrieval  QNLI dev's entailed (question, sentence) pairs, split by a fixed shuffle: 60% train
             with in-batch negatives (MultipleNegativesRankingLoss, scale 20), batch 32; the
             other 40% scored by recall@10 and MRR@10 of each question's sentence among all of
             theirs. (GLUE's QNLI test split has no labels and its train split is not in the
             project's data.)
Recipe on both sides: AdamW at --learning_rate, weight decay 0.01 except LayerNorm and bias
weights, linear warmup over 10% of the steps then linear decay to 0, gradient clipping at norm
1.0, --epochs; the data shuffled by the seed. keras_bert: BertTextEmbedder, `compile()`'s
recipe; sentence-transformers: `SentenceTransformer.fit` with warmup_steps set to 10%. Each run
is a process of its own and also scores the checkpoint before training ("before").
"""

import json
import os
import statistics
import sys

import numpy as np
from absl import app

from benchmarks.learning import run_each

TASKS = {"sts": {"batch_size": 16}, "retrieval": {"batch_size": 32}}
TOP = 10


def _rows(glue_dir, task, split):
    import csv

    with open(os.path.join(glue_dir, task, f"{split}.tsv"), encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def data(run):
    """{"train": (first texts, second texts, scores or None), "test": ...} of the run's task."""
    if run["task"] == "sts":
        def split(name):
            rows = _rows(run["glue_dir"], "STS-B", name)
            return ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows],
                    np.array([float(r["score"]) for r in rows], "float32"))  # fmt: skip

        return {"train": split("train"), "test": split("dev")}
    rows = [r for r in _rows(run["glue_dir"], "QNLI", "dev") if r["label"] == "entailment"]
    order = np.random.default_rng(1234).permutation(len(rows))  # fixed: one split for all runs
    cut = int(0.6 * len(rows))
    parts = [[rows[i] for i in order[:cut]], [rows[i] for i in order[cut:]]]
    return {name: ([r["question"] for r in part], [r["sentence"] for r in part], None)
            for name, part in zip(("train", "test"), parts)}  # fmt: skip


def score(run, embed, test):
    """The task's figures from `embed(texts)` -> (texts, dim) vectors."""
    from tasks.glue_metrics import spearman

    first, second, gold = test
    a, b = (np.asarray(embed(texts), "float32") for texts in (first, second))
    a, b = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (a, b))
    if run["task"] == "sts":
        return {"spearman": spearman((a * b).sum(1), gold)}
    similarity = a @ b.T  # each question against every sentence
    right = similarity[np.arange(len(a)), np.arange(len(a))]
    rank = (similarity > right[:, None]).sum(1)  # 0: the question's own sentence is first
    return {f"recall@{TOP}": float(np.mean(rank < TOP)),
            f"mrr@{TOP}": float(np.mean(np.where(rank < TOP, 1.0 / (rank + 1), 0.0)))}


def shuffled(run, train):
    first, second, scores = train
    order = np.random.default_rng(run["seed"]).permutation(len(first))
    return ([first[i] for i in order], [second[i] for i in order],
            None if scores is None else scores[order])  # fmt: skip


def steps_of(run, count):
    return -(-count // run["batch_size"]) * run["epochs"]


def train_keras(run):
    import keras

    import keras_bert

    keras.utils.set_random_seed(run["seed"])
    sets = data(run)
    model = keras_bert.BertTextEmbedder.from_checkpoint(run["checkpoint"])

    def embed(texts):
        return model.predict(texts, batch_size=64, verbose=0)

    before = score(run, embed, sets["test"])
    first, second, scores = shuffled(run, sets["train"])
    loss = keras_bert.CoSENTLoss() if run["task"] == "sts" else None
    model.compile(learning_rate=run["learning_rate"], **({"loss": loss} if loss else {}))
    model.fit((first, second), scores, batch_size=run["batch_size"], epochs=run["epochs"],
              shuffle=False, verbose=0)  # fmt: skip
    return {"before": before, **score(run, embed, sets["test"])}


def train_sentence_transformers(run):
    import torch
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer import losses
    from torch.utils.data import DataLoader

    torch.manual_seed(run["seed"])
    sets = data(run)
    model = SentenceTransformer(run["checkpoint"], device="cpu")

    def embed(texts):
        return model.encode(texts, batch_size=64, convert_to_numpy=True)

    before = score(run, embed, sets["test"])
    first, second, scores = shuffled(run, sets["train"])
    examples = [InputExample(texts=[a, b], label=0.0 if scores is None else float(s))
                for a, b, s in zip(first, second, scores if scores is not None else first)]
    loader = DataLoader(examples, batch_size=run["batch_size"], shuffle=False)
    loss = (losses.CoSENTLoss(model) if run["task"] == "sts"
            else losses.MultipleNegativesRankingLoss(model))  # fmt: skip
    steps = steps_of(run, len(examples))
    model.fit(train_objectives=[(loader, loss)], epochs=run["epochs"],
              warmup_steps=int(0.1 * steps), optimizer_params={"lr": run["learning_rate"]},
              weight_decay=0.01, max_grad_norm=1.0, show_progress_bar=False)  # fmt: skip
    return {"before": before, **score(run, embed, sets["test"])}


# What every run of a report shares.
RUN_OPTIONS = ("glue_dir", "checkpoint", "learning_rate", "epochs")


def runs(options):
    """Every run's spec, the two sides of a seed one after the other."""
    for task in options["tasks"]:
        for seed in range(options["first_seed"], options["first_seed"] + options["seeds"]):
            for side in ("keras_bert", "sentence_transformers"):
                yield {"side": side, "task": task, "seed": seed, **TASKS[task],
                       **{k: options[k] for k in RUN_OPTIONS}}  # fmt: skip


def summarise(results):
    """Each task's means by side, before and after training, and keras_bert's mean minus
    sentence-transformers' (points)."""
    summary = {}
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task]
        metrics = [k for k in mine[0] if k in ("spearman", f"recall@{TOP}", f"mrr@{TOP}")]
        entry = {}
        for metric in metrics:
            means = {side: statistics.mean(r[metric] for r in mine if r["side"] == side)
                     for side in dict.fromkeys(r["side"] for r in mine)}  # fmt: skip
            before = {side: statistics.mean(r["before"][metric] for r in mine
                                            if r["side"] == side) for side in means}  # fmt: skip
            entry[metric] = {**{s: round(m, 4) for s, m in means.items()},
                             "before": {s: round(m, 4) for s, m in before.items()}}  # fmt: skip
            if len(means) == 2:
                entry[metric]["difference_points"] = round(
                    100 * (means["keras_bert"] - means["sentence_transformers"]), 2)
        summary[task] = entry
    return summary


def check(options):
    """Refuses options a run would fail on, in one line each, before any run starts."""
    unknown = sorted(set(options["tasks"]) - set(TASKS))
    if unknown:
        raise app.UsageError(f"--embed_tasks: {', '.join(unknown)} unknown; give sts and/or "
                             "retrieval")  # fmt: skip
    needed = {"sts": ("STS-B/train.tsv", "STS-B/dev.tsv"), "retrieval": ("QNLI/dev.tsv",)}
    for task in options["tasks"]:
        for name in needed[task]:
            if not options["glue_dir"] or not os.path.isfile(
                    os.path.join(options["glue_dir"], name)):  # fmt: skip
                raise app.UsageError(f"--bench=embed_learning needs --glue_dir, the GLUE "
                                     f"folder holding {name} (task {task})")  # fmt: skip


def main(options):
    """Runs every setting (`options`: RUN_OPTIONS, tasks, seeds, first_seed) and returns the
    report; each run's result goes to stderr as it ends."""
    check(options)
    results = run_each(runs(options), "benchmarks.embedding_learning")
    return {"bench": "embed_learning", "summary": summarise(results), "runs": results}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    train = train_keras if spec["side"] == "keras_bert" else train_sentence_transformers
    print(json.dumps(train(spec)))
