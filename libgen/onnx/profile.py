"""`dojo model profile`: where a model's time goes when it runs on its library.

    runner = ModelRunner("encoder.onnx", "lib/")
    report = profile_model(runner, random_feeds(runner.inputs, seed=0), repeats=20)
    print(format_profile(report))      # slowest kernel first, then ONNX Runtime's parts, then the total
    report.kernels[0].share            # of the model's time

The model runs `repeats` times after one warm-up run, each step timed inside the runner
(`ModelRunner.run_timed`). With `warm`, each of those runs is followed by one whose kernels are
each called twice in a row, the second call timed (`run_timed(warm=True)`): a kernel's warm time
is what it takes with its own data in cache, as when timed alone, and its time beside it says what
the model around it costs (its weights gone from cache since its last call, its input left by the
kernel before in the other core's cache). In one profile of ResNet-50 (Intel Xeon, 2 cores), its
3x3 convolution at 64x56x56 took 1.16x its warm time in the model, and the one at 256x14x14,
whose panels of weights the C prefetches (codegen/prefetch.py), 1.02x.

A kernel's time is the median over the runs of the sum of its calls in one run; an ONNX Runtime
part's is the median of that session's times; copying the inputs in and the outputs out is a part
of its own. The model's time is the sum of those medians, so the
shares add up to one (`run_s` is the median of the whole runs, which also holds the loop's own
cost). A kernel's flops are its spec's (`runner.roofline.work`, per call, times its calls), and
its roofline fraction is the time the roofline allows its calls (`bound_s` at this machine's
`machine_limits()`) over the time they took: 1 is as fast as the machine allows.

`profile_models` profiles the model on several libraries, their runs taken in turn, so that the
machine's other work weighs on each alike (their ratio is paired by run). `profile_in_subprocess`
profiles in a fresh process: a process loads a shared library of one path once, so a library
rebuilt since (as `dojo model tune` does between rounds) must be profiled from another process.
`python -m libgen.onnx.profile MODEL LIBDIR...` prints the JSON it reads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from codegen.build import default_cache_dir
from runner.affinity import assigned, on_cpus
from runner.local import timing_lock
from runner.result import format_time
from runner.roofline import Machine, MachineError, bound_s, machine_limits, work

from .run import Info, ModelRunner, RunError
from .shapes import parse_input_shapes

if TYPE_CHECKING:
    from .reference import Reference

DEFAULT_REPEATS = 20
# OpenMP's threads bound one per core, as the runner binds a timed binary's (runner/local.py): unbound,
# a thread waiting for work can share a core with the one doing it while another process holds the
# other core, and a kernel's call then takes a scheduler tick (milliseconds instead of microseconds)
BOUND_THREADS = {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the packages, for the child process


@dataclass(frozen=True)
class KernelTime:
    """A kernel's calls in one run of the model. `bound_s` is None when the machine's limits are
    unknown."""

    kernel: str
    nodes: tuple[str, ...]
    calls: int
    time_s: float
    share: float
    flops: int
    bound_s: float | None
    warm_s: float | None = None  # its calls' time with their data in cache, when profiled `warm`

    @property
    def gflops(self) -> float:
        return self.flops / self.time_s / 1e9 if self.time_s > 0 else 0.0

    @property
    def roofline(self) -> float | None:
        """The roofline's time over the measured one."""
        return None if self.bound_s is None or self.time_s <= 0 else self.bound_s / self.time_s


@dataclass(frozen=True)
class PartTime:
    """An ONNX Runtime session of the run (the nodes it runs), or the copies in and out (no nodes)."""

    nodes: tuple[str, ...]
    time_s: float
    share: float


