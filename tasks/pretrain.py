"""Pre-trains BERT (masked LM + next sentence) with model.fit, from create_pretraining_data files.

    python -m tasks.pretrain --input_file='data/pretrain-*.tfrecord' --output_dir=runs/pretrain \\
        --init_checkpoint=path/to/checkpoint --num_train_steps=10000 --mixed_precision=bfloat16
    python -m tasks.pretrain --text_file='corpus/*.txt' --text_format=text ...   # streaming

Starts from --init_checkpoint (any layout the library loads; its heads are used when it has
them) or, with --bert_config_file and --vocab_file, from random weights. Uses the strategy,
mixed-precision and seed flags of the fine-tuning binaries. Training state is backed up every
--save_checkpoints_steps steps; a killed run resumes when started again. The result is written
to <output_dir>/google and <output_dir>/huggingface with both heads, ready for
keras_bert.load_checkpoint and every task's --init_checkpoint.
"""

import os

import keras
import tensorflow as tf
from absl import app, flags, logging

from keras_bert import (
    BertConfig,
    BertEncoder,
    BertPretrainer,
    BertPretrainingPreprocessor,
    BertTokenizer,
    checkpoints,
)
from keras_bert.models.pretrained import check_sequence_length
from keras_bert.text import textfiles
from keras_bert.text.vocabulary import read_vocabulary
from keras_bert.training import optimization, pretraining
from keras_bert.training.batching import without_autotuning
from tasks import (
    check_at_least_one,
    common,
    pretraining_text,
    run_main,
    runs,
    trainer,
)
from tasks.pretraining_records import record_dataset, record_shape, to_model_inputs

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "input_file",
    None,
    "Comma-separated TFRecord files or globs (from tasks.create_pretraining_data).",
)
flags.DEFINE_string(
    "text_file",
    None,
    "Instead of --input_file: comma-separated text files or "
    "globs; instances are built on the fly, with new masks every pass.",
)
flags.DEFINE_enum(
    "text_format",
    "lines",
    ["lines", "text"],
    "Format of --text_file (see tasks.create_pretraining_data --input_format).",
)
flags.DEFINE_string("text_encoding", "utf-8", "Encoding of --text_file.")
flags.DEFINE_integer(
    "max_predictions_per_seq", 20, "Streaming: masked-LM predictions per sequence."
)
flags.DEFINE_float("masked_lm_prob", 0.15, "Streaming: fraction of tokens chosen for prediction.")
flags.DEFINE_float("short_seq_prob", 0.1, "Streaming: probability of a shorter target length.")
flags.DEFINE_bool("do_whole_word_mask", False, "Streaming: mask all pieces of a word together.")
flags.DEFINE_string("bert_config_file", None, "Config of a model trained from scratch.")
flags.DEFINE_string("vocab_file", None, "vocab.txt of a model trained from scratch.")
flags.DEFINE_integer("num_train_steps", 1000, "Optimizer steps.")
flags.DEFINE_integer("num_warmup_steps", None, "Linear warmup steps. Default: 10% of "
                     "--num_train_steps.")
flags.DEFINE_integer(
    "steps_per_loop",
    100,
    "Steps per Keras epoch (between logs and backups) when --save_checkpoints_steps is not given.",
)
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "LAMB suits very large batches "
                  "(Keras's Lamb; --weight_decay is applied decoupled, as for AdamW, not to "
                  "LayerNorm and biases).")
flags.DEFINE_integer("gradient_accumulation_steps", 1, "Batches whose gradients are summed "
                     "per optimizer step.")  # fmt: skip
# The fine-tuning flags of tasks.common that pre-training has no use for, refused when given
# (with what to pass instead) and left out of --help.
NOT_FOR_PRETRAINING = {
    "num_train_epochs": "pass --num_train_steps", "warmup_proportion": "pass --num_warmup_steps",
    **dict.fromkeys(["do_train", "do_eval", "do_predict", "eval_batch_size", "layer_decay",
                     "bucket_by_length", "max_train_examples", "max_eval_examples"]),
}  # fmt: skip
common.adopt_flags(__name__, NOT_FOR_PRETRAINING)

def streaming_dataset(tokenizer, files):
    documents = []
    for path in files:
        text = pretraining_text.read_documents(path, FLAGS.text_format, FLAGS.text_encoding)
        documents.extend(pretraining_text.tokenize_documents(text, tokenizer))
    if not documents:
        raise ValueError(f"no text in --text_file={FLAGS.text_file}")
    pretraining_text.check_pairs(documents, f"--text_file={FLAGS.text_file}")
    return pretraining_text.streaming_dataset(
        documents, pretraining.special_ids(tokenizer), FLAGS.seed, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq, short_seq_prob=FLAGS.short_seq_prob,
        masked_lm_prob=FLAGS.masked_lm_prob, whole_word=FLAGS.do_whole_word_mask)  # fmt: skip


