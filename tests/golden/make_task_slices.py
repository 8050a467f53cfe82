"""Copies the small slices of ../shared/data that the SQuAD and NER tests use into tests/data.

Run from the repository root: python tests/golden/make_task_slices.py [--shared ../shared/data]
"""

import argparse
import json
import os


def squad_slice(path, article, paragraphs, out):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    chosen = dict(
        data["data"][article], paragraphs=data["data"][article]["paragraphs"][:paragraphs]
    )
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"version": data["version"], "data": [chosen]}, f, ensure_ascii=False, indent=1)


def conll_slice(path, sentences, out):
    """The first `sentences` sentences of a CoNLL file, -DOCSTART- lines included."""
    lines, count = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            if (
                not line.strip()
                and lines[-2:-1]
                and lines[-2].strip()
                and "-DOCSTART-" not in lines[-2]
            ):
                count += 1
                if count == sentences:
                    break
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", default="../shared/data")
    parser.add_argument("--out", default="tests/data")
    args = parser.parse_args()
    squad, conll = os.path.join(args.shared, "squad"), os.path.join(args.shared, "conll2003")
    os.makedirs(os.path.join(args.out, "squad"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "conll"), exist_ok=True)
    v1, v2 = f"{squad}/dev-v1.1.json", f"{squad}/v2_partial_cs224n/dev-v2.0.cs224n-half.json"
    for source, article, paragraphs, name in (
        (v1, 0, 6, "train-v1.1.json"),
        (v1, 24, 3, "dev-v1.1.json"),
        (v2, 0, 6, "train-v2.0.json"),
        (v2, 8, 3, "dev-v2.0.json"),
    ):
        squad_slice(source, article, paragraphs, os.path.join(args.out, "squad", name))
    for source, sentences, name in (
        ("train.txt", 120, "train.txt"),
        ("valid.txt", 40, "valid.txt"),
        ("original_iob1/eng.train", 40, "eng.train"),
    ):
        conll_slice(os.path.join(conll, source), sentences, os.path.join(args.out, "conll", name))


if __name__ == "__main__":
    main()
