"""The worker end of benchmarks/peers.py: what both sides share (imports neither framework).

A side's module calls `serve(jobs, info)`: it writes `info` plus the job names as one JSON line,
then for each job name read from stdin runs that job and writes its report as one JSON line.
A job is a function returning (items, unit[, latencies]); the time it takes is measured here.
"""

import json
import os
import sys
import time


def protocol_channel():
    """The real stdout for the reports; fd 1 goes to stderr so that no library's print (a
    progress bar, a banner) can corrupt the protocol."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return channel


def serve(jobs, info, channel):
    channel.write(json.dumps({**info, "jobs": list(jobs)}) + "\n")
    for line in sys.stdin:
        job = line.strip()
        start = time.perf_counter()
        items, unit, *latencies = jobs[job]()
        seconds = time.perf_counter() - start
        report = {"seconds": seconds, "items": items, "unit": unit}
        if latencies:
            report["latencies"] = latencies[0]
        channel.write(json.dumps(report) + "\n")


def options():
    return json.loads(sys.argv[1])


def sst2(split):
    """(sentences, labels) of the SST-2 sample bundled in tasks/data ("train" or "dev")."""
    path = os.path.join(os.path.dirname(__file__), "..", "tasks", "data", "SST-2", f"{split}.tsv")
    with open(path, encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:]]
    return [sentence for sentence, _ in rows], [int(label) for _, label in rows]


def embed_jobs_on(embed, opts, side):
    """The embed bench's jobs on one side, `embed(texts, batch_size)` -> float32 vectors:
    embed_batch_N strings to vectors, N sentences a call; the side's vectors of the first 256
    SST-2 dev sentences saved for the agreement check; and with --glue_dir, the side's STS-B
    dev Spearman correlation of cosine similarity with the gold scores, put in `info`."""
    import numpy as np

    sentences, _ = sst2("dev")
    np.save(os.path.join(opts["scratch"], f"{side}_vectors.npy"), embed(sentences[:256], 32))
    info = {}
    if opts.get("glue_dir"):
        info["stsb_dev_spearman"] = stsb_spearman(opts["glue_dir"], embed)
    jobs = {}
    for size, count in SERVING_SENTENCES.items():
        calls = [sentences[i : i + size] for i in range(0, count, size)]

        def run(calls=calls, count=count, size=size):
            return count, "sentences", per_call(calls, lambda c: embed(c, size))

        jobs[f"embed_batch_{size}"] = run
    return jobs, info


def stsb_spearman(glue_dir, embed):
    """Spearman's correlation, over STS-B dev's pairs, of the cosine similarity of the two
    sentences' vectors with the gold score (what sentence-transformers reports)."""
    import csv

    import numpy as np

    from tasks.glue_metrics import spearman

    with open(os.path.join(glue_dir, "STS-B", "dev.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    a, b = (embed([row[key] for row in rows], 32) for key in ("sentence1", "sentence2"))
    a, b = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (a, b))
    return spearman((a * b).sum(1), np.array([float(row["score"]) for row in rows]))


def per_call(calls, run):
    """Runs `run(call)` for each call; returns the seconds each took."""
    latencies = []
    for call in calls:
        start = time.perf_counter()
        run(call)
        latencies.append(time.perf_counter() - start)
    return latencies


# The serving and fine-tuning workloads, the same on both sides.
SERVING_SENTENCES = {1: 64, 32: 256}  # per timed job, by batch size
FINETUNE_STEPS_PER_STEP_FLAG = 10


def checkpoint_folder(opts):
    """--checkpoint, or the MiniLM checkpoint every binary defaults to (`tasks.default_checkpoint`;
    the tasks package imports neither framework)."""
    from tasks import default_checkpoint

    return opts.get("checkpoint") or default_checkpoint("--checkpoint")


def checkpoint_config(folder):
    """The path of the config in a checkpoint folder: Hugging Face's config.json or a Google
    release's bert_config.json; None if it has neither."""
    paths = (os.path.join(folder, name) for name in ("config.json", "bert_config.json"))
    return next((path for path in paths if os.path.isfile(path)), None)


# BERT-base's widths and blocks (keras_bert's and transformers' BertConfig defaults): the model
# of the encoder bench, for `peers --bench=products --widths=base`.
BERT_BASE_WIDTHS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12}


def products_widths(opts):
    """The widths and blocks the products bench runs: BERT-base's (--widths=base) or those of
    the checkpoint's config.json, or a Google release's bert_config.json."""
    if opts.get("widths") == "base":
        return BERT_BASE_WIDTHS
    folder = checkpoint_folder(opts)
    path = checkpoint_config(folder)
    if path is None:
        raise ValueError(f"{folder} holds no config.json or bert_config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def encoder_products(config, rows, rng):
    """(input, [(weight, bias), ...]), float32, random: the dense products of one call of an
    encoder of `config`'s widths and blocks (`products_widths`) on a sentence of `rows` tokens:
    each block's query, key, value, output, up and down, to be run chained in this order, each
    fed the previous one's output."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    shapes = [(hidden, hidden)] * 4 + [(hidden, inner), (inner, hidden)]
    layers = [(rng.standard_normal(shape).astype("float32") * 0.05,
               rng.standard_normal(shape[1]).astype("float32") * 0.05)
              for _ in range(config["num_hidden_layers"]) for shape in shapes]  # fmt: skip
    return rng.standard_normal((rows, hidden)).astype("float32"), layers


PRODUCTS_CALLS = 50  # per timed job