def training_dataset(examples):
    # Without tf.data's autotuning thread, whose sleep delayed the end of every fit call.
    examples = without_autotuning(examples.shuffle(10_000, seed=FLAGS.seed))
    batches = examples.batch(FLAGS.train_batch_size, drop_remainder=True)
    return batches.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE
    )


def build_pretrainer():
    """The pretrainer (with its tokenizer); call inside the strategy scope."""
    if FLAGS.init_checkpoint:
        return BertPretrainer.from_checkpoint(
            FLAGS.init_checkpoint, sequence_length=FLAGS.max_seq_length,
            masked_lm_prob=FLAGS.masked_lm_prob, max_predictions=FLAGS.max_predictions_per_seq,
            do_lower_case=FLAGS.do_lower_case)  # fmt: skip
    if not (FLAGS.bert_config_file and FLAGS.vocab_file):
        raise app.UsageError("pass --init_checkpoint, or --bert_config_file and --vocab_file")
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
    if len(read_vocabulary(FLAGS.vocab_file)) > config.vocab_size:
        raise ValueError(f"{FLAGS.vocab_file} has more tokens than vocab_size={config.vocab_size}")
    tokenizer = BertTokenizer(FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case is not False)
    preprocessor = BertPretrainingPreprocessor.from_tokenizer(
        tokenizer, FLAGS.max_seq_length, masked_lm_prob=FLAGS.masked_lm_prob,
        max_predictions=FLAGS.max_predictions_per_seq)  # fmt: skip
    return BertPretrainer(BertEncoder(**config.to_dict()), preprocessor)


def training_files():
    """The files to train on, and for record files their record_shape (every file checked).
    The records' sequence length is the run's: --max_seq_length takes it, and one given
    otherwise is refused."""
    if FLAGS.text_file:
        files, shape = pretraining_text.input_files(FLAGS.text_file, "--text_file"), None
    else:
        files = pretraining_text.input_files(FLAGS.input_file)
        shape = record_shape(files)
        if shape[0] != FLAGS.max_seq_length and FLAGS["max_seq_length"].present:
            raise app.UsageError(f"--input_file holds instances of {shape[0]} tokens, but "
                                 f"--max_seq_length is {FLAGS.max_seq_length}: pass "
                                 f"--max_seq_length={shape[0]}, or leave it out")  # fmt: skip
        FLAGS.max_seq_length = shape[0]
    check_length_fits(shape)
    return files, shape


def check_length_fits(shape):
    """Refuses a sequence length the model has no position embeddings for, naming where the
    length came from: --max_seq_length, or the --input_file records (`shape`)."""
    if FLAGS.init_checkpoint:
        config, whose = checkpoints.read_config(FLAGS.init_checkpoint), "the checkpoint's"
    elif FLAGS.bert_config_file:
        config, whose = BertConfig.from_json_file(FLAGS.bert_config_file), "--bert_config_file's"
    else:
        return  # build_pretrainer says what to pass
    positions = config.max_position_embeddings
    if shape and shape[0] > positions:
        raise app.UsageError(f"--input_file holds instances of {shape[0]} tokens, more than "
                             f"{whose} max_position_embeddings={positions}: make them with "
                             f"tasks.create_pretraining_data --max_seq_length={positions} or "
                             "less")  # fmt: skip
    check_sequence_length(FLAGS.max_seq_length, config, "--max_seq_length")


def create_optimizer():
    accumulate = (
        FLAGS.gradient_accumulation_steps if FLAGS.gradient_accumulation_steps > 1 else None
    )
    # Keras's schedules read the batches seen, not the updates: counted in updates, a run that
    # accumulated 2 batches an update warmed up in half the steps asked and made its second
    # half of updates at a rate of 0.
    batches = accumulate or 1
    schedule = optimization.WarmupLinearDecay(FLAGS.learning_rate,
                                              FLAGS.num_train_steps * batches,
                                              warmup_steps() * batches)  # fmt: skip
    if FLAGS.optimizer == "lamb":
        optimizer = keras.optimizers.Lamb(schedule, epsilon=1e-6, global_clipnorm=FLAGS.clip_norm,
                                          weight_decay=FLAGS.weight_decay or None,
                                          gradient_accumulation_steps=accumulate)  # fmt: skip
        optimizer.exclude_from_weight_decay(var_names=list(optimization.NO_DECAY))
    else:
        optimizer = optimization.create_optimizer(
            FLAGS.learning_rate, FLAGS.num_train_steps * batches, warmup_steps() * batches,
            weight_decay=FLAGS.weight_decay, clipnorm=FLAGS.clip_norm)  # fmt: skip
        optimizer.gradient_accumulation_steps = accumulate
    return (
        keras.optimizers.LossScaleOptimizer(optimizer)
        if FLAGS.mixed_precision == "float16"
        else optimizer
    )


