"""The peers PerfDojo's library kernels are compared with: numpy, PyTorch eager, torch.compile (inductor),
ONNX Runtime and TVM MetaSchedule, each computing exactly what the kernel's `.dojo` spec computes, at any shape.

`dojo library build --peers` records their times in the library's manifest (`peer_times`), and
bench/library.py compares PerfDojo with them. The peers other than numpy need the `bench` extra
(torch, onnxruntime, apache-tvm); a peer whose package is missing is a failure with that reason.

Each peer is a module with `NAME` and `build(kernel, shape, inputs, **options) -> Prepared`: whatever setup
the peer needs (graph construction, compilation, tuning), then `Prepared.run()` runs the kernel once on
inputs the peer holds (preallocated, the same values for every peer: `dojo_ir.random_inputs(spec, seed)`),
`Prepared.fetch(result)` turns what `run` returned into a numpy array, and `Prepared.refresh(values)`
writes other input values into the peer's input memory. `evaluate` builds, checks the output against a
reference and times it with fresh inputs before each run, as PerfDojo's runner does (the paper's section
4.2.3): the inputs are just written, as a previous operation would leave them, and no run finds the last
one's data in the cache. It turns every failure into an `Outcome` with a short reason.

    spec = spec_of("softmax", shape)
    inputs = random_inputs(spec, 0)
    expected = reference("softmax", inputs)          # numpy in float64
    outcome = evaluate("torch", "softmax", shape, inputs, expected)
"""

from __future__ import annotations

import importlib
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from codegen.build import default_cache_dir
from dojo_ir import Program, load, random_inputs
from dojo_ir.library import KERNELS
from runner.files import exclusive

from ..kernels import KernelSpec, LibraryError

THREADS = 2
# module names, in the order the tables show them
PEERS: dict[str, str] = {
    "numpy": "numpy_peer",
    "torch": "torch_peer",
    "torch.compile": "compile_peer",
    "onnxruntime": "ort_peer",
    "tvm": "tvm_peer",
}
DEFAULT = ("numpy", "torch", "torch.compile", "onnxruntime")  # what `--peers` alone times
RTOL = 1e-3
FRESH_SEED = 1  # the other input values that refreshing alternates with the given ones


class PeerFailure(Exception):
    """A peer could not produce the kernel (no valid schedule, an unsupported operator): a result, not a bug."""


@dataclass
class Prepared:
    run: Callable[[], Any]
    fetch: Callable[[Any], np.ndarray]
    refresh: Callable[[Mapping[str, np.ndarray]], None]
    notes: dict[str, Any] = field(default_factory=dict)


def copy_into(buffers: Mapping[str, np.ndarray]) -> Callable[[Mapping[str, np.ndarray]], None]:
    """A `Prepared.refresh` for a peer that reads its inputs from the numpy arrays `buffers`."""

    def refresh(values: Mapping[str, np.ndarray]) -> None:
        for name, buffer in buffers.items():
            np.copyto(buffer, values[name])

    return refresh


@dataclass
class Outcome:
    peer: str
    kernel: str
    median_s: float | None = None
    min_s: float | None = None
    repeats: int = 0
    setup_s: float = 0.0
    failure: str | None = None  # "exception: ...", "wrong numbers: ...", "no valid schedule ..."
    max_error: float | None = None  # largest |actual - expected| / (|expected| + scale)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.median_s is not None


@cache
def _spec_text(kernel: str, shape: tuple[tuple[str, int], ...]) -> str:
    return KERNELS[kernel].generate(**dict(shape))


def spec_of(kernel: str, shape: dict[str, int]) -> Program:
    return load(_spec_text(kernel, tuple(sorted(shape.items()))))


def input_names(kernel: str) -> tuple[str, ...]:
    return tuple(load(KERNELS[kernel].small()).inputs)


def output_shape(kernel: str, shape: dict[str, int]) -> tuple[int, ...]:
    spec = spec_of(kernel, shape)
    (name,) = spec.outputs
    return tuple(spec.buffer_of[name].shape)


def peer_module(peer: str):
    """The peer's module; raises ImportError when its package is not installed."""
    return importlib.import_module(f"{__name__}.{PEERS[peer]}")


