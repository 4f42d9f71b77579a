"""`build_library`: tune kernels and write them out as a library.

    result = build_library(resolve(["softmax", "matmul"]), Path("lib"), BuildOptions(KernelTuneOptions("sa", 100)))

The directory, when done:

    kernels/NAME.spec.dojo   the spec, as tuned
    kernels/NAME.dojo        the tuned program, its derivation naming NAME.spec.dojo (`dojo replay`)
    kernels/NAME.json        the tuning record (manifest.Tuned)
    logs/NAME.METHOD.GRAPH.jsonl   every evaluation of the search (agent.evaluate's log)
    src/NAME.c               the kernel's C, with its entry point (csource.py)
    src/_workspace.c         the calling thread's workspace, which every kernel shares (csource.py)
    libLIB.so, LIB.h, LIB.py the shared library, its header and the Python module (LIB: `name`)
    manifest.json            the library's description (manifest.py)

Every file is written atomically. Resuming: a kernel whose record has the same spec hash, target,
method, budget, graph and seed (and derived-file moves) is not tuned again, nor, for a pass, while the
pass still plays the recorded moves (a newer PerfDojo's pass rebuilds it); otherwise its search
resumes from its log when the log is of the same starting program (`KernelTuneOptions.resume`, which
retraces the search through the logged evaluations at no cost), else starts afresh. A kernel's
record is written only when its tuning finished, so an interrupted build (Ctrl-C, `should_stop`,
a crash) leaves the finished kernels and every logged evaluation, and running it again goes on.

Kernels are tuned one after another with the local runner, or with a `Cluster` up to
`cluster.slots` (or `workers`) at once, each search in a thread of this process and each
evaluation a task on the cluster (cluster.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.evaluate import read_log, replay_moves, text_hash
from agent.methods import SEARCHES
from agent.passes import PASSES as PASS_FUNCTIONS
from agent.tune import KernelTuneOptions, TuneProgress, tune
from codegen.targets import get_target
from dojo_ir import Program, to_text
from runner.files import write_atomically
from runner.local import LocalRunner, iterations
from runner.measure import Runner
from runner.result import format_time

from . import csource
from .cluster import Cluster
from .kernels import KernelSpec, LibraryError, check_library_name, check_names
from .manifest import FORMAT, Tuned, entry, read_tuned, write_json
from .peers import peer_times
from .pymodule import module_text


@dataclass(frozen=True)
class BuildEvent:
    """What a build tells as it goes: `kind` is "skipped", "resuming", "tuning", "progress",
    "tuned", "peers" or "library"; `message` says it for people; `evaluations` is the kernel's
    count so far (its log's included) in "progress"."""

    kernel: str
    kind: str
    message: str
    evaluations: int | None = None


@dataclass(frozen=True)
class BuildResult:
    directory: Path
    manifest: dict[str, Any]
    tuned: tuple[str, ...]
    skipped: tuple[str, ...]


def search_log(out: Path, kernel: str, method: str, graph: str = "") -> Path:
    """The log of `kernel`'s evaluations by `method` (on `graph`, for a search) in the library `out`."""
    return out / "logs" / f"{kernel}.{method}.{graph if method in SEARCHES else 'pass'}.jsonl"


class _Stopped(Exception):
    """A kernel's tuning was stopped before it finished: nothing is recorded for it."""


def _resumable(log: Path, start: Program) -> bool:
    """Whether `log` holds evaluations of the search that starts at `start`."""
    try:
        evaluations = read_log(log)[1]
    except (OSError, ValueError):
        return False
    return bool(evaluations) and evaluations[0].index == 0 and evaluations[0].hash == text_hash(start)


@dataclass(frozen=True)
class BuildOptions:
    """The settings of a build: each kernel tuned as `tuning` says (its budget is per kernel, its
    target the library's), the library named `name`, at most `workers` kernels tuned at once on a
    cluster (default: as many as it has room for), and `peers` timed on each library kernel
    (libgen/peers)."""

    tuning: KernelTuneOptions
    name: str = "dojo"
    workers: int | None = None
    peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "peers", tuple(self.peers))  # a list given: the options stay immutable


