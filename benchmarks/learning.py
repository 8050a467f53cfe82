"""What fine-tuning learns, keras_bert against PyTorch transformers on the same data, as JSON.

    pip install -e '.[bench]'
    python -m benchmarks.peers --bench=learning --glue_dir=DIR [--task=SST-2 --sizes=512,2000
        --seeds=3 --recipes=plain,library --precisions=float32,bfloat16 --batch_size=16]

Each run fine-tunes MiniLM (or --checkpoint) on the last N training examples of a GLUE task
for --epochs, in a process of its own, and scores the whole dev set. Both sides of a seed see
the same examples in the same order and start from the same classifier head (a truncated
normal, stddev 0.02, drawn from the seed), so that what differs is the implementation and its
own dropout draws, not the luck of the order: on 512 SST-2 sentences that luck alone moved
dev accuracy by more than ten points (the classes' share of the last batches sets how far the
logits lean to one class).

Recipes, the same on both sides:
  plain    AdamW(learning_rate, weight decay 0.01 on every weight), a constant rate:
           keras.optimizers.AdamW on our side, torch.optim.AdamW on PyTorch's, each with its
           defaults. Keras's adds epsilon (1e-7) to sqrt(v) before the bias correction,
           PyTorch's (1e-8) after: not the same update.
  plain_reference
           plain, with keras_bert.AdamW(epsilon=1e-8, no_decay=()) on our side: PyTorch's
           update exactly, so that only the implementations differ.
  library  keras_bert's `compile()`: AdamW (epsilon 1e-6; no decay on LayerNorm and bias
           weights), warmup over 10% of the steps then linear decay to 0, global-norm clipping
           at 1.0; on PyTorch, torch.optim.AdamW with those groups,
           get_linear_schedule_with_warmup and clip_grad_norm_.
Precisions: float32; bfloat16 is Keras's mixed_bfloat16 against torch.autocast(bfloat16).

The report lists every run (side, N, seed, recipe, precision, accuracy, F1, seconds) and, for
each setting, both sides' means and our mean minus PyTorch's.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import app

HEAD_STDDEV = 0.02
SEQUENCE_LENGTH = 128


def read_split(glue_dir, task, split):
    """(texts, labels) of a GLUE split: texts a list of strings, or of (a, b) pairs."""
    from tasks import glue

    path = os.path.join(glue_dir, task, f"{split}.tsv")  # `check` made sure it is there
    data = glue.read_tsv(path, glue.get_task(task), True)
    columns = list(data.texts.values())
    texts = columns[0] if len(columns) == 1 else list(zip(*columns))
    return list(texts), np.asarray(data.labels, "int64")


def training_set(run):
    """The run's training examples, in the order both sides train on them."""
    texts, labels = read_split(run["glue_dir"], run["task"], "train")
    if run["size"] != "all":
        texts, labels = texts[-int(run["size"]):], labels[-int(run["size"]):]
    order = np.random.default_rng(run["seed"]).permutation(len(texts))
    return [texts[i] for i in order], labels[order]


def head_weights(run, hidden, classes):
    """The classifier head both sides start from: (hidden, classes) kernel, zero bias."""
    rng = np.random.default_rng(10_000 + run["seed"])
    kernel = rng.standard_normal((hidden, classes))
    while (outside := np.abs(kernel) > 2).any():  # truncated at two stddevs, as Keras's
        kernel[outside] = rng.standard_normal(outside.sum())
    return (kernel * HEAD_STDDEV).astype("float32"), np.zeros(classes, "float32")


def scores(logits, labels):
    predicted = np.argmax(logits, axis=-1)
    true_positive = np.sum((predicted == 1) & (labels == 1))
    f1 = 2 * true_positive / max(np.sum(predicted == 1) + np.sum(labels == 1), 1)
    return {"accuracy": float(np.mean(predicted == labels)), "f1": float(f1)}


def steps_of(run, count):
    return int(np.ceil(count / run["batch_size"])) * run["epochs"]


def train_keras(run):
    import keras

    import keras_bert

    keras.utils.set_random_seed(run["seed"])
    if run["precision"] == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    texts, labels = training_set(run)
    pairs = isinstance(texts[0], tuple)
    model = keras_bert.BertClassifier.from_checkpoint(
        run["checkpoint"], num_classes=2, sequence_length=SEQUENCE_LENGTH,
        num_segments=2 if pairs else 1)  # fmt: skip
    kernel, bias = head_weights(run, model.encoder.config.hidden_size, 2)
    model.head.dense.set_weights([kernel, bias])
    if run["recipe"] == "plain":
        model.compile(optimizer=keras.optimizers.AdamW(run["learning_rate"], weight_decay=0.01))
    elif run["recipe"] == "plain_reference":
        model.compile(optimizer=keras_bert.AdamW(run["learning_rate"], weight_decay=0.01,
                                                 epsilon=1e-8, no_decay=()))  # fmt: skip
    else:
        model.compile(learning_rate=run["learning_rate"])
    x = tuple(map(list, zip(*texts))) if pairs else texts
    model.fit(x, labels, batch_size=run["batch_size"], epochs=run["epochs"], shuffle=False,
              verbose=0)  # fmt: skip
    dev_texts, dev_labels = read_split(run["glue_dir"], run["task"], "dev")
    dev_x = tuple(map(list, zip(*dev_texts))) if pairs else dev_texts
    return scores(model.predict(dev_x, batch_size=64, verbose=0), dev_labels)


