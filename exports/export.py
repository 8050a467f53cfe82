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
import re

import keras
from absl import app, flags, logging

import keras_bert  # noqa: F401  (registers the task models before loading one)
from exports import hub_layout
from keras_bert.model.column_parts import check_column_parts
from keras_bert.serving.servable import PRECISIONS
from keras_bert.text import textfiles
from tasks import run_main

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "run_dir", None, "Output folder of a finished tasks.glue, swag, squad or ner run."
)
flags.DEFINE_string("export_dir", "exported", "Base folder TF Serving watches.")
flags.DEFINE_string("model_name", None, "Model name (sub-folder). Default: the task name.")
flags.DEFINE_integer("version", None, "Version number. Default: one more than the newest.")
flags.DEFINE_bool("hub_layout", False, "Also export preprocessor and encoder, TF Hub style.")
flags.DEFINE_enum("precision", "float32", sorted(PRECISIONS),
                  "The export's compute precision, whatever the run trained in. float32 runs "
                  "at full speed on every CPU; bfloat16 is faster only where the CPU's "
                  "bfloat16 products outrun its float32 ones (AMX; AMD's AVX512-BF16; not an "
                  "Intel CPU with AVX512-BF16 but no AMX, where they run at half the speed: "
                  "docs/performance.md), and on GPUs and TPUs, and may answer differently on near "
                  "ties.")
flags.DEFINE_integer("serving_max_windows", None, "SQuAD runs: windows a served passage may produce "
                     "(default: the run's own, 64 unless trained otherwise); a longer passage's "
                     "end is not read and the answer's passage_cut says so.")
flags.DEFINE_integer("column_parts", None, "The export's encoder blocks compute in this many "
                     "column parts, which TensorFlow's inter-op threads run side by side (the "
                     "same numbers up to rounding; docs/performance.md). Default: 2 where the model's "
                     "heads and sizes split in two, else 1; 1 keeps each product whole.")

def export_run(run_dir, export_dir, model_name=None, version=None, hub=False, max_windows=None,
               precision="float32", column_parts=None):
    """Exports the model.keras of a finished run; everything it needs is inside that file."""
    textfiles.check_folder(run_dir, "--run_dir")
    if version is not None and version < 1:
        raise app.UsageError(f"--version must be at least 1, got {version}")
    path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run_dir} is not a finished run: it has no model.keras")
    textfiles.make_folder(export_dir, "--export_dir")
    model = keras.saving.load_model(path)
    if max_windows is not None:
        if not hasattr(model.preprocessor, "max_windows"):
            raise app.UsageError("--serving_max_windows applies to SQuAD runs only")
        if max_windows < 1:
            raise app.UsageError(f"--serving_max_windows must be at least 1, got {max_windows}")
        model.preprocessor.max_windows = max_windows
    if column_parts is not None:
        try:
            check_column_parts(model.encoder.config, column_parts)
        except ValueError as e:
            raise app.UsageError(f"--column_parts={column_parts}: {e}") from None
    model_name = model_name or model.name
    target = os.path.join(export_dir, model_name, str(version))
    if version is not None and os.path.exists(target):
        raise app.UsageError(f"--version={version}: {target} exists; pick another, or leave "
                             "--version out (one more than the newest)")  # fmt: skip
    logging.info("exporting in %s (the run computed in %s)", precision,
                 model.encoder.policy.compute_dtype)  # fmt: skip
    model = model.with_precision(precision, for_inference=True)  # the hub layout's encoder too
    path = model.export(os.path.join(export_dir, model_name), version=version,
                        precision=precision, column_parts=column_parts)
    logging.info("exported %s", path)
    if hub:
        sequence_length = model.preprocessor.sequence_length
        for kind, save, part in (
            ("preprocess", hub_layout.save_preprocessor, model.preprocessor.tokenizer),
            ("encoder", hub_layout.save_encoder, model.encoder),
        ):
            target = os.path.join(export_dir, f"{model_name}_{kind}")
            save(part, target, sequence_length)
            logging.info("exported %s", target)
    return path


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    name = FLAGS.model_name
    if name is not None and (not re.fullmatch(r"[\w.-]+", name) or set(name) == {"."}):
        raise app.UsageError(f"--model_name={name!r} is not a folder name: use letters, digits, "
                             "'_', '-' and '.' only (TF Serving serves the folder's name)")  # fmt: skip
    path = export_run(FLAGS.run_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.version,
                      FLAGS.hub_layout, FLAGS.serving_max_windows, FLAGS.precision,
                      FLAGS.column_parts)
    print(path)


if __name__ == "__main__":
    flags.mark_flag_as_required("run_dir")
    run_main(main)
