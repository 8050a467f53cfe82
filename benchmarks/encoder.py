"""Forward and training-step throughput of a BERT-base encoder, printed as JSON.

    python -m benchmarks.encoder [--batch_size 8 --seq_length 128 --rounds 5 --steps 3]

Measures keras_bert's BertEncoder in float32 and mixed_bfloat16. When keras-hub is installed it
builds keras-hub's BertBackbone of the same size and times both in the same run, alternating
round by round (this machine is shared and noisy), and reports medians and ratios
(>1 means keras_bert is faster).
"""

import json
import statistics
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import keras_bert  # noqa: F401  (selects the TensorFlow backend)
from keras_bert import BertConfig, BertEncoder

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 8, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (no padding).")
flags.DEFINE_integer("rounds", 5, "Alternating rounds; each round times every model once.")
flags.DEFINE_integer("steps", 3, "Steps timed per model per round.")
flags.DEFINE_list("precisions", ["float32", "mixed_bfloat16"], "Keras dtype policies to measure.")
flags.DEFINE_bool("keras_hub", True, "Also measure keras-hub's BertBackbone, if it is installed.")


def ours(config):
    model = BertEncoder(**config.to_dict())
    return model, lambda x: {
        "input_word_ids": x["ids"],
        "input_mask": x["mask"],
        "input_type_ids": x["types"],
    }


def keras_hub_backbone(config):
    import keras_hub

    model = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
    )
    return model, lambda x: {
        "token_ids": x["ids"],
        "padding_mask": x["mask"],
        "segment_ids": x["types"],
    }


def steps_for(model, adapt):
    """Compiled forward and training-step functions; the loss is the same for both models."""
    optimizer = keras.optimizers.Adam(1e-5)
    optimizer.build(model.trainable_variables)

    @tf.function
    def forward(x):
        outputs = model(adapt(x), training=False)
        return outputs["sequence_output"], outputs["pooled_output"]

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            outputs = model(adapt(x), training=True)
            loss = sum(
                tf.reduce_mean(tf.square(tf.cast(outputs[key], tf.float32)))
                for key in ("sequence_output", "pooled_output")
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return {"forward": forward, "train_step": train_step}


def time_steps(fn, x, steps):
    start = time.perf_counter()
    for _ in range(steps):
        tf.nest.map_structure(np.asarray, fn(x))  # waits for the result
    return (time.perf_counter() - start) / steps


def main(argv):
    del argv
    config = BertConfig()  # BERT-base
    rng = np.random.default_rng(0)
    shape = (FLAGS.batch_size, FLAGS.seq_length)
    x = {
        "ids": tf.constant(rng.integers(1000, 30000, shape), tf.int32),
        "mask": tf.ones(shape, tf.int32),
        "types": tf.zeros(shape, tf.int32),
    }
    builders = {"keras_bert": ours}
    if FLAGS.keras_hub:
        try:
            import keras_hub  # noqa: F401

            builders["keras_hub"] = keras_hub_backbone
        except ImportError:
            logging.warning("keras-hub is not installed; measuring keras_bert alone")
    tokens = FLAGS.batch_size * FLAGS.seq_length
    report = {
        "device": "cpu",
        "threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "batch_size": FLAGS.batch_size,
        "seq_length": FLAGS.seq_length,
        "rounds": FLAGS.rounds,
        "steps_per_round": FLAGS.steps,
        "results": {},
    }
    for precision in FLAGS.precisions:
        keras.config.set_dtype_policy(precision)
        fns = {name: steps_for(*build(config)) for name, build in builders.items()}
        for kind in ("forward", "train_step"):
            for name in fns:  # warm up: trace and run once
                time_steps(fns[name][kind], x, 1)
            seconds = {name: [] for name in fns}
            for r in range(FLAGS.rounds):
                for name in list(fns) if r % 2 == 0 else list(fns)[::-1]:
                    seconds[name].append(time_steps(fns[name][kind], x, FLAGS.steps))
            result = {
                name: {
                    "median_step_s": statistics.median(s),
                    "tokens_per_s": tokens / statistics.median(s),
                }
                for name, s in seconds.items()
            }
            if "keras_hub" in result:
                result["speedup_vs_keras_hub"] = (
                    result["keras_hub"]["median_step_s"] / result["keras_bert"]["median_step_s"]
                )
            report["results"][f"{precision}/{kind}"] = result
            logging.info("%s/%s: %s", precision, kind, json.dumps(result))
        del fns
    keras.config.set_dtype_policy("float32")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    app.run(main)
