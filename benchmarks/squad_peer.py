r"""SQuAD fine-tuning with PyTorch and Hugging Face transformers, the peer that tasks/squad.py's
results are checked against; prints its scores as JSON.

    python -m benchmarks.squad_peer --train_file=squad-v2-train.json \
        --predict_file=squad-v2-dev.json --version_2_with_negative --output_dir=runs/squad-v2-peer

Shares nothing with keras_bert but the official metrics (tasks/squad_metrics.py): its windows
come from the fast tokenizer's overflowing tokens, with run_squad.py's settings (the question
cut to --max_query_length tokens, each window starting --doc_stride tokens after the last),
and its answers from the usual post-processing (the best span over all windows, n-best starts
and ends, at most --max_answer_length tokens; for v2.0 "no answer" when the lowest [CLS] score
of the question's windows beats the best span by more than the threshold). The recipe is the
README's: AdamW (weight decay 0.01 off LayerNorm and biases), 10% warmup then linear decay,
clipping at norm 1.0, bfloat16 autocast, batches padded to their longest window.
"""

import json
import os

import numpy as np
import torch
import tqdm
import transformers
from absl import app, flags, logging
from transformers import BertForQuestionAnswering, BertTokenizerFast

# After PyTorch's modules: `tasks` imports TensorFlow, and PyTorch's lazy imports crash when
# they come after it.
from tasks import default_checkpoint, runs, squad_metrics  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("train_file", None, "SQuAD JSON to train on.", required=True)
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict and score.", required=True)
flags.DEFINE_string("init_checkpoint", None, "Hugging Face BERT folder. Default: MiniLM.")
flags.DEFINE_string("output_dir", None, "Where predictions.json and null_odds.json go.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (an uncased vocabulary).")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_integer("num_train_epochs", 2, "Passes over the training windows.")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("train_batch_size", 32, "Windows per training step.")
flags.DEFINE_integer("max_seq_length", 384, "Tokens per window.")
flags.DEFINE_integer("doc_stride", 128, "Passage tokens between the starts of two windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept.")
flags.DEFINE_integer("n_best_size", 20, "Starts and ends considered per window.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")
flags.DEFINE_enum("precision", "bfloat16", ["float32", "bfloat16"], "Autocast precision.")
flags.DEFINE_integer("seed", 0, "Seed of the head's initialisation and the batch order.")


def questions(path):
    """(id, question, context, (answer start, end) or None) of each question in a SQuAD file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    for article in data:
        for paragraph in article["paragraphs"]:
            for q in paragraph["qas"]:
                answers = [] if q.get("is_impossible") else q.get("answers", [])
                span = None
                if answers:
                    start = answers[0]["answer_start"]
                    span = (start, start + len(answers[0]["text"]))
                yield q["id"], q["question"].lstrip(), paragraph["context"], span


def windows(tokenizer, question, context):
    """The windows of one question: the tokenizer's encoding with overflowing windows."""
    cut = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
    if len(cut["input_ids"]) > FLAGS.max_query_length:
        question = question[: cut["offset_mapping"][FLAGS.max_query_length - 1][1]]
        cut["input_ids"] = cut["input_ids"][: FLAGS.max_query_length]
    room = FLAGS.max_seq_length - len(cut["input_ids"]) - 3
    return tokenizer(question, context, truncation="only_second",
                     max_length=FLAGS.max_seq_length, stride=max(room - FLAGS.doc_stride, 0),
                     return_overflowing_tokens=True, return_offsets_mapping=True)  # fmt: skip


def passage_offsets(encoding, i):
    """Character offsets of window i's passage tokens; None elsewhere."""
    ids = encoding.sequence_ids(i)
    return [o if s == 1 else None for o, s in zip(encoding["offset_mapping"][i], ids)]


def targets(offsets, span):
    """Token positions of the answer in one window; (0, 0), [CLS], when it is not inside."""
    inside = [t for t, o in enumerate(offsets) if o is not None]
    if span is None or offsets[inside[0]][0] > span[0] or offsets[inside[-1]][1] < span[1]:
        return 0, 0
    start = max(t for t in inside if offsets[t][0] <= span[0])
    end = min(t for t in inside if offsets[t][1] >= span[1])
    return start, end


def training_windows(tokenizer):
    rows = []
    for _, question, context, span in questions(FLAGS.train_file):
        encoding = windows(tokenizer, question, context)
        for i, ids in enumerate(encoding["input_ids"]):
            start, end = targets(passage_offsets(encoding, i), span)
            rows.append((ids, encoding["token_type_ids"][i], start, end))
    return rows


