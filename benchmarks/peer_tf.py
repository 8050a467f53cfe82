"""The keras_bert side of benchmarks/peers.py (a worker process; see that module).

The serving jobs import only tensorflow and tensorflow_text, as TF Serving runs an export.
"""

import functools
import os
import sys

from benchmarks import onednn_enabled, peer_worker, random_token_ids, tf_serving_module
from benchmarks.peer_worker import (
    FINETUNE_STEPS_PER_STEP_FLAG,
    PRODUCTS_CALLS,
    SERVING_SENTENCES,
    checkpoint_folder,
    encoder_products,
    products_widths,
    sst2,
)

CHANNEL = peer_worker.protocol_channel()

# Nothing below may print to the real stdout: hence the imports after the channel.
if peer_worker.options()["bench"] in ("encoder", "tokenizer", "finetune", "embed"):
    # Before TensorFlow, as in a user's program: importing keras_bert turns oneDNN on unless
    # the environment says otherwise (keras_bert/__init__.py), which TensorFlow reads as it loads.
    import keras_bert  # noqa: E402,F401

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the tokenizer's ops for a loaded export)

from benchmarks.ceiling import matmul_ceiling  # noqa: E402

INFO = {}  # what the jobs' set-up learnt, reported with the versions


def realize(outputs):
    """Waits for a result by copying it out, as a caller of the model would."""
    return tf.nest.map_structure(lambda t: t.numpy(), outputs)


def policy_name(precision):
    return {"float32": "float32", "bfloat16": "mixed_bfloat16"}[precision]


def forward_outputs(encoder, x):
    """What PyTorch's BertModel returns: the last block's output and the pooled one."""
    outputs = encoder(x, training=False)
    return {key: outputs[key] for key in ("sequence_output", "pooled_output")}


def encoder_jobs(opts):
    import keras

    import keras_bert
    from keras_bert import BertConfig, BertEncoder

    config = BertConfig(num_hidden_layers=opts.get("layers", 12))  # BERT-base (fewer: tests)
    batch, seq, steps = opts["batch_size"], opts["seq_length"], opts["steps"]
    rng = np.random.default_rng(0)
    x = random_token_ids(rng, batch, seq)
    y = tf.constant(rng.integers(0, 2, batch), tf.int32)
    tokens = batch * seq
    # A worker with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (peers --onednn_frozen_weights) times what
    # a served bfloat16 export runs, and the ceiling: nothing that trains, which the setting
    # would silently stall, and no float32 (not for float32 exports; see the README).
    frozen = opts.get("onednn_frozen_weights", False)
    jobs = {}
    for precision in ["bfloat16"] if frozen else opts["precisions"]:
        keras.config.set_dtype_policy(policy_name(precision))
        encoder = BertEncoder(**config.to_dict())
        classifier = keras_bert.BertClassifier(encoder, preprocessor=None)  # token ids in
        classifier.compile(total_steps=10**6)  # the fine-tuning recipe: AdamW, clipping, schedule
        forward = tf.function(lambda x, encoder=encoder: forward_outputs(encoder, x))
        dtype = tf.float32 if precision == "float32" else tf.bfloat16
        ceilings = {"": matmul_ceiling(config, batch, seq, dtype),
                    "~in_order": matmul_ceiling(config, batch, seq, dtype, in_order=True)}

        def run_forward(forward=forward):
            for _ in range(steps):
                realize(forward(x)["sequence_output"])
            return steps * tokens, "tokens"

        if precision != "float32":
            # What a bfloat16 export runs (task.with_precision(..., for_inference=True)): the
            # dense weights stored in bfloat16 rather than cast on every call.
            stored = BertEncoder(**{**config.to_dict(), "dtype": precision})
            stored.set_weights(encoder.get_weights())
            jobs[f"{precision}/forward~stored_weights"] = functools.partial(
                run_forward, tf.function(lambda x: forward_outputs(stored, x)))

        def run_train(classifier=classifier):
            for _ in range(steps):
                classifier.train_on_batch(x, y)
            return steps * tokens, "tokens"

        def run_ceiling(ceiling):
            for _ in range(steps):
                realize(ceiling())
            return steps * tokens, "tokens"

        for variant, ceiling in ceilings.items():
            jobs[f"{precision}/matmul_ceiling{variant}"] = functools.partial(run_ceiling, ceiling)
        if not frozen:
            jobs[f"{precision}/forward"] = run_forward
            jobs[f"{precision}/train_step"] = run_train
    keras.config.set_dtype_policy("float32")
    return jobs


