"""Turns plain-text documents into BERT pre-training TFRecords (masked LM + next sentence).

    python -m tasks.create_pretraining_data --input_file=corpus/*.txt --output_file=data/pretrain \\
        --vocab_file=vocab.txt --do_lower_case --max_seq_length=128 --dupe_factor=10

Takes the original create_pretraining_data.py flags under their original names. Input:
--input_format=lines is the original format (one sentence per line, a blank line between
documents); --input_format=text is prose that is not sentence-split (blank lines separate
paragraphs; each paragraph is a document, split into sentences here). Files are decoded with
--input_encoding (utf-8 by default; latin-1 for such files); with --encoding_errors=strict an
undecodable byte stops the run naming the file, with =replace it becomes U+FFFD. Windows line
endings are read as line ends. With --num_workers, files are read and tokenized in parallel, then the passes are built in
parallel. Instances are written, shuffled, round-robin across the
--num_output_shards shards `<output_file>-00000-of-0000N.tfrecord`; each shard is written under a
temporary name and renamed when complete. The same seed gives the same bytes, whatever
--num_workers is.

Schema (tf.train.Example, int64 unless said; lengths padded with 0):
  input_ids, input_mask, segment_ids: [max_seq_length]
  masked_lm_positions, masked_lm_ids: [max_predictions_per_seq]
  masked_lm_weights: float [max_predictions_per_seq], 1.0 for real predictions
  next_sentence_labels: [1], 0 = B follows A, 1 = B is random
"""