@dataclass(frozen=True)
class TuningPlan:
    """How kernels are tuned into the library `out` (every kernel of one build)."""

    out: Path
    tuning: KernelTuneOptions

    @property
    def graph(self) -> str:
        """The graph the method searches, "" for a method that searches none (as records say it)."""
        return self.tuning.graph if self.tuning.method in SEARCHES else ""

    def key(self, spec: KernelSpec) -> tuple[str, str, str, int, str, int]:
        tuning = self.tuning
        return (text_hash(spec.program), tuning.target, tuning.method, tuning.budget, self.graph, tuning.seed)

    def record_path(self, spec: KernelSpec) -> Path:
        return self.out / "kernels" / f"{spec.name}.json"

    def log_path(self, spec: KernelSpec) -> Path:
        return search_log(self.out, spec.name, self.tuning.method, self.graph)

    def done(self, spec: KernelSpec) -> Tuned | None:
        """The kernel's record when it can be reused as it is."""
        record = read_tuned(self.record_path(spec))
        if record is None or record.key != self.key(spec) or record.moves[:len(spec.prefix)] != spec.prefix:
            return None
        if self.tuning.method in PASS_FUNCTIONS:
            return record if record.moves == self._pass_moves(spec) else None
        _, applied = replay_moves(spec.program, record.moves)
        return record if list(applied) == list(record.moves) else None

    def _pass_moves(self, spec: KernelSpec) -> tuple[str, ...]:
        """The moves the pass plays on `spec` now. A pass's record is reused only while they are
        the same: the pass changes with PerfDojo, and rebuilding with a newer one must give its
        programs, where a search's record is kept whatever changed (its budget is spent)."""
        start, _ = replay_moves(spec.program, spec.prefix)
        _, applied = replay_moves(start, PASS_FUNCTIONS[self.tuning.method](start, get_target(self.tuning.target)))
        return (*spec.prefix, *applied)

    def tune(self, spec: KernelSpec, runner: Runner | None, emit: Callable[[BuildEvent], None],
             stop: Callable[[], bool]) -> Tuned:
        directory = self.out / "kernels"
        write_atomically(directory / f"{spec.name}.spec.dojo", spec.text.encode())
        log = self.log_path(spec)
        start, _ = replay_moves(spec.program, spec.prefix)
        resume = _resumable(log, start)
        emit(BuildEvent(spec.name, "resuming" if resume else "tuning",
                        f"{spec.name}: {'resuming from' if resume else 'tuning, logging to'} {log}"))

        def progress(p: TuneProgress) -> None:
            speedup = "" if p.speedup is None else f" ({p.speedup:.2f}x)"
            emit(BuildEvent(spec.name, "progress", f"{spec.name}: {p.evaluations}/{p.budget} evaluations, "
                            f"best {format_time(p.best_s)}{speedup}", p.evaluations))

        result = tune(spec.program, replace(self.tuning, resume=resume), spec_path=f"{spec.name}.spec.dojo",
                      prefix=spec.prefix, log=log, runner=runner, on_progress=progress, should_stop=stop)
        if result.stopped_early:
            raise _Stopped(spec.name)
        write_atomically(directory / f"{spec.name}.dojo", to_text(result.program).encode())
        tuned = Tuned(spec.name, *self.key(spec), tuple(result.moves), result.time_s, result.spec_s, result.evaluations)
        write_json(self.record_path(spec), tuned.to_json())
        speedup = "" if result.speedup is None else f", {result.speedup:.2f}x"
        emit(BuildEvent(spec.name, "tuned", f"{spec.name}: {self.tuning.method}: {len(result.moves)} moves, "
                                            f"{format_time(result.spec_s)} -> {format_time(result.time_s)}{speedup} "
                                            f"after {result.evaluations} evaluations"))
        return tuned