@dataclass(frozen=True)
class ModelProfile:
    model: str
    repeats: int
    kernels: tuple[KernelTime, ...]  # slowest first
    onnxruntime: tuple[PartTime, ...]  # slowest first
    copies: PartTime
    total_s: float  # the sum of the parts' medians, which the shares divide
    run_s: float  # the median of the whole runs

    def kernel(self, name: str) -> KernelTime:
        return next(k for k in self.kernels if k.kernel == name)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "repeats": self.repeats, "total_s": self.total_s, "run_s": self.run_s,
                "kernels": [{**asdict(k), "nodes": list(k.nodes), "gflops": k.gflops, "roofline": k.roofline}
                            for k in self.kernels],
                "onnxruntime": [{**asdict(p), "nodes": list(p.nodes)} for p in self.onnxruntime],
                "copies": {"time_s": self.copies.time_s, "share": self.copies.share}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelProfile:
        kernels = tuple(KernelTime(k["kernel"], tuple(k["nodes"]), k["calls"], k["time_s"], k["share"], k["flops"],
                                   k["bound_s"], k.get("warm_s")) for k in data["kernels"])
        parts = tuple(PartTime(tuple(p["nodes"]), p["time_s"], p["share"]) for p in data["onnxruntime"])
        copies = PartTime((), data["copies"]["time_s"], data["copies"]["share"])
        return cls(data["model"], data["repeats"], kernels, parts, copies, data["total_s"], data["run_s"])


def random_feeds(inputs: Mapping[str, Info], seed: int) -> dict[str, np.ndarray]:
    """Inputs for a run: floats from a standard normal, integers and booleans 0 or 1 (token ids
    and masks that every model accepts)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, info in inputs.items():
        assert info.shape is not None  # the runner's inputs have fixed shapes
        if np.issubdtype(info.dtype, np.floating):
            feeds[name] = rng.standard_normal(info.shape).astype(info.dtype)
        else:
            feeds[name] = rng.integers(0, 2, info.shape).astype(info.dtype)
    return feeds


def bind_openmp_threads() -> None:
    """Bind the threads of every OpenMP runtime this process loads from now on (`BOUND_THREADS`,
    unless the environment sets them): call it before the first library loads."""
    for name, value in BOUND_THREADS.items():
        os.environ.setdefault(name, value)


def profile_model(runner: ModelRunner, feeds: Mapping[str, np.ndarray], repeats: int = DEFAULT_REPEATS,
                  machine: Machine | None = None, beside: Callable[[], object] | None = None,
                  warm: bool = False) -> ModelProfile:
    """Run the model `repeats` times (after a warm-up run) and say where its time went; see the
    module's docstring. `machine` defaults to this machine's measured limits; `beside` runs once
    after each run (an ONNX Runtime session to compare with, libgen/onnx/reference.py); `warm`
    times each kernel with its data in cache too."""
    return profile_models([runner], feeds, repeats, machine, beside, warm)[0]


def profile_models(runners: Sequence[ModelRunner], feeds: Mapping[str, np.ndarray], repeats: int = DEFAULT_REPEATS,
                   machine: Machine | None = None, beside: Callable[[], object] | None = None,
                   warm: bool = False) -> list[ModelProfile]:
    """`profile_model` of each runner (a model on several libraries), their runs taken in turn, so
    that what else the machine does weighs on each alike; `beside` after each round."""
    if repeats < 1:
        raise ValueError(f"the repeats must be at least 1, not {repeats}")
    if machine is None:
        try:
            machine = machine_limits()
        except MachineError:
            machine = None  # no roofline: the times stand alone
    runs: list[list[list[float]]] = [[] for _ in runners]
    warm_runs: list[list[list[float]]] = [[] for _ in runners]
    # as the runner times a kernel: no other timing of this project on these cores meanwhile
    with timing_lock(default_cache_dir(), assigned()):
        for runner in runners:
            runner.run_timed(feeds)
        if beside is not None:
            beside()
        for _ in range(repeats):
            for taken, warm_taken, runner in zip(runs, warm_runs, runners, strict=True):
                taken.append(runner.run_timed(feeds)[1])
                if warm:
                    warm_taken.append(runner.run_timed(feeds, warm=True)[1])
            if beside is not None:
                beside()
    return [_profile(runner, taken, machine, warm_taken)
            for runner, taken, warm_taken in zip(runners, runs, warm_runs, strict=True)]


def _profile(runner: ModelRunner, runs: Sequence[Sequence[float]], machine: Machine | None,
             warm_runs: Sequence[Sequence[float]] = ()) -> ModelProfile:
    """The profile of `runs`, each the seconds of `run_timed`'s parts (and of `warm_runs`, its
    warm ones, when there are any)."""
    steps = runner.steps
    kernel_steps: dict[str, list[int]] = {}
    for position, step in enumerate(steps):
        if step.kernel is not None:
            kernel_steps.setdefault(step.kernel, []).append(position + 1)  # the copies in come first

    def medians(taken: Sequence[Sequence[float]]) -> dict[str, float]:
        return {name: statistics.median(sum(run[p] for p in positions) for run in taken)
                for name, positions in kernel_steps.items()}

    kernel_s, warm_s = medians(runs), medians(warm_runs) if warm_runs else {}
    session_s = {p: statistics.median(run[p + 1] for run in runs) for p, s in enumerate(steps) if s.kernel is None}
    copies_s = statistics.median(run[0] + run[-1] for run in runs)
    total_s = sum(kernel_s.values()) + sum(session_s.values()) + copies_s

    def share(seconds: float) -> float:
        return seconds / total_s if total_s > 0 else 0.0

    kernels = []
    for name, positions in kernel_steps.items():
        spec = work(_spec(runner, name))
        calls = len(positions)
        bound = None if machine is None else bound_s(spec, machine) * calls
        nodes = tuple(node for p in positions for node in steps[p - 1].nodes)
        kernels.append(KernelTime(name, nodes, calls, kernel_s[name], share(kernel_s[name]), spec.flops * calls,
                                  bound, warm_s.get(name)))
    parts = [PartTime(steps[p].nodes, seconds, share(seconds)) for p, seconds in session_s.items()]
    return ModelProfile(runner.model, len(runs), tuple(sorted(kernels, key=lambda k: -k.time_s)),
                        tuple(sorted(parts, key=lambda p: -p.time_s)), PartTime((), copies_s, share(copies_s)),
                        total_s, statistics.median(sum(run) for run in runs))


def _spec(runner: ModelRunner, kernel: str) -> Any:
    from dojo_ir import load

    return load(runner.imported.kernels[kernel])


# -- for people -------------------------------------------------------------------------------------

def _nodes_text(nodes: Sequence[str], width: int = 40) -> str:
    text = ", ".join(nodes)
    if len(text) <= width:
        return text
    return f"{nodes[0][:width - 12]} +{len(nodes) - 1} more" if len(nodes) > 1 else text[:width - 3] + "..."


def _against(ours_s: float, reference_s: float) -> tuple[str, str]:
    """ONNX Runtime's time for the same nodes, and it over ours (above 1, ours is faster)."""
    if reference_s <= 0:
        return "", ""
    return format_time(reference_s), f"{reference_s / ours_s:.2f}" if ours_s > 0 else ""