def batch_tensors(rows):
    """Pads a batch of (ids, types, ...) rows to their longest."""
    length = max(len(r[0]) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for j, r in enumerate(rows):
        ids[j, : len(r[0])], types[j, : len(r[1])], mask[j, : len(r[0])] = (
            torch.tensor(r[0]), torch.tensor(r[1]), 1)  # fmt: skip
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def batches(rows, rng):
    """Shuffled batches, each of windows of similar length (runs of 100 batches sorted)."""
    order = rng.permutation(len(rows))
    size, run = FLAGS.train_batch_size, 100 * FLAGS.train_batch_size
    chunks = []
    for k in range(0, len(order), run):
        part = sorted(order[k : k + run], key=lambda i: len(rows[i][0]))
        chunks += [part[i : i + size] for i in range(0, len(part), size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


def train(model, rows):
    rng = np.random.default_rng(FLAGS.seed)
    steps = FLAGS.num_train_epochs * int(np.ceil(len(rows) / FLAGS.train_batch_size))
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters() if not any(p is q for q in no_decay)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=FLAGS.learning_rate)  # fmt: skip
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    model.train()
    with tqdm.tqdm(total=steps, desc="training", unit="step") as bar:
        for _ in range(FLAGS.num_train_epochs):
            for chunk in batches(rows, rng):
                inputs = batch_tensors([rows[i] for i in chunk])
                inputs["start_positions"] = torch.tensor([rows[i][2] for i in chunk])
                inputs["end_positions"] = torch.tensor([rows[i][3] for i in chunk])
                with autocast():
                    loss = model(**inputs).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                bar.set_postfix(loss=f"{loss.item():.3f}")
                bar.update()


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=FLAGS.precision == "bfloat16")


def best_answer(context, scored_windows):
    """The best span over a question's windows and its null odds (lowest [CLS] score minus the
    best span's score)."""
    best, null = (-np.inf, ""), min(s[0] + e[0] for s, e, _ in scored_windows)
    for start_logits, end_logits, offsets in scored_windows:
        starts = np.argsort(-start_logits)[: FLAGS.n_best_size]
        ends = np.argsort(-end_logits)[: FLAGS.n_best_size]
        for s in starts:
            for e in ends:
                if (offsets[s] is None or offsets[e] is None or e < s
                        or e - s + 1 > FLAGS.max_answer_length):  # fmt: skip
                    continue
                score = start_logits[s] + end_logits[e]
                if score > best[0]:
                    best = (score, context[offsets[s][0] : offsets[e][1]])
    return best[1], float(null - best[0])


def predict(model, tokenizer):
    """Each dev question's best span (never empty when one exists) and its null odds."""
    examples, rows = list(questions(FLAGS.predict_file)), []
    for q, (_, question, context, _) in enumerate(examples):
        encoding = windows(tokenizer, question, context)
        for i, ids in enumerate(encoding["input_ids"]):
            rows.append((ids, encoding["token_type_ids"][i], q, passage_offsets(encoding, i)))
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    scored = [[] for _ in examples]
    model.eval()
    for k in tqdm.trange(0, len(order), 64, desc="predicting", unit="batch"):
        chunk = [rows[i] for i in order[k : k + 64]]
        with torch.inference_mode(), autocast():
            out = model(**batch_tensors(chunk))
        for j, r in enumerate(chunk):
            n = len(r[0])
            scored[r[2]].append((out.start_logits[j, :n].float().numpy(),
                                 out.end_logits[j, :n].float().numpy(), r[3]))  # fmt: skip
    answers, odds = {}, {}
    for (qid, _, context, _), windows_of in zip(examples, scored):
        answers[qid], odds[qid] = best_answer(context, windows_of)
    return answers, odds


def main(argv):
    del argv
    torch.manual_seed(FLAGS.seed)
    folder = FLAGS.init_checkpoint or default_checkpoint()
    tokenizer = BertTokenizerFast(os.path.join(folder, "vocab.txt"),
                                  do_lower_case=FLAGS.do_lower_case)  # fmt: skip
    model = BertForQuestionAnswering.from_pretrained(folder)
    rows = training_windows(tokenizer)
    logging.info("%d training windows", len(rows))
    train(model, rows)
    answers, odds = predict(model, tokenizer)
    with open(FLAGS.predict_file, encoding="utf-8") as f:
        data = json.load(f)["data"]
    report = {"peer": f"torch {torch.__version__}, transformers {transformers.__version__}",
              "training_windows": len(rows),
              "answers_forced": squad_metrics.evaluate(data, answers)}  # fmt: skip
    if FLAGS.version_2_with_negative:
        report["threshold_0"] = squad_metrics.evaluate(data, answers, odds, 0.0)
    if FLAGS.output_dir:
        os.makedirs(FLAGS.output_dir, exist_ok=True)
        runs.write_json(os.path.join(FLAGS.output_dir, "predictions.json"), answers)
        runs.write_json(os.path.join(FLAGS.output_dir, "null_odds.json"), odds)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    app.run(main)