def build_library(kernels: Sequence[KernelSpec], out: Path, options: BuildOptions, *, runner: Runner | None = None,
                  cluster: Cluster | None = None, on_event: Callable[[BuildEvent], None] | None = None,
                  should_stop: Callable[[], bool] | None = None) -> BuildResult:
    """Tune `kernels` (skipping those already tuned in `out`) and write the library into `out` as
    `options` say; see the module's docstring. `runner` times evaluations (default: this
    machine's) unless `cluster` is given. Raises LibraryError for bad options or a library that
    does not build, KeyboardInterrupt after stopping the searches cleanly when interrupted (so is
    `should_stop`)."""
    check_library_name(options.name)
    check_names(kernels)
    target = options.tuning.target
    chosen = get_target(target)
    if chosen.language != "c":
        raise LibraryError(f"a library is C: target {target} generates {chosen.language}")
    if out.exists() and not out.is_dir():
        raise LibraryError(f"{out}: error: not a directory")
    for directory in (out, out / "kernels", out / "logs", out / "src"):
        directory.mkdir(parents=True, exist_ok=True)
    plan = TuningPlan(out, options.tuning)
    emit = on_event or (lambda _: None)

    records: dict[str, Tuned] = {}
    pending = []
    for spec in kernels:
        record = plan.done(spec)
        if record is None:
            pending.append(spec)
            continue
        records[spec.name] = record
        emit(BuildEvent(spec.name, "skipped", f"{spec.name}: already tuned in {plan.record_path(spec)}, skipped"))
    records.update(_tune_all(plan, pending, runner, cluster, options.workers, emit, should_stop))

    if options.peers:
        for spec in kernels:
            record = records[spec.name]
            if spec.library is None or {p for p, _ in record.peers} >= set(options.peers):
                continue
            times = peer_times(spec, options.peers)
            records[spec.name] = record = replace(record, peers=tuple({**dict(record.peers), **dict(times)}.items()))
            write_json(plan.record_path(spec), record.to_json())
            emit(BuildEvent(spec.name, "peers", f"{spec.name}: " + ", ".join(
                f"{peer} {format_time(time_s)}" for peer, time_s in times)))

    manifest = write_library(out, options.name, kernels, records, target)
    emit(BuildEvent("", "library", f"wrote {out / manifest['shared_library']}, {out / manifest['header']}, "
                                   f"{out / manifest['module']} and {out / 'manifest.json'} "
                                   f"({len(kernels)} kernels)"))
    return BuildResult(out, manifest, tuple(s.name for s in pending), tuple(s.name for s in kernels
                                                                             if s not in pending))


def _tune_all(plan: TuningPlan, pending: Sequence[KernelSpec], runner: Runner | None, cluster: Cluster | None,
              workers: int | None, emit: Callable[[BuildEvent], None],
              should_stop: Callable[[], bool] | None) -> dict[str, Tuned]:
    """Tune every pending kernel, several at once on a cluster; on an interruption, stop every
    search (each ends after its current evaluation), keep what finished and re-raise."""
    if not pending:
        return {}
    if cluster is not None:
        runner = cluster.runner()
        parallel = max(1, min(workers or cluster.slots, cluster.slots, len(pending)))
    else:
        runner = runner if runner is not None else LocalRunner()
        parallel = 1
    stopping = threading.Event()

    def stop() -> bool:
        if should_stop is not None and should_stop():
            stopping.set()
        return stopping.is_set()

    if parallel > 1:
        # the costliest first (a spec's operation count stands for its evaluations' cost), so that no
        # long kernel is left running alone at the end while the other workers idle
        pending = sorted(pending, key=lambda spec: -iterations(spec.program))
    finished: dict[str, Tuned] = {}
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="dojo-library") as pool:
        futures = [pool.submit(plan.tune, spec, runner, emit, stop) for spec in pending]
        try:
            for spec, future in zip(pending, futures, strict=True):
                try:
                    finished[spec.name] = interruptible_result(future)
                except _Stopped:
                    stopping.set()
        except BaseException:
            stopping.set()
            for future in futures:
                future.cancel()
            raise
    if stopping.is_set():
        raise KeyboardInterrupt
    return finished


