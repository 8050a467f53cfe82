"""The PyTorch side of benchmarks/peers.py (a worker process; see that module): Hugging Face
transformers' BERT (its default attention) and its fast (Rust) tokenizer. Imports no TensorFlow.
"""

import contextlib
import os

from benchmarks import peer_worker
from benchmarks.peer_worker import (
    FINETUNE_STEPS_PER_STEP_FLAG,
    PRODUCTS_CALLS,
    SERVING_SENTENCES,
    checkpoint_folder,
    encoder_products,
    products_widths,
    sst2,
)

CHANNEL = peer_worker.protocol_channel()

import numpy as np  # noqa: E402  (after the channel: nothing may print to the real stdout)
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

INFO = {}  # what the jobs' set-up learnt, reported with the versions


# Fine-tuning runs on the GPU where there is one (as keras_bert's side does), else the CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def autocast(precision, device="cpu"):
    if precision == "bfloat16":
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def encoder_jobs(opts):
    config = transformers.BertConfig()  # BERT-base
    batch, seq, steps = opts["batch_size"], opts["seq_length"], opts["steps"]
    rng = np.random.default_rng(0)
    ids = torch.tensor(rng.integers(1000, 30000, (batch, seq)))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    y = torch.tensor(rng.integers(0, 2, batch))
    tokens = batch * seq
    encoder = transformers.BertModel(config).eval()
    INFO["attention"] = encoder.config._attn_implementation
    classifier = transformers.BertForSequenceClassification(config).train()
    optimizer = torch.optim.AdamW(classifier.parameters(), lr=1e-5, weight_decay=0.01)
    jobs = {}
    for precision in opts["precisions"]:

        def run_forward(precision=precision):
            with torch.inference_mode(), autocast(precision):
                for _ in range(steps):
                    encoder(input_ids=ids, attention_mask=mask, token_type_ids=types)
            return steps * tokens, "tokens"

        def run_train(precision=precision):
            for _ in range(steps):
                with autocast(precision):
                    loss = classifier(input_ids=ids, attention_mask=mask, token_type_ids=types,
                                      labels=y).loss  # fmt: skip
                loss.backward()
                torch.nn.utils.clip_grad_norm_(classifier.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
            return steps * tokens, "tokens"

        jobs[f"{precision}/forward"] = run_forward
        jobs[f"{precision}/train_step"] = run_train
    return jobs


def fast_tokenizer(vocab_file):
    return transformers.BertTokenizerFast(vocab_file, do_lower_case=True)


def tokenizer_jobs(opts):
    tokenizer = fast_tokenizer(os.path.join(checkpoint_folder(opts), "vocab.txt"))
    sentences, _ = sst2("dev")
    size = opts["batch_size"]
    batches = [sentences[i : i + size] for i in range(0, len(sentences), size)]

    def run():
        for _ in range(opts["steps"]):
            for b in batches:
                tokenizer(b, padding=True, truncation=True, max_length=128, return_tensors="np")
        return opts["steps"] * len(sentences), "sentences"

    ids = [row for b in batches for row in tokenizer(b, truncation=True, max_length=128)["input_ids"]]
    np.save(os.path.join(opts["scratch"], "pytorch_ids.npy"), np.array(ids, dtype=object),
            allow_pickle=True)  # fmt: skip
    return {"tokenize_and_pack": run}


def serving_jobs(opts):
    """The run's weights (written by peer_tf.prepare_serving) in BertForSequenceClassification."""
    folder = opts["scratch"]
    tokenizer = fast_tokenizer(os.path.join(folder, "vocab.txt"))
    model = transformers.BertForSequenceClassification.from_pretrained(
        os.path.join(folder, "hf"), num_labels=2).eval()
    head = np.load(os.path.join(folder, "head.npz"))
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(head["kernel"].T))
        model.classifier.bias.copy_(torch.from_numpy(head["bias"]))
    sentences, _ = sst2("dev")

    def classify(texts, precision):
        with torch.inference_mode(), autocast(precision):
            inputs = tokenizer(texts, padding=True, truncation=True, max_length=128,
                               return_tensors="pt")  # fmt: skip
            return model(**inputs).logits.float().argmax(-1).numpy()

    jobs = {}
    for size, count in SERVING_SENTENCES.items():
        calls = [sentences[i : i + size] for i in range(0, count, size)]
        for precision in opts["precisions"]:

            def run(calls=calls, count=count, precision=precision):
                latencies = peer_worker.per_call(calls, lambda c: classify(c, precision))
                return count, "sentences", latencies

            jobs[f"batch_{size}@{precision}"] = run
    labels = np.concatenate([classify(sentences[i : i + 32], "float32")
                             for i in range(0, len(sentences), 32)])  # fmt: skip
    np.save(os.path.join(folder, "pytorch_labels.npy"), labels)
    return jobs