def reference(kernel: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The kernel's output computed by numpy in float64 from the (float32) inputs."""
    from . import numpy_peer

    return numpy_peer.KERNELS[kernel](**{k: v.astype(np.float64) for k, v in inputs.items()})


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL) -> tuple[bool, float]:
    """Within `rtol` of the reference, relative to |expected| plus the reference's mean magnitude (so that
    rounding in long reductions that cancel to near zero is not a relative error of 1); and the worst ratio."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return False, float("inf")
    if not np.all(np.isfinite(actual)):
        return False, float("inf")
    scale = float(np.mean(np.abs(expected))) or 1.0
    error = float(np.max(np.abs(actual.astype(np.float64) - expected) / (np.abs(expected) + scale)))
    return error <= rtol, error


def time_it(run: Callable[[], Any], min_time_s: float = 0.5, warmup: int = 2, min_repeats: int = 3,
            max_repeats: int = 1000, max_time_s: float = 30.0,
            refresh: Callable[[int], None] | None = None) -> tuple[float, list[float]]:
    """Median wall time of `run()` after `warmup` calls, over repetitions until at least `min_time_s` are
    timed (and `min_repeats`; at most `max_repeats` or `max_time_s`). `refresh(r)`, untimed, comes
    before the r-th call."""
    calls = 0

    def fresh() -> None:
        nonlocal calls
        if refresh is not None:
            refresh(calls)
        calls += 1

    for _ in range(warmup):
        fresh()
        run()
    times: list[float] = []
    while len(times) < max_repeats and (sum(times) < min_time_s or len(times) < min_repeats):
        fresh()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        if sum(times) > max_time_s and len(times) >= 1:
            break
    return statistics.median(times), times


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first[:160]}"


def machine_lock() -> AbstractContextManager[Any]:
    """The runner's `bench.lock` (runner/local.py), held alone: no other timing on this machine meanwhile."""
    return exclusive(default_cache_dir() / "bench.lock")


def evaluate(peer: str, kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray],
             expected: np.ndarray | None, min_time_s: float = 0.5,
             lock: Callable[[], AbstractContextManager[Any]] | None = None, **options: Any) -> Outcome:
    """Build, check and time one peer on one kernel; never raises for the peer's failures. `lock` is held
    while timing (the runner's `bench.lock`, so that no two benchmarks on this machine time each other)."""
    outcome = Outcome(peer, kernel)
    started = time.perf_counter()
    try:
        module = peer_module(peer)
    except ImportError as error:
        outcome.failure = f"not installed: {_reason(error)}"
        return outcome
    try:
        # the peer's own copy, which refreshing overwrites
        prepared = module.build(kernel, shape, {k: v.copy() for k, v in inputs.items()}, **options)
        outcome.notes = prepared.notes
        result = prepared.fetch(prepared.run())  # the first call compiles (torch.compile): setup
        outcome.setup_s = time.perf_counter() - started
    except PeerFailure as error:
        outcome.failure = str(error)
        outcome.setup_s = time.perf_counter() - started
        return outcome
    except Exception as error:  # noqa: BLE001 - every peer failure is a result
        outcome.failure = f"exception: {_reason(error)}"
        outcome.notes["traceback"] = traceback.format_exc(limit=4)
        outcome.setup_s = time.perf_counter() - started
        return outcome
    if expected is not None:
        good, error = compare(result, expected)
        outcome.max_error = error
        if not good:
            outcome.failure = f"wrong numbers: error {error:.2g} > {RTOL:g}"
            return outcome
    fresh = (inputs, random_inputs(spec_of(kernel, shape), FRESH_SEED))
    try:
        with lock() if lock is not None else nullcontext():
            outcome.median_s, times = time_it(prepared.run, min_time_s=min_time_s,
                                              refresh=lambda r: prepared.refresh(fresh[r % 2]))
        outcome.repeats, outcome.min_s = len(times), min(times)
    except Exception as error:  # noqa: BLE001
        outcome.failure = f"exception while timing: {_reason(error)}"
    return outcome


def peer_times(spec: KernelSpec, peers: Sequence[str], min_time_s: float = 0.5) -> tuple[tuple[str, float | None], ...]:
    """Each of `peers`' median time on the library kernel `spec` (None where it failed or gave other
    numbers than the float64 reference); () for a kernel of a file, which has no peer. Each is timed on
    this machine with fresh inputs for at least `min_time_s`, holding the runner's whole-machine lock
    (runner/local.py)."""
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise LibraryError(f"unknown peer {', '.join(unknown)}; the peers are {', '.join(PEERS)}")
    if spec.library is None:
        return ()
    shape = dict(spec.shape)
    inputs = random_inputs(spec.program, 0)
    expected = reference(spec.library, inputs)
    times = []
    for peer in peers:
        outcome = evaluate(peer, spec.library, shape, inputs, expected, min_time_s=min_time_s, lock=machine_lock)
        times.append((peer, outcome.median_s if outcome.ok else None))
    return tuple(times)