# How often the waiting thread wakes. Linux hands a Ctrl-C to any thread of the process, and Python
# runs its handler in the main thread only once that thread runs again: waiting without a timeout, it
# would raise KeyboardInterrupt only after the search that the signal meant to stop had finished.
_WAKE_S = 0.1


def interruptible_result(future: Future) -> Any:
    """`future.result()`, waking every `_WAKE_S` so that a Ctrl-C reaches the waiting thread while
    the work it interrupts is still under way."""
    while True:
        try:
            return future.result(timeout=_WAKE_S)
        except TimeoutError:
            continue


def tune_kernel(spec: KernelSpec, plan: TuningPlan, runner: Runner | None = None,
                on_event: Callable[[BuildEvent], None] | None = None,
                should_stop: Callable[[], bool] | None = None) -> Tuned:
    """Tune one kernel into the library directory `plan.out` as `build_library` does (its
    program, record and log there), going on from its log when there is one of the same start:
    tuned again with a larger budget, it spends only the difference. Raises KeyboardInterrupt
    when `should_stop` stopped it (its evaluations stay in the log)."""
    out = plan.out
    for directory in (out / "kernels", out / "logs"):
        directory.mkdir(parents=True, exist_ok=True)
    try:
        return plan.tune(spec, runner if runner is not None else LocalRunner(), on_event or (lambda _: None),
                         should_stop or (lambda: False))
    except _Stopped:
        raise KeyboardInterrupt from None


def _sources(name: str, kernels: Sequence[KernelSpec], records: Mapping[str, Tuned],
             target: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The library's C units by their paths under its directory, as this version of the generator
    writes them, and the manifest's entries."""
    chosen, prefix = get_target(target), name.upper()
    units, entries = {}, []
    for spec in kernels:
        record = records[spec.name]
        program, _ = replay_moves(spec.program, record.moves)
        symbol = f"{name}_{spec.name}"
        units[f"src/{spec.name}.c"] = csource.unit(program, symbol, prefix, chosen)
        description = spec.program.comments[0].lstrip("#").strip() if spec.program.comments else spec.origin
        entries.append(entry(record, program, symbol, description, f"kernels/{spec.name}.dojo"))
    units["src/_workspace.c"] = csource.workspace_unit(prefix)  # a kernel's name never starts with `_`
    return units, entries


def stale_sources(out: Path, name: str, kernels: Sequence[KernelSpec], records: Mapping[str, Tuned],
                  target: str = "native") -> list[str]:
    """The C units of the library `name` in `out` that differ from what this version of the generator
    writes for the same programs (missing ones included): a library written by an earlier version
    when there are any."""
    units, _ = _sources(name, kernels, records, target)
    return [path for path, text in units.items()
            if not (out / path).is_file() or (out / path).read_text(encoding="utf-8") != text]


def write_library(out: Path, name: str, kernels: Sequence[KernelSpec], records: Mapping[str, Tuned],
                  target: str = "native") -> dict[str, Any]:
    """The library `name` in `out` of `kernels`, each as its record's moves make it: the C units,
    the shared library, the header, the Python module and the manifest, which it returns."""
    chosen = get_target(target)
    for directory in (out / "kernels", out / "src"):
        directory.mkdir(parents=True, exist_ok=True)
    prefix = name.upper()
    units, entries = _sources(name, kernels, records, target)
    for path, text in units.items():
        write_atomically(out / path, text.encode())
    sources = [out / path for path in units]
    shared = f"lib{name}.so"
    csource.compile_library(sources, chosen, out / shared)
    write_atomically(out / f"{name}.h", csource.header(name, prefix, entries).encode())
    write_atomically(out / f"{name}.py", module_text().encode())
    manifest = {"format": FORMAT, "library": name, "target": target, "shared_library": shared,
                "header": f"{name}.h", "module": f"{name}.py", "kernels": entries}
    write_json(out / "manifest.json", manifest)
    return manifest