def tokenizer_jobs(opts):
    import keras_bert

    tokenizer = keras_bert.BertTokenizer.from_checkpoint(checkpoint_folder(opts))
    preprocessor = keras_bert.BertPreprocessor.from_tokenizer(tokenizer, sequence_length=128)
    sentences, _ = sst2("dev")
    size = opts["batch_size"]
    # Python lists of str, as the Rust tokenizer gets them: making tensors of them is timed.
    batches = [sentences[i : i + size] for i in range(0, len(sentences), size)]

    def run():
        for _ in range(opts["steps"]):
            for b in batches:
                realize(preprocessor(b))
        return opts["steps"] * len(sentences), "sentences"

    ids = [row[row != 0].tolist() for b in batches
           for row in realize(preprocessor(b))["input_word_ids"]]  # fmt: skip
    np.save(os.path.join(opts["scratch"], "keras_bert_ids.npy"), np.array(ids, dtype=object),
            allow_pickle=True)  # fmt: skip
    return {"tokenize_and_pack": run}


def serving_jobs(opts):
    """batch_N: the export's serving_default through tf.saved_model.load; batch_N~tf_serving:
    the same calls through the export loaded as TF Serving loads it (one graph in a session)."""
    serve = tf.saved_model.load(opts["export"]).signatures["serving_default"]
    session = tf_serving_module().LoadedLikeTfServing(opts["export"],
                                                      intra_op_threads=opts.get("threads") or 0)
    sentences, _ = sst2("dev")
    jobs = {}
    for size, count in SERVING_SENTENCES.items():
        calls = [tf.constant(sentences[i : i + size]) for i in range(0, count, size)]
        arrays = [np.array(sentences[i : i + size], dtype=object) for i in range(0, count, size)]

        def run(calls=calls, count=count):
            latencies = peer_worker.per_call(calls, lambda c: realize(serve(sentence=c)))
            return count, "sentences", latencies

        def run_session(arrays=arrays, count=count):
            return count, "sentences", peer_worker.per_call(arrays, lambda a: session(sentence=a))

        jobs[f"batch_{size}"] = run
        jobs[f"batch_{size}~tf_serving"] = run_session
    batches = [sentences[i : i + 32] for i in range(0, len(sentences), 32)]
    labels = np.concatenate([realize(serve(sentence=tf.constant(b)))["label_id"] for b in batches])
    as_served = np.concatenate([session(sentence=np.array(b, dtype=object))["label_id"]
                                for b in batches])  # fmt: skip
    if not np.array_equal(labels, as_served):
        raise RuntimeError("the export's labels differ between tf.saved_model.load and TF "
                           "Serving's loading")  # fmt: skip
    np.save(os.path.join(opts["scratch"], "keras_bert_labels.npy"), labels)
    return jobs


def products_jobs(opts):
    """A batch-1 call's dense products alone, in each of --precisions, product and bias fused,
    the weights in constants. oneDNN reorders them on every call, unless the worker runs with
    TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (peers --onednn_frozen_weights), as a served bfloat16
    export does."""
    x, layers = encoder_products(products_widths(opts), opts["batch_size"],
                                 np.random.default_rng(0))

    def job(dtype):
        inputs = tf.constant(x, dtype)
        weights = [(tf.constant(w, dtype), tf.constant(b, dtype)) for w, b in layers]

        @tf.function
        def call(y):
            for w, b in weights:  # captured: constants of the graph
                y = tf.nn.bias_add(tf.matmul(y, w), b)
            return y

        def run():
            for _ in range(PRODUCTS_CALLS):
                realize(call(inputs))
            return PRODUCTS_CALLS, "calls"

        return run

    return {f"{precision}/products": job(tf.as_dtype(precision))
            for precision in opts["precisions"]}  # fmt: skip


