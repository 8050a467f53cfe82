"""Regenerates keras_bert/serving/serving_ops.txt: the ops TF Serving 2.12 can run.

TF Serving 2.12 is built on TensorFlow 2.12 and bundles tensorflow-text 2.12.1, so the list is
the core ops of TensorFlow 2.12 plus the ops tensorflow-text 2.12.1 registers. Neither runs here,
so the list is read from their wheels:

    pip download --no-deps --python-version 3.11 --only-binary=:all: \\
        tensorflow-cpu==2.12.1 tensorflow-text==2.12.1 -d wheels/
    python exports/make_serving_ops.py wheels/tensorflow_cpu-2.12.1-*.whl \\
        wheels/tensorflow_text-2.12.1-*.whl

Core ops are the ones named in TensorFlow 2.12's generated Python wrappers (gen_*_ops.py).
tensorflow-text's ops live in shared libraries: an op the installed tensorflow-text registers is
kept when its name appears in one of 2.12.1's libraries.
"""

import re
import sys
import zipfile

OUTPUT = "keras_bert/serving/serving_ops.txt"


def core_ops(wheel):
    names = set()
    with zipfile.ZipFile(wheel) as archive:
        for path in archive.namelist():
            if re.search(r"/python/ops/gen_\w+\.py$", path) or re.search(
                r"/gen_\w+_ops\.py$", path
            ):
                source = archive.read(path).decode("utf-8")
                names |= set(re.findall(r'_apply_op_helper\(\s*"(\w+)"', source))
                names |= set(re.findall(r'_execute\.execute\(b"(\w+)"', source))
    return names


def text_ops(wheel):
    import tensorflow  # noqa: F401  (registers the core ops before tensorflow-text's)
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    def registered():
        ops = op_def_pb2.OpList()
        ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
        return {op.name for op in ops.op}

    before = registered()
    import tensorflow_text  # noqa: F401  (registers its ops)

    candidates = registered() - before
    with zipfile.ZipFile(wheel) as archive:
        blobs = [archive.read(p) for p in archive.namelist() if p.endswith(".so")]
    return {
        name
        for name in candidates
        if any(re.search(rb"(^|\0|[^A-Za-z0-9_])" + name.encode() + rb"\0", b) for b in blobs)
    }


def main(tensorflow_wheel, text_wheel):
    core = core_ops(tensorflow_wheel)
    text = text_ops(text_wheel)
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write("# Ops TF Serving 2.12 can run; regenerate with exports/make_serving_ops.py\n")
        f.write("\n".join(sorted(core | text)) + "\n")
    print(f"{len(core)} core ops, {len(text)} tensorflow-text ops -> {OUTPUT}")


if __name__ == "__main__":
    main(*sys.argv[1:])
