"""How a served export's single-sentence calls use TensorFlow's threads, from the profiler's host
trace, which says which inter-op thread ran which op when. As a script, JSON:

    python -m benchmarks.served_threads [--export=exported/sst-2/1 --sentences=32 --passes=3]

The export runs as TF Serving runs it (`keras_bert/tf_serving.py`: its graph in a session, one
thread an op, TF Serving's best setting for single sentences on 2 cores), on the first
`--sentences` SST-2 dev sentences, one a call, `--passes` times over, first untraced, then under
the profiler. Means a call:
  call_ms              the traced call (untraced_call_ms: the same calls without the profiler);
  threads_in_an_op_ms  the call's time cut by how many of the inter-op threads were running an
                       op: all of them ("2" on 2 cores), fewer (a part of the graph with nothing
                       beside it, or an export's column part waiting at a join for the other),
                       none ("0": the executor between ops and in the small ops the trace leaves
                       out, such as variable handles, a cond's switches and reshapes; the call's
                       start and end);
  alone_in_dense_products_ms
                       of those, the time in which a dense product ran on one thread alone: in
                       an export's column parts, mostly one part's product still running while
                       the other part waits for it at the join;
  before_first_op_ms   from the call's start to its first traced op (the variables' handles
                       among what runs before it);
  op_ms_by_type        op time by type, the threads summed (the `--top` largest);
  dense_products_ms    the dense products' op time (MatMul, _FusedMatMul, and oneDNN's forms of
                       them where it runs); and
                       dense_products_fastest_pass_ms, the same with each product at its time
                       in its sentence's fastest pass: how much of their time is the spread of
                       a product's time from call to call.

TensorFlow's oneDNN setting is the environment's, or where it sets none TensorFlow's default for
the CPU, as in TF Serving: this script does not import keras_bert, which would turn oneDNN on.
"""

import collections
import json
import tempfile
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops, which TF Serving bundles)
from absl import app, flags

import benchmarks
from benchmarks import (
    define_served_export_flags,
    onednn_enabled,
    served_sentence_export,
)
from benchmarks.profiling import session_calls


def is_dense_product(op_type):
    """TensorFlow's MatMul and _FusedMatMul, and oneDNN's forms of them (_MklMatMul,
    _MklNativeFusedMatMul, ...)."""
    return op_type.removeprefix("_MklNative").removeprefix("_Mkl").lstrip("_") in (
        "MatMul", "FusedMatMul")


def occupancy(start, end, ops, threads):
    """How [start, end) went by how many of the `threads` threads ran an op: ({n: microseconds}
    for n = 0 to `threads`, {op type: microseconds in which it ran on one thread alone})."""
    edges = sorted([(s, 1, t, op_type) for s, _, t, _, op_type in ops] +
                   [(e, -1, t, op_type) for _, e, t, _, op_type in ops])  # fmt: skip
    running = [[] for _ in range(threads)]  # each thread's op types, outermost first
    busy, alone, last = collections.Counter(), collections.Counter(), start
    for at, step, thread, op_type in edges:
        at = min(max(at, start), end)  # an op that outlasts the call counts inside it
        active = [types[-1] for types in running if types]
        busy[len(active)] += at - last
        if len(active) == 1 and threads > 1:
            alone[active[0]] += at - last
        if step > 0:
            running[thread].append(op_type)
        else:
            running[thread].remove(op_type)
        last = at
    busy[0] += end - last
    return {n: busy[n] for n in range(threads + 1)}, alone


def summary(calls, passes, top):
    """The report's figures (microseconds in, milliseconds out) from `session_calls`' calls, the
    sentences served in order, `passes` times over."""
    threads = 1 + max(op[2] for _, _, ops in calls for op in ops)
    count = len(calls)

    def per_call(total):
        return round(total / count / 1e3, 3)

    in_an_op, alone, by_type = collections.Counter(), collections.Counter(), collections.Counter()
    for start, end, ops in calls:
        busy, alone_by_type = occupancy(start, end, ops, threads)
        in_an_op.update(busy)
        alone.update(alone_by_type)
        for s, e, _, _, op_type in ops:
            by_type[op_type] += e - s
    # Each dense product's time in each sentence's passes: (sentence, node) -> [microseconds].
    sentences = count // passes
    products = collections.defaultdict(list)
    for i, (_, _, ops) in enumerate(calls):
        for s, e, _, node, op_type in ops:
            if is_dense_product(op_type):
                products[i % sentences, node].append(e - s)
    return {
        "calls": count,
        "compute_threads": threads,
        "call_ms": per_call(sum(end - start for start, end, _ in calls)),
        "threads_in_an_op_ms": {str(n): per_call(us) for n, us in sorted(in_an_op.items())},
        "alone_in_dense_products_ms": per_call(sum(us for op_type, us in alone.items()
                                                   if is_dense_product(op_type))),
        "before_first_op_ms": per_call(sum(ops[0][0] - start for start, _, ops in calls if ops)),
        "op_ms_by_type": {t: per_call(us) for t, us in by_type.most_common(top)},
        "dense_products_ms": per_call(sum(sum(v) for v in products.values())),
        "dense_products_fastest_pass_ms": per_call(passes * sum(min(v) for v in products.values())),
    }  # fmt: skip


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    export, served, sentences = served_sentence_export()
    calls = sentences * FLAGS.passes

    def serve():
        for call in calls:
            served(sentence=call)

    serve()  # each shape's first call builds what the session keeps
    start = time.perf_counter()
    serve()
    untraced_ms = (time.perf_counter() - start) / len(calls) * 1e3
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            serve()
        finally:
            tf.profiler.experimental.stop()
        traced = session_calls(logdir)
    if len(traced) != len(calls):
        raise RuntimeError(f"the trace holds {len(traced)} session calls, not {len(calls)}")
    report = {"export": export, "onednn": onednn_enabled(), "sentences": len(sentences),
              "passes": FLAGS.passes, "untraced_call_ms": round(untraced_ms, 3),
              **summary(traced, FLAGS.passes, FLAGS.top)}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    define_served_export_flags("single-sentence", sentences=32, per="pass")
    flags.adopt_module_key_flags(benchmarks)  # so that --help lists them
    flags.DEFINE_integer("passes", 3, "Passes over the sentences, untraced and then traced; a "
                         "product's fastest pass is taken over these.", lower_bound=1)  # fmt: skip
    flags.DEFINE_integer("top", 12, "Op types listed in op_ms_by_type, the largest first.",
                         lower_bound=1)  # fmt: skip
    app.run(main)