def finetune_jobs(opts):
    """`fit` on SST-2 train sentences, in each of --precisions: bfloat16, the README recipe (the
    quick start), and as the variant finetune~float32, the faster one on a CPU whose bfloat16
    products are slow. Each also as the variant `~xla`: compile(jit_compile=True), the encoder
    on static shapes (batches padded to a few lengths), against the default packed steps."""
    import keras

    import keras_bert

    sentences, labels = sst2("train")
    count = opts["batch_size"] * opts["steps"] * FINETUNE_STEPS_PER_STEP_FLAG

    def job(policy, jit_compile=False):
        keras.config.set_dtype_policy(policy)
        model = keras_bert.BertClassifier.from_checkpoint(checkpoint_folder(opts))
        model.compile(learning_rate=1e-4, total_steps=10**6, jit_compile=jit_compile)
        data = model.make_dataset(sentences[:count], labels[:count],
                                  batch_size=opts["batch_size"])  # fmt: skip

        def run():
            model.fit(data, epochs=1, verbose=0)
            return count, "examples"

        return run

    jobs = {}
    for precision in opts["precisions"]:
        name = "finetune" if precision == "bfloat16" else f"finetune~{precision}"
        jobs[name] = job(policy_name(precision))
        jobs[f"{name}~xla"] = job(policy_name(precision), jit_compile=True)
    return jobs


def embed_jobs(opts):
    """embed_batch_N: BertTextEmbedder.predict, strings to unit vectors, pooled as the
    checkpoint says; embed_batch_N~tf_serving: the same calls to its export, loaded as TF
    Serving loads it (one graph in a session, each block in column parts)."""
    import keras_bert

    model = keras_bert.BertTextEmbedder.from_checkpoint(checkpoint_folder(opts))
    jobs, info = peer_worker.embed_jobs_on(
        lambda texts, size: model.predict(texts, batch_size=size, verbose=0), opts,
        "keras_bert")  # fmt: skip
    session = tf_serving_module().LoadedLikeTfServing(
        model.export(os.path.join(opts["scratch"], "embedder")),
        intra_op_threads=opts.get("threads") or 0)  # fmt: skip
    sentences, _ = sst2("dev")
    for size, count in SERVING_SENTENCES.items():
        arrays = [np.array(sentences[i : i + size], dtype=object) for i in range(0, count, size)]

        def run_session(arrays=arrays, count=count):
            return count, "sentences", peer_worker.per_call(arrays, lambda a: session(sentence=a))

        jobs[f"embed_batch_{size}~tf_serving"] = run_session
    served = session(sentence=np.array(sentences[:32], dtype=object))["embedding"]
    info["export_max_difference"] = float(np.abs(
        served - model.predict(sentences[:32], verbose=0)).max())  # fmt: skip
    INFO.update(info)
    return jobs


def prepare_serving(opts):
    """Writes the run's weights for the PyTorch side: a Hugging Face folder and head.npz."""
    import keras

    import keras_bert  # noqa: F401  (registers the classes the run's model.keras needs)
    from keras_bert import checkpoints

    model = keras.saving.load_model(os.path.join(opts["run_dir"], "model.keras"))
    folder = opts["scratch"]
    vocab = os.path.join(folder, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(model.preprocessor.tokenizer.vocabulary) + "\n")
    checkpoints.save_checkpoint(
        checkpoints.BertCheckpoint(model.encoder, vocab, model.preprocessor.tokenizer.do_lower_case),
        os.path.join(folder, "hf"))
    kernel, bias = model.head.dense.get_weights()
    np.savez(os.path.join(folder, "head.npz"), kernel=kernel, bias=bias)


def main():
    opts = peer_worker.options()
    if opts.get("threads"):  # before the first op starts TensorFlow's runtime
        tf.config.threading.set_intra_op_parallelism_threads(opts["threads"])
    if opts["bench"] == "prepare_serving":
        return prepare_serving(opts)
    make = {"encoder": encoder_jobs, "tokenizer": tokenizer_jobs, "serving": serving_jobs,
            "finetune": finetune_jobs, "products": products_jobs,
            "embed": embed_jobs}[opts["bench"]]  # fmt: skip
    jobs = make(opts)
    info = {**INFO, "tensorflow": tf.__version__,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "onednn": onednn_enabled(),
            "environment": {name: value for name, value in sorted(os.environ.items())
                            if name.startswith(("TF_", "ONEDNN_", "DNNL_"))}}  # fmt: skip
    if "keras_bert" in sys.modules:
        import keras

        info["keras"] = keras.__version__
    peer_worker.serve(jobs, info, CHANNEL)


if __name__ == "__main__":
    main()