import multiprocessing
import os

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from keras_bert.text import textfiles
from keras_bert.text.tokenizer import BertTokenizer
from keras_bert.text.vocabulary import check_lower_casing
from keras_bert.training import pretraining
from tasks import check_at_least_one, check_seed, pretraining_records, pretraining_text, run_main

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Comma-separated input files or globs.")
flags.DEFINE_string("output_file", None, "Output prefix; shards get -NNNNN-of-NNNNN.tfrecord.")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the model to pre-train.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_bool("do_whole_word_mask", False, "Mask all pieces of a word together.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum packed sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked-LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Seed; the same seed gives the same output.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the input, each with different masks.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens chosen for prediction.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
flags.DEFINE_enum(
    "input_format",
    "lines",
    ["lines", "text"],
    "lines: one sentence per line, "
    "blank line between documents. text: prose; paragraphs are documents.",
)
flags.DEFINE_string("input_encoding", "utf-8", "Encoding of the input files.")
flags.DEFINE_enum(
    "encoding_errors",
    "strict",
    ["strict", "replace"],
    "What an undecodable byte does: stop with the file and offset, or become U+FFFD.",
)
flags.DEFINE_integer("num_output_shards", 1, "TFRecord shards to write.")
flags.DEFINE_integer("num_workers", 1, "Processes building instances in parallel.")


def _build(args):
    """Instances of one dupe pass over the documents (a worker's unit of work)."""
    documents, special, dupe, settings = args
    rng = np.random.default_rng([settings["seed"], dupe])
    instances = []
    for index in range(len(documents)):
        instances.extend(pretraining.instances_from_document(documents, index, special, rng,
                                                              **settings["instance"]))  # fmt: skip
    return instances


def to_example(instance, max_seq_length, max_predictions):
    features = pretraining_text.padded_features(instance, max_seq_length, max_predictions)

    def feature(values):
        if values.dtype.kind == "f":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    return tf.train.Example(features=tf.train.Features(
        feature={name: feature(values) for name, values in features.items()}))  # fmt: skip


def write_shards(instances, prefix, num_shards, max_seq_length, max_predictions):
    folder = os.path.dirname(prefix) or "."
    os.makedirs(folder, exist_ok=True)
    paths = [pretraining_records.shard_path(prefix, i, num_shards) for i in range(num_shards)]
    # Instance k goes to shard k % num_shards; one shard open at a time (all at once, 100,000
    # shards ran out of file handles).
    for shard, path in enumerate(paths):
        tmp = f"{path}.tmp-{os.getpid()}"  # pretraining_records.UNFINISHED
        try:
            with tf.io.TFRecordWriter(tmp) as writer:
                for instance in instances[shard::num_shards]:
                    example = to_example(instance, max_seq_length, max_predictions)
                    writer.write(example.SerializeToString(deterministic=True))
            os.replace(tmp, path)
        except BaseException as e:  # Ctrl-C, SIGTERM, a full disk: no half-written shard stays
            if os.path.exists(tmp):
                os.remove(tmp)
            full = isinstance(e, (OSError, tf.errors.OpError)) and textfiles.out_of_space(e)
            if not full:
                raise
            raise OSError(f"could not write {path} ({full}); make room, then run the same "
                          "command again") from None  # fmt: skip
    return paths


def _read_file(args):
    """One file's tokenized documents (a worker's unit of work in the first phase)."""
    path, vocab_file, do_lower_case, reading = args
    tokenizer = _tokenizer(vocab_file, do_lower_case)
    return pretraining_text.tokenize_documents(
        pretraining_text.read_documents(path, *reading), tokenizer)  # fmt: skip


_TOKENIZERS = {}


def _tokenizer(vocab_file, do_lower_case):
    key = (vocab_file, do_lower_case)
    if key not in _TOKENIZERS:  # once per process
        _TOKENIZERS[key] = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
    return _TOKENIZERS[key]


def _run(function, work, pool, unit):
    """Maps `function` over `work` in order (so output is deterministic), with a progress bar."""
    progress = keras.utils.Progbar(len(work), unit_name=unit)
    results = []
    for result in pool.imap(function, work) if pool else map(function, work):
        results.append(result)
        progress.add(1)
    return results


def create(files, vocab_file, do_lower_case, pool=None):
    """Reads and tokenizes the files, then builds `dupe_factor` passes of shuffled instances;
    both phases run in `pool` (a multiprocessing pool) when given."""
    reading = (FLAGS.input_format, FLAGS.input_encoding, FLAGS.encoding_errors)
    per_file = _run(
        _read_file, [(f, vocab_file, do_lower_case, reading) for f in files], pool, "file"
    )
    documents = [d for docs in per_file for d in docs]
    if not documents:
        raise ValueError(f"no text in {', '.join(files)}")
    pretraining_text.check_pairs(documents, f"--input_file={FLAGS.input_file}")
    special = pretraining.special_ids(_tokenizer(vocab_file, do_lower_case))
    settings = {"seed": FLAGS.random_seed, "instance": dict(
        max_seq_length=FLAGS.max_seq_length, short_seq_prob=FLAGS.short_seq_prob,
        masked_lm_prob=FLAGS.masked_lm_prob, max_predictions=FLAGS.max_predictions_per_seq,
        whole_word=FLAGS.do_whole_word_mask)}  # fmt: skip
    work = [(documents, special, dupe, settings) for dupe in range(FLAGS.dupe_factor)]
    instances = [i for result in _run(_build, work, pool, "pass") for i in result]
    order = np.random.default_rng(FLAGS.random_seed).permutation(len(instances))
    return [instances[i] for i in order]


def check_flags():
    """Refuses settings that could make no instance, before any text is read."""
    if FLAGS.max_seq_length < 5:
        raise app.UsageError(f"--max_seq_length={FLAGS.max_seq_length}: an instance needs at "
                             "least 5 tokens ([CLS], [SEP] twice and a token of each segment)")
    check_at_least_one(["max_predictions_per_seq", "dupe_factor", "num_output_shards",
                        "num_workers"])  # fmt: skip
    check_seed("random_seed")
    for name in ("masked_lm_prob", "short_seq_prob"):
        if not 0 <= FLAGS[name].value <= 1:
            raise app.UsageError(f"--{name} must be between 0 and 1, got {FLAGS[name].value}")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for name in ("input_file", "output_file", "vocab_file"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    check_flags()
    if os.path.isdir(FLAGS.output_file):
        raise app.UsageError(f"--output_file={FLAGS.output_file} is a folder, and the shards' "
                             "names start with it: pass a prefix inside it, such as "
                             f"{os.path.join(FLAGS.output_file, 'pretrain')}")  # fmt: skip
    textfiles.make_folder(os.path.dirname(os.path.abspath(FLAGS.output_file)),
                          f"--output_file={FLAGS.output_file}")  # fmt: skip
    pretraining_records.lock_prefix(FLAGS.output_file)
    others = pretraining_records.other_shards(FLAGS.output_file, FLAGS.num_output_shards)
    if others:  # a glob of the prefix would read both runs' shards as one data set
        raise app.UsageError(f"--output_file={FLAGS.output_file}: {others[0]} is a shard of an "
                             "earlier run with this prefix and another --num_output_shards, "
                             "which pre-training would read beside this run's: remove that "
                             "run's shards, or pass another prefix")  # fmt: skip
    for stale in pretraining_records.unfinished_shards(FLAGS.output_file):
        logging.info("removing %s, a shard a killed run left half written", stale)
        os.remove(stale)
    files = pretraining_text.input_files(FLAGS.input_file)
    tokenizer = _tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)  # a bad vocabulary fails here
    check_lower_casing(tokenizer.vocabulary, FLAGS.do_lower_case, FLAGS.vocab_file)
    if FLAGS.num_workers > 1:
        with multiprocessing.get_context("spawn").Pool(FLAGS.num_workers) as pool:
            instances = create(files, FLAGS.vocab_file, FLAGS.do_lower_case, pool)
    else:
        instances = create(files, FLAGS.vocab_file, FLAGS.do_lower_case)
    if FLAGS.num_output_shards > len(instances):
        raise app.UsageError(f"--num_output_shards={FLAGS.num_output_shards} is more than the "
                             f"{len(instances)} instances made, and an empty shard would stop "
                             f"pre-training: pass at most {len(instances)}")  # fmt: skip
    paths = write_shards(instances, FLAGS.output_file, FLAGS.num_output_shards,
                         FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)  # fmt: skip
    logging.info("wrote %d instances to %s", len(instances), ", ".join(paths))


if __name__ == "__main__":
    run_main(main)
