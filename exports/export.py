"""Exports a finished fine-tuning run as a SavedModel for TF Serving, tokenizer inside.

    python -m exports.export --run_dir=runs/sst-2 --export_dir=exported --model_name=sst2

writes exported/sst2/<version>/ with two signatures: `serving_default` takes raw strings
(`sentence`, or `sentence1` and `sentence2` for pair tasks) and returns `label_id`, `label` and
`probabilities` (`score` for regression); `serve_token_ids` takes `input_word_ids`,
`input_mask` and `input_type_ids`. A SQuAD run's `serving_default` takes `question` and
`context` and returns the answer with its character offsets; an NER run's takes `sentence` and
returns its entities. With --hub_layout it also writes the preprocessor and the
bare encoder in the TF Hub BERT layout (exported/<model_name>_preprocess, _encoder).
"""

import os

from absl import app, flags, logging

from exports import hub_layout, serving
from keras_bert import BertEncoder
from tasks import common

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "run_dir", None, "Output folder of a finished tasks.glue, swag, squad or ner run."
)
flags.DEFINE_string("export_dir", "exported", "Base folder TF Serving watches.")
flags.DEFINE_string("model_name", None, "Model name (sub-folder). Default: the task name.")
flags.DEFINE_integer("version", None, "Version number. Default: one more than the newest.")
flags.DEFINE_bool("hub_layout", False, "Also export preprocessor and encoder, TF Hub style.")

WARMUP_TEXTS = [
    "A short warm-up sentence.",
    "",
    "Another, somewhat longer sentence to warm up the server before its first request arrives.",
]


def export_run(run_dir, export_dir, model_name=None, version=None, hub=False):
    model, tokenizer, run_info = common.load_run(run_dir)
    model_name = model_name or run_info["task"].lower()
    if run_info["task"] == "SQuAD":
        module = serving.SquadModule(model, tokenizer, run_info)
        signatures = module.signatures()
        warmup = [{"question": ["Who warms up?"], "context": WARMUP_TEXTS[:1]},
                  {"question": ["Who?"] * 3, "context": WARMUP_TEXTS}]  # fmt: skip
    elif run_info["task"] == "NER":
        module = serving.NerModule(model, tokenizer, run_info)
        signatures = module.signatures()
        warmup = [{"sentence": WARMUP_TEXTS[:1]}, {"sentence": WARMUP_TEXTS}]
    elif run_info["task"] == "SWAG":
        choices = len(run_info["labels"])
        module = serving.MultipleChoiceModule(model, tokenizer, run_info["max_seq_length"], choices)
        signatures = module.signatures()
        warmup = [{"context": WARMUP_TEXTS[:1], "endings": [WARMUP_TEXTS[:1] * choices]}]
    else:
        num_texts = len(run_info["text_columns"])
        module = serving.ClassifierModule(model, tokenizer, run_info["labels"],
                                          run_info["max_seq_length"])  # fmt: skip
        signatures = module.signatures(num_texts)
        names = serving.TEXT_INPUTS[num_texts]
        warmup = [{n: WARMUP_TEXTS[:1] for n in names}, {n: WARMUP_TEXTS for n in names}]
    path = serving.save_versioned(module, signatures, export_dir, model_name, warmup=warmup,
                                  version=version)  # fmt: skip
    logging.info("exported %s", path)
    if hub:
        encoder = encoder_of(model)
        for kind, save in (("preprocess", hub_layout.save_preprocessor),
                           ("encoder", hub_layout.save_encoder)):  # fmt: skip
            target = os.path.join(export_dir, f"{model_name}_{kind}")
            save(tokenizer if kind == "preprocess" else encoder, target, run_info["max_seq_length"])
            logging.info("exported %s", target)
    return path


def encoder_of(model):
    """The BertEncoder inside a fine-tuned model."""
    return next(layer for layer in model.layers if isinstance(layer, BertEncoder))


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    path = export_run(FLAGS.run_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.version,
                      FLAGS.hub_layout)  # fmt: skip
    print(path)


if __name__ == "__main__":
    flags.mark_flag_as_required("run_dir")
    app.run(main)