def embed_jobs(opts):
    """sentence-transformers' encode: strings to vectors, as the checkpoint's files say."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(checkpoint_folder(opts), device="cpu")
    jobs, info = peer_worker.embed_jobs_on(
        lambda texts, size: model.encode(texts, batch_size=size, convert_to_numpy=True),
        opts, "pytorch")  # fmt: skip
    INFO.update(info)
    return jobs


def finetune_jobs(opts):
    folder = checkpoint_folder(opts)
    tokenizer = fast_tokenizer(os.path.join(folder, "vocab.txt"))
    model = transformers.BertForSequenceClassification.from_pretrained(
        folder, num_labels=2, attn_implementation="sdpa").to(DEVICE)
    model.train()
    INFO["finetune_device"] = DEVICE
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 0, 10**6)
    sentences, labels = sst2("train")
    size = opts["batch_size"]
    count = size * opts["steps"] * FINETUNE_STEPS_PER_STEP_FLAG
    batches = [(sentences[i : i + size], torch.tensor(labels[i : i + size]).to(DEVICE))
               for i in range(0, count, size)]  # fmt: skip
    jobs = {}
    for precision in opts["precisions"]:

        def run(precision=precision):
            for texts, y in batches:  # dynamic padding: each batch to its longest sentence
                inputs = tokenizer(texts, padding=True, truncation=True, max_length=128,
                                   return_tensors="pt").to(DEVICE)  # fmt: skip
                with autocast(precision, DEVICE):
                    loss = model(**inputs, labels=y).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            return count, "examples"

        jobs[f"finetune@{precision}"] = run
    return jobs


def products_jobs(opts):
    """A batch-1 call's dense products alone, in each of --precisions, as
    torch.nn.functional.linear (with bfloat16 weights, as autocast hands it them)."""
    x, layers = encoder_products(products_widths(opts), opts["batch_size"],
                                 np.random.default_rng(0))

    def job(dtype):
        inputs = torch.from_numpy(x).to(dtype)
        weights = [(torch.from_numpy(w.T.copy()).to(dtype), torch.from_numpy(b).to(dtype))
                   for w, b in layers]  # fmt: skip

        def run():
            with torch.inference_mode():
                for _ in range(PRODUCTS_CALLS):
                    y = inputs
                    for w, b in weights:
                        y = torch.nn.functional.linear(y, w, b)
            return PRODUCTS_CALLS, "calls"

        return run

    return {f"{precision}/products": job(getattr(torch, precision))
            for precision in opts["precisions"]}  # fmt: skip


def main():
    opts = peer_worker.options()
    if opts.get("threads"):
        torch.set_num_threads(opts["threads"])
    make = {"encoder": encoder_jobs, "tokenizer": tokenizer_jobs, "serving": serving_jobs,
            "finetune": finetune_jobs, "products": products_jobs,
            "embed": embed_jobs}[opts["bench"]]  # fmt: skip
    jobs = make(opts)
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "threads": torch.get_num_threads(),
            **INFO}  # fmt: skip
    peer_worker.serve(jobs, info, CHANNEL)


if __name__ == "__main__":
    main()