def train_torch(run):
    import torch
    import transformers

    torch.manual_seed(run["seed"])
    texts, labels = training_set(run)
    tokenizer = transformers.AutoTokenizer.from_pretrained(run["checkpoint"])
    model = transformers.BertForSequenceClassification.from_pretrained(run["checkpoint"],
                                                                       num_labels=2)
    kernel, bias = head_weights(run, model.config.hidden_size, 2)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(kernel.T.copy()))
        model.classifier.bias.copy_(torch.from_numpy(bias))
    steps = steps_of(run, len(texts))
    if run["recipe"] in ("plain", "plain_reference"):
        optimizer = torch.optim.AdamW(model.parameters(), lr=run["learning_rate"],
                                      weight_decay=0.01)  # fmt: skip
        schedule = None
    else:
        no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or "bias" in n]
        decay = [p for p in model.parameters() if all(p is not q for q in no_decay)]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                       {"params": no_decay, "weight_decay": 0.0}],
                                      lr=run["learning_rate"], eps=1e-6)  # fmt: skip
        schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps),
                                                                 steps)  # fmt: skip

    def encode(batch):
        first = [t[0] if isinstance(t, tuple) else t for t in batch]
        second = [t[1] for t in batch] if isinstance(batch[0], tuple) else None
        return tokenizer(first, second, padding=True, truncation=True,
                         max_length=SEQUENCE_LENGTH, return_tensors="pt")  # fmt: skip

    autocast = torch.autocast("cpu", dtype=torch.bfloat16,
                              enabled=run["precision"] == "bfloat16")  # fmt: skip
    model.train()
    size = run["batch_size"]
    for step in range(steps):
        start = step * size % len(texts)
        batch = slice(start, start + size)
        with autocast:
            loss = model(**encode(texts[batch]), labels=torch.from_numpy(labels[batch])).loss
        optimizer.zero_grad()
        loss.backward()
        if schedule is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if schedule is not None:
            schedule.step()
    model.eval()
    dev_texts, dev_labels = read_split(run["glue_dir"], run["task"], "dev")
    logits = []
    with torch.no_grad(), autocast:
        for i in range(0, len(dev_texts), 64):
            logits.append(model(**encode(dev_texts[i : i + 64])).logits.float().numpy())
    return scores(np.concatenate(logits), dev_labels)


def runs(options):
    """Every run's spec, the two sides of a seed one after the other."""
    for size in options["sizes"]:
        for recipe in options["recipes"]:
            for precision in options["precisions"]:
                for seed in range(options["first_seed"], options["first_seed"] + options["seeds"]):
                    for side in ("keras_bert", "pytorch"):
                        yield {"side": side, "size": size, "seed": seed, "recipe": recipe,
                               "precision": precision,
                               **{k: options[k] for k in RUN_OPTIONS}}  # fmt: skip


RECIPES = ("plain", "plain_reference", "library")

# What every run of a report shares.
RUN_OPTIONS = ("task", "glue_dir", "checkpoint", "learning_rate", "batch_size", "epochs")


def run_in_process(run, module="benchmarks.learning"):
    """One run of `module`'s in a fresh Python process (its own seeds, threads and dtype
    policy): the module's own main reads the run's spec and prints its scores as JSON."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", module, json.dumps(run)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    if result.returncode:
        raise RuntimeError(f"{run['side']} run failed:\n{result.stderr[-3000:]}")
    scored = json.loads(result.stdout.strip().splitlines()[-1])
    kept = {k: v for k, v in run.items() if k not in ("glue_dir", "checkpoint")}
    return {**kept, **scored, "seconds": round(time.perf_counter() - start, 1)}


def summarise(results):
    """Each setting's means by side, and keras_bert's mean minus PyTorch's (points)."""
    settings = {}
    for r in results:
        key = f"{r['task']} N={r['size']} {r['recipe']} {r['precision']} lr={r['learning_rate']:g}"
        settings.setdefault(key, {}).setdefault(r["side"], []).append(r)
    summary = {}
    for key, sides in settings.items():
        entry = {}
        for metric in ("accuracy", "f1"):
            means = {side: statistics.mean(r[metric] for r in rs) for side, rs in sides.items()}
            entry[metric] = {side: round(m, 4) for side, m in means.items()}
            if len(means) == 2:
                entry[metric]["difference_points"] = round(
                    100 * (means["keras_bert"] - means["pytorch"]), 2)
        summary[key] = entry
    return summary


def check(options):
    """Refuses options a run would fail on, in one line each, before any run starts."""
    if not options["glue_dir"]:
        raise app.UsageError("--bench=learning needs --glue_dir, the folder holding "
                             f"{options['task']}/train.tsv and dev.tsv")  # fmt: skip
    for split in ("train", "dev"):
        if not os.path.isfile(os.path.join(options["glue_dir"], options["task"], f"{split}.tsv")):
            raise app.UsageError(f"--glue_dir={options['glue_dir']} has no "
                                 f"{options['task']}/{split}.tsv")  # fmt: skip
    unknown = set(options["recipes"]) - set(RECIPES)
    if unknown:
        raise app.UsageError(f"--recipes: {sorted(unknown)} unknown; use some of {RECIPES}")
    bad = [s for s in options["sizes"] if s != "all" and not (s.isdigit() and int(s) > 0)]
    if bad:
        raise app.UsageError(f"--sizes: {bad} are not example counts (or 'all')")


def main(options):
    """Runs every setting (`options`: RUN_OPTIONS, sizes, recipes, precisions, seeds) and
    returns the report; each run's result goes to stderr as it ends."""
    check(options)
    results = run_each(runs(options))
    return {"bench": "learning", "summary": summarise(results), "runs": results}


def run_each(specs, module="benchmarks.learning"):
    """Every run of `specs`, each in a process of its own; each result also goes to stderr as
    it ends."""
    results = []
    for run in specs:
        results.append(run_in_process(run, module))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    trained = (train_keras if spec["side"] == "keras_bert" else train_torch)(spec)
    print(json.dumps(trained))
