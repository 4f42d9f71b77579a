"""TVM peer: the kernels in TE (`te.compute`), made TensorIR by `te.create_prim_func`, and either built
with TVM's default (naive) schedule or tuned by MetaSchedule (`tvm.s_tir.meta_schedule` in
apache-tvm 0.27) for `trials` trials and built with the best schedule found.

API notes for apache-tvm 0.27: TIR lives in `tvm.tirx`, MetaSchedule in `tvm.s_tir.meta_schedule`;
a target is a dict; `tvm.compile` returns an `Executable` whose `.mod` has `time_evaluator`;
arrays are `tvm.runtime.tensor`/`tvm.runtime.empty`. Tuning uses MetaSchedule's default `xgb` cost
model (the bench extra installs `xgboost-cpu`), or the `random` one where xgboost is missing
(`COST_MODEL`; evolutionary search still mutates measured schedules). MetaSchedule's LocalBuilder
starts worker processes that took about 8 s per candidate on this 2-core machine, so candidates are
built in this process instead
(`InProcessBuilder`: the same build and export functions; `derived_object` is in `tvm.ir.utils`); they
still run in its LocalRunner's worker process, under its time limit.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Mapping
from typing import Any

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import te  # noqa: E402

from . import THREADS, PeerFailure, Prepared, input_names, output_shape  # noqa: E402

NAME = "tvm"
COST_MODEL = "xgb" if importlib.util.find_spec("xgboost") else "random"


def target() -> Any:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": THREADS})


def _sum(expr, axes):
    return te.sum(expr, axis=axes)


def _elementwise(op):
    def make(*, m: int, n: int, arity: int):
        xs = [te.placeholder((m, n), "float32", name) for name in ("x", "y")[:arity]]
        out = te.compute((m, n), lambda i, j: op(*[x[i, j] for x in xs]), name="out")
        return [*xs, out]
    return make


def _add(m, n):
    return _elementwise(lambda a, b: a + b)(m=m, n=n, arity=2)


def _mul(m, n):
    return _elementwise(lambda a, b: a * b)(m=m, n=n, arity=2)


def _relu(m, n):
    return _elementwise(lambda a: te.max(a, tvm.tirx.const(0, "float32")))(m=m, n=n, arity=1)


def _batchnorm(n, c, h, w):
    x = te.placeholder((n, c, h, w), "float32", "x")
    count = float(n * h * w)
    rn, rh, rw = te.reduce_axis((0, n), "rn"), te.reduce_axis((0, h), "rh"), te.reduce_axis((0, w), "rw")
    s = te.compute((c,), lambda k: te.sum(x[rn, k, rh, rw], axis=[rn, rh, rw]), name="sum")
    mean = te.compute((c,), lambda k: s[k] / count, name="mean")
    qn, qh, qw = te.reduce_axis((0, n), "qn"), te.reduce_axis((0, h), "qh"), te.reduce_axis((0, w), "qw")
    sq = te.compute((c,), lambda k: te.sum((x[qn, k, qh, qw] - mean[k]) * (x[qn, k, qh, qw] - mean[k]),
                                           axis=[qn, qh, qw]), name="sq")
    inv = te.compute((c,), lambda k: 1.0 / te.sqrt(sq[k] / count + 1e-5), name="inv")
    y = te.compute((n, c, h, w), lambda i, k, p, q: (x[i, k, p, q] - mean[k]) * inv[k], name="y")
    return [x, y]


def _bmm(b, m, k, n):
    a = te.placeholder((b, m, k), "float32", "a")
    bb = te.placeholder((b, k, n), "float32", "b")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((b, m, n), lambda z, i, j: te.sum(a[z, i, r] * bb[z, r, j], axis=r), name="c")
    return [a, bb, c]


def _conv(n, co, ci, h, w, k):
    x = te.placeholder((n, ci, h, w), "float32", "x")
    f = te.placeholder((co, ci, k, k), "float32", "w")
    rc, rp, rq = te.reduce_axis((0, ci), "rc"), te.reduce_axis((0, k), "rp"), te.reduce_axis((0, k), "rq")
    y = te.compute((n, co, h - k + 1, w - k + 1),
                   lambda b, o, i, j: te.sum(x[b, rc, i + rp, j + rq] * f[o, rc, rp, rq], axis=[rc, rp, rq]),
                   name="y")
    return [x, f, y]


def _layernorm(m, n):
    x = te.placeholder((m, n), "float32", "x")
    g = te.placeholder((n,), "float32", "g")
    b = te.placeholder((n,), "float32", "b")
    r1, r2 = te.reduce_axis((0, n), "r1"), te.reduce_axis((0, n), "r2")
    s = te.compute((m,), lambda i: te.sum(x[i, r1], axis=r1), name="sum")
    mean = te.compute((m,), lambda i: s[i] / float(n), name="mean")
    sq = te.compute((m,), lambda i: te.sum((x[i, r2] - mean[i]) * (x[i, r2] - mean[i]), axis=r2), name="sq")
    inv = te.compute((m,), lambda i: 1.0 / te.sqrt(sq[i] / float(n) + 1e-5), name="inv")
    y = te.compute((m, n), lambda i, j: (x[i, j] - mean[i]) * inv[i] * g[j] + b[j], name="y")
    return [x, g, b, y]


def _matmul(m, k, n):
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    r = te.reduce_axis((0, k), "r")
    return [a, b, te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")]


def _reducemean(m, n):
    x = te.placeholder((m, n), "float32", "x")
    r = te.reduce_axis((0, n), "r")
    s = te.compute((m,), lambda i: te.sum(x[i, r], axis=r), name="sum")
    return [x, te.compute((m,), lambda i: s[i] / float(n), name="y")]


def _relu_ffn(n, c, h, w):
    x = te.placeholder((n, c, h, w), "float32", "x")
    f = te.placeholder((c, c), "float32", "w")
    b = te.placeholder((c,), "float32", "b")
    r = te.compute((n, c, h, w), lambda i, k, p, q: te.max(x[i, k, p, q], tvm.tirx.const(0, "float32")), name="r")
    rc = te.reduce_axis((0, c), "rc")
    acc = te.compute((n, c, h, w), lambda i, k, p, q: te.sum(f[k, rc] * r[i, rc, p, q], axis=rc), name="acc")
    y = te.compute((n, c, h, w), lambda i, k, p, q: acc[i, k, p, q] + b[k], name="y")
    return [x, f, b, y]


def _rmsnorm(m, n):
    x = te.placeholder((m, n), "float32", "x")
    g = te.placeholder((n,), "float32", "g")
    r = te.reduce_axis((0, n), "r")
    s = te.compute((m,), lambda i: te.sum(x[i, r] * x[i, r], axis=r), name="ss")
    inv = te.compute((m,), lambda i: 1.0 / te.sqrt(s[i] / float(n) + 1e-5), name="inv")
    return [x, g, te.compute((m, n), lambda i, j: x[i, j] * inv[i] * g[j], name="y")]


def _softmax(m, n):
    x = te.placeholder((m, n), "float32", "x")
    r1, r2 = te.reduce_axis((0, n), "r1"), te.reduce_axis((0, n), "r2")
    mx = te.compute((m,), lambda i: te.max(x[i, r1], axis=r1), name="mx")
    e = te.compute((m, n), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    s = te.compute((m,), lambda i: te.sum(e[i, r2], axis=r2), name="s")
    return [x, te.compute((m, n), lambda i, j: e[i, j] / s[i], name="y")]


def _swiglu(b, t, d, h):
    x = te.placeholder((b, t, d), "float32", "x")
    w = te.placeholder((d, h), "float32", "w")
    v = te.placeholder((d, h), "float32", "v")
    r1, r2 = te.reduce_axis((0, d), "r1"), te.reduce_axis((0, d), "r2")
    a = te.compute((b, t, h), lambda i, j, k: te.sum(x[i, j, r1] * w[r1, k], axis=r1), name="a")
    c = te.compute((b, t, h), lambda i, j, k: te.sum(x[i, j, r2] * v[r2, k], axis=r2), name="c")
    y = te.compute((b, t, h), lambda i, j, k: a[i, j, k] / (1.0 + te.exp(-a[i, j, k])) * c[i, j, k], name="y")
    return [x, w, v, y]


TE = {
    "add": _add, "mul": _mul, "relu": _relu, "batchnorm1": _batchnorm, "batchnorm2": _batchnorm, "bmm": _bmm,
    "conv1": _conv, "conv2": _conv, "layernorm1": _layernorm, "layernorm2": _layernorm, "matmul": _matmul,
    "reducemean": _reducemean, "relu_ffn": _relu_ffn, "rmsnorm": _rmsnorm, "softmax": _softmax, "swiglu": _swiglu,
}


def prim_func(kernel: str, shape: dict[str, int]):
    return te.create_prim_func(TE[kernel](**shape))


def _in_process_builder():
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for item in build_inputs:
                try:
                    results.append(BuilderResult(default_export(default_build(item.mod, item.target, None)), None))
                except Exception as error:  # a candidate that does not build is a failed trial, not a crash
                    results.append(BuilderResult(None, f"{type(error).__name__}: {str(error)[:300]}"))
            return results

    return InProcessBuilder()


def tune(kernel: str, shape: dict[str, int], trials: int, work_dir: str | None = None,
         run_timeout_s: float = 30.0):
    """The kernel's IRModule with the best schedule MetaSchedule finds in `trials` trials; raises PeerFailure
    when it finds none. Also returns the median times of the trials that ran (seconds, as the database
    lists them: best first), None for a trial that failed to run."""
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": prim_func(kernel, shape)})
    tgt = target()
    with tempfile.TemporaryDirectory(prefix="tvm-ms-") as scratch:
        directory = work_dir or scratch
        runner = ms.runner.LocalRunner(timeout_sec=run_timeout_s,
                                       evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=3,
                                                                                  min_repeat_ms=50))
        database = ms.tune_tir(mod, tgt, directory, max_trials_global=trials,
                               num_trials_per_iter=min(trials, 16), cost_model=COST_MODEL,
                               builder=_in_process_builder(), runner=runner, seed=0)
        history = []
        for record in database.get_all_tuning_records():
            secs = [float(s) for s in record.run_secs] if record.run_secs else []
            history.append(float(np.median(secs)) if secs and min(secs) < 1e9 else None)
        schedule = ms.tir_integration.compile_tir(database, mod, tgt)
    if schedule is None:
        raise PeerFailure(f"no valid schedule in {trials} trials")
    return schedule.mod, history


def build(kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray], trials: int = 0,
          work_dir: str | None = None, **_: Any) -> Prepared:
    """`trials` 0: the default schedule (fast to build, for tests); else MetaSchedule with that many trials."""
    notes: dict[str, Any] = {}
    if trials > 0:
        mod, history = tune(kernel, shape, trials, work_dir)
        notes["trials"] = history
    else:
        mod = tvm.IRModule({"main": prim_func(kernel, shape)})
    lib = tvm.compile(mod, target=target())
    dev = tvm.cpu()
    names = input_names(kernel)
    args = [tvm.runtime.tensor(np.ascontiguousarray(inputs[n]), dev) for n in names]
    out = tvm.runtime.empty(output_shape(kernel, shape), "float32", dev)
    main = lib["main"]

    def run() -> Any:
        main(*args, out)
        return out

    def refresh(values: Mapping[str, np.ndarray]) -> None:
        for name, arg in zip(names, args, strict=True):
            arg.copyfrom(values[name])

    return Prepared(run=run, fetch=lambda result: result.numpy(), refresh=refresh, notes=notes)