def warmup_steps():
    if FLAGS.num_warmup_steps is None:
        return FLAGS.num_train_steps // 10
    return FLAGS.num_warmup_steps


def check_flags():
    common.refuse_unused_flags(NOT_FOR_PRETRAINING, "pre-training")
    if bool(FLAGS.input_file) == bool(FLAGS.text_file):
        raise app.UsageError("pass one of --input_file (TFRecords) and --text_file (streaming)")
    scratch = [f"--{name}" for name in ("bert_config_file", "vocab_file") if FLAGS[name].value]
    if FLAGS.init_checkpoint and scratch:
        verb = "describe" if len(scratch) > 1 else "describes"
        raise app.UsageError(f"{' and '.join(scratch)} {verb} a model trained from scratch, "
                             "and --init_checkpoint brings its own: pass one or the other")  # fmt: skip
    common.check_training_flags()
    check_at_least_one(["num_train_steps", "steps_per_loop", "gradient_accumulation_steps"])
    common.check_warmup(warmup_steps(), FLAGS.num_train_steps, "--num_warmup_steps")
    if FLAGS.text_file:
        check_at_least_one(["max_predictions_per_seq"])
        if not 0 < FLAGS.masked_lm_prob < 1:
            raise app.UsageError(f"--masked_lm_prob must be above 0 and below 1, got "
                                 f"{FLAGS.masked_lm_prob}")  # fmt: skip
        if not 0 <= FLAGS.short_seq_prob <= 1:
            raise app.UsageError(f"--short_seq_prob must be between 0 and 1, got "
                                 f"{FLAGS.short_seq_prob}")  # fmt: skip


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    check_flags()
    output_dir = FLAGS.output_dir or os.path.join("runs", "pretrain")
    strategy = trainer.create_strategy()
    target = trainer.run_dir_of(strategy, output_dir)
    data, shape = training_files()  # after the strategy: reading records starts TensorFlow
    settings = runs.settings_of(FLAGS, "pretrain")
    settings["training_data_sha256"] = runs.data_digest(data)  # edited data is not resumed on
    state = runs.claim(target, settings, FLAGS.overwrite_output_dir,
                       finished=os.path.join(checkpoints.HUGGING_FACE, "config.json"))  # fmt: skip
    if state == "finished":
        logging.info("%s holds this run, finished (pass --overwrite_output_dir to train it "
                     "again)", target)  # fmt: skip
        return
    with strategy.scope():
        model = build_pretrainer()
        # The model's own losses and weighted accuracies.
        model.compile(create_optimizer(), **trainer.compile_options(strategy))
    def make_stream():
        return training_dataset(examples_of(strategy, model, data, shape))

    # Backups every --save_checkpoints_steps (else --steps_per_loop) optimizer steps; a resumed
    # run goes on from the batch its backup stopped at and ends at --num_train_steps.
    accumulation = FLAGS.gradient_accumulation_steps
    loop = (FLAGS.save_checkpoints_steps or FLAGS.steps_per_loop) * accumulation  # batches
    history = trainer.HistoryFile(os.path.join(target, "history.json"))
    trainer.fit_resumably(model, strategy, make_stream, loop, FLAGS.num_train_steps * accumulation,
                          [history], output_dir, loop)  # fmt: skip
    for fmt in (checkpoints.GOOGLE, checkpoints.HUGGING_FACE):
        runs.record(os.path.join(target, fmt))
        try:
            model.save_checkpoint(os.path.join(target, fmt), fmt)
        except OSError as e:
            full = textfiles.out_of_space(e)
            if full is None:
                raise
            raise OSError(f"could not write the checkpoint in {os.path.join(target, fmt)} "
                          f"({full}); make room, then run the same command again: the training "
                          "is backed up, and it writes the checkpoints without training "
                          "again") from None  # fmt: skip
    logging.info("final metrics: %s", {k: v[-1] for k, v in history.read().items()})


def examples_of(strategy, model, files, shape=None):
    """Pre-training instances: from record `files` (--input_file; `shape`, their record_shape),
    or built on the fly from text `files` (--text_file): those whose content the run recorded."""
    # Workers split the record files between them when there are enough; otherwise each
    # reads everything and keeps its share of the examples.
    sharding = tf.data.experimental.AutoShardPolicy.DATA
    if FLAGS.input_file:
        examples = record_dataset(files, *shape)
        if len(files) >= strategy.num_replicas_in_sync:
            sharding = tf.data.experimental.AutoShardPolicy.FILE
    else:
        examples = streaming_dataset(model.preprocessor.tokenizer, files)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = sharding
    return examples.with_options(options)


if __name__ == "__main__":
    run_main(main)
