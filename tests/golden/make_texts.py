"""Copies the small slices of ../shared/data that the tokenizer tests use into tests/data.

Run from the repository root: python tests/golden/make_texts.py [--shared ../shared/data]
"""

import argparse
import json
import os

EDGE_CASES = [
    "",
    "   ",
    "Hello, World!",
    "Café déjà vu, naïve Ångström’s “quotes”",
    "中文字符测试 and 日本語のテキスト, 한국어",
    "emoji 😀 👍🏽 🇫🇷 test",
    "control\x00chars\x07 and\ttabs\u200b zero\u00adwidth",
    "a" * 100,
    "a" * 101,
    "supercalifragilisticexpialidocious " * 3,
    "straße ﬁne ＦＵＬＬ ﾃｽﾄ ᵃ ² ½",
    "İstanbul ΟΔΟΣ σ",
    "don't stop-believing... (really) [ok] {x} $5.00 @home #tag",
    "[CLS] [MASK] [SEP] are split like any text",
    "x\ufffdy private\ue000use",
    "no\u00a0break\u3000ideographic\u2009thin spaces",
    "line\r\nbreaks\nand\rreturns",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", default="../shared/data")
    parser.add_argument("--out", default="tests/data/tokenizer_texts.json")
    args = parser.parse_args()
    with open(os.path.join(args.shared, "SST-2/dev.tsv"), encoding="utf-8") as f:
        sst2 = [line.split("\t")[0] for line in f.read().splitlines()[1:201]]
    with open(os.path.join(args.shared, "squad/dev-v1.1.json"), encoding="utf-8") as f:
        articles = json.load(f)["data"]
    paragraphs = [p for a in articles[:6] for p in a["paragraphs"][:3]]
    squad = [p["context"] for p in paragraphs] + [
        q["question"] for p in paragraphs for q in p["qas"][:2]
    ]
    conll, words = [], []
    with open(os.path.join(args.shared, "conll2003/valid.txt"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("-DOCSTART-"):
                words.append(line.split()[0])
            elif words:
                conll.append(" ".join(words))
                words = []
            if len(conll) == 150:
                break
    texts = {"sst2": sst2, "squad": squad, "conll": conll, "edge_cases": EDGE_CASES}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False, indent=1)
    print({k: len(v) for k, v in texts.items()})


if __name__ == "__main__":
    main()