def _warm(kernel: KernelTime) -> tuple[str, str]:
    """The kernel's warm time, and its time in the model over it: above 1, what the context costs."""
    if kernel.warm_s is None or kernel.warm_s <= 0:
        return "", ""
    return format_time(kernel.warm_s), f"{kernel.time_s / kernel.warm_s:.2f}"


def format_profile(report: ModelProfile, reference: Reference | None = None) -> str:
    """The profile as a table: the kernels, slowest first, then ONNX Runtime's parts and the total;
    when it was profiled `warm`, each kernel's warm time and its time over it; with a `reference`,
    ONNX Runtime's own time for each row's nodes and it over ours."""
    warm = any(k.warm_s is not None for k in report.kernels)
    blank_warm = ("", "") if warm else ()
    extra = (("warm", "time / warm") if warm else ()) \
        + (("ONNX Runtime", "ORT / ours") if reference is not None else ())
    rows = [("kernel", "nodes", "calls", "time", "share", "GFLOP/s", "roofline", *extra)]
    for k in report.kernels:
        roofline = "" if k.roofline is None else f"{k.roofline:.0%}"
        rows.append((k.kernel, _nodes_text(k.nodes), str(k.calls), format_time(k.time_s), f"{k.share:.1%}",
                     f"{k.gflops:.3g}", roofline, *(_warm(k) if warm else ()),
                     *(_against(k.time_s, reference.kernels.get(k.kernel, 0.0)) if reference else ())))
    for i, part in enumerate(report.onnxruntime):
        rows.append(("(ONNX Runtime)", _nodes_text(part.nodes), "1", format_time(part.time_s), f"{part.share:.1%}",
                     "", "", *blank_warm, *(_against(part.time_s, reference.parts[i]) if reference else ())))
    rows.append(("(copies in/out)", "", "", format_time(report.copies.time_s), f"{report.copies.share:.1%}", "", "",
                 *("",) * len(extra)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = set(range(2, len(rows[0])))

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    library_s = sum(k.time_s for k in report.kernels)
    onnxruntime_s = sum(p.time_s for p in report.onnxruntime)
    nodes = sum(len(p.nodes) for p in report.onnxruntime)
    lines = [line(rows[0]), line(["-" * w for w in widths]), *map(line, rows[1:])]
    elsewhere = (f"ONNX Runtime {format_time(onnxruntime_s)} ({onnxruntime_s / report.total_s:.1%}) for {nodes} "
                 "nodes" if report.onnxruntime else "nothing on ONNX Runtime")
    lines.append(f"total {format_time(report.total_s)}, the sum of the medians over {report.repeats} runs (a whole "
                 f"run: {format_time(report.run_s)}): library {format_time(library_s)} "
                 f"({library_s / report.total_s:.1%}) in {len(report.kernels)} kernels, {elsewhere}"
                 if report.total_s > 0 else "total 0 s")
    if reference is not None:
        lines.append(f"ONNX Runtime alone, its runs taken in turn: {format_time(reference.total_s)} in its nodes "
                     f"(ORT / ours {reference.total_s / report.total_s:.2f}), "
                     + (f"{format_time(reference.unmatched_s)} of it in {len(reference.unmatched)} nodes of none of "
                        f"these rows ({_nodes_text(reference.unmatched, 60)})" if reference.unmatched
                        else "every node in one of these rows"))
    return "\n".join(lines)


# -- in another process -----------------------------------------------------------------------------

def profile_in_subprocess(model: Path, libraries: Sequence[Path], fuse: bool | None, repeats: int = DEFAULT_REPEATS,
                          seed: int = 0, input_shapes: Mapping[str, Sequence[int]] | None = None
                          ) -> list[ModelProfile]:
    """`profile_models` of the model (its inputs at `input_shapes`) on each library as it is on disk
    now, in a fresh process, on random inputs of `seed`. Raises RunError with the child's message
    when it fails."""
    shapes = [f"--input-shape={name}={','.join(map(str, shape))}" for name, shape in (input_shapes or {}).items()]
    command = [sys.executable, "-m", "libgen.onnx.profile", str(model), *map(str, libraries), "--repeats", str(repeats),
               "--seed", str(seed), *([] if fuse is None else ["--fuse" if fuse else "--no-fuse"]), *shapes]
    path = os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))
    with on_cpus():  # else the child inherits this thread's affinity, which OpenMP may have narrowed to one core
        done = subprocess.run(command, capture_output=True, text=True,
                              env=BOUND_THREADS | os.environ | {"PYTHONPATH": path})
    if done.returncode != 0:
        raise RunError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                       f"profiling {model} failed (exit {done.returncode})")
    return [ModelProfile.from_json(data) for data in json.loads(done.stdout)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libgen.onnx.profile",
                                     description="profile MODEL on each LIBDIR, their runs in turn, and print "
                                     "the profiles as a JSON list")
    parser.add_argument("model", type=Path)
    parser.add_argument("libraries", type=Path, nargs="+", metavar="LIBDIR")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--input-shape", action="append", default=[])
    args = parser.parse_args(argv)
    bind_openmp_threads()
    try:
        shapes = parse_input_shapes(args.input_shape)
        runners = [ModelRunner(args.model, library, fuse=args.fuse, input_shapes=shapes) for library in args.libraries]
        reports = profile_models(runners, random_feeds(runners[0].inputs, args.seed), args.repeats)
    except (RunError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps([report.to_json() for report in reports]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
