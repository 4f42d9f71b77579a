"""Tuning on a Ray cluster: every evaluation is a Ray task on cores of its own, on some node.

    with Cluster("auto") as cluster:            # or "local", or a cluster's address
        result = tune(spec, KernelTuneOptions("sa", 100), spec_path=..., runner=cluster.runner())

The searches stay in the process that builds the library (libgen/build.py runs one per kernel in
a thread, up to `cluster.slots` at once); what they send out is each evaluation: generating,
compiling, running, timing and verifying one program, the work that takes the time. A `Cluster`'s
runner sends it to Ray as a task asking for `cores` CPUs, so Ray places it on a node with that
many free, and the task, on that node:

- claims `cores` of the node's CPUs that no other evaluation holds (an exclusive `flock` on
  `claim.cpuN.lock` in the runner's cache directory, tried in ascending order; a lock goes with
  the process that held it, so a killed worker frees its CPUs), and runs on them
  (`runner.affinity.on_cpus`): the compiler and the timed binary it starts run there;
- runs `runner.local.LocalRunner.run`, which gives OpenMP those CPUs only and, while timing,
  holds the timing locks of exactly those CPUs: two evaluations on one machine time in parallel
  on their own cores and never on the same ones (runner/local.py).

A worker process that dies mid-evaluation (killed, out of memory, its node lost) loses nothing
that was finished: the searches and their JSONL logs are in the building process, which records
an evaluation only once it has a result. Ray runs the task again in another worker process,
on another node if this one is gone, up to `retries` times (`max_retries`); after that the
evaluation counts as failed, like a program that crashed.

The nodes must have PerfDojo importable (the same environment: a local instance has it) and a C
compiler. Tasks ask for `cores` CPUs each: with 1, a node of N cores runs N evaluations at once,
each program timed on one core (its threads, if it has `:p` scopes, share that core); to tune for
whole nodes, ask for as many cores as a node has.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from io import TextIOWrapper
from pathlib import Path
from types import TracebackType
from typing import Any

from dojo_ir import Program, load, to_text
from dojo_ir.paths import without_comments
from runner.affinity import CPUS, on_cpus
from runner.local import LocalRunner
from runner.result import RunResult

from .kernels import LibraryError

RETRIES = 3
_CLAIM_WAIT_S = 0.05
_runner: LocalRunner | None = None


def _claim(count: int, directory: Path) -> list[tuple[int, TextIOWrapper]] | None:
    """`count` CPUs of the node that no other evaluation holds, each with its held lock; None
    when there are not that many free now."""
    held = []
    for cpu in sorted(CPUS):
        handle = open(directory / f"claim.cpu{cpu}.lock", "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        held.append((cpu, handle))
        if len(held) == count:
            return held
    for _, handle in held:
        handle.close()
    return None


@contextmanager
def pinned(count: int, directory: Path) -> Iterator[tuple[int, ...]]:
    """Run on `count` CPUs of this node that no other evaluation holds (waiting for them), and
    give them back afterwards."""
    if count > len(CPUS):
        raise ValueError(f"an evaluation asks for {count} cores, but this node has {len(CPUS)}")
    directory.mkdir(parents=True, exist_ok=True)
    while (held := _claim(count, directory)) is None:
        time.sleep(_CLAIM_WAIT_S)
    cpus = tuple(cpu for cpu, _ in held)
    try:
        with on_cpus(cpus):
            yield cpus
    finally:
        for _, handle in held:
            handle.close()


@lru_cache(maxsize=16)
def _program(text: str) -> Program:
    return load(text)


def evaluate_on_node(program: str, spec: str, target: str, repeats: int, warmup: int, cores: int) -> dict[str, Any]:
    """The Ray task: run `program` (text) against `spec` on `cores` CPUs of this node; the
    RunResult as JSON. One LocalRunner per worker process keeps the spec's inputs and reference
    outputs between the evaluations it runs."""
    global _runner
    if _runner is None:
        _runner = LocalRunner()
    with pinned(cores, _runner.cache_dir):
        return _runner.run(_program(program), target=target, repeats=repeats, warmup=warmup,
                           spec=_program(spec)).to_json()


class ClusterRunner:
    """A Runner (runner.measure.Runner) that runs each evaluation as a task on the cluster."""

    def __init__(self, remote: Any, cores: int, retries: int):
        self._remote, self._cores, self._retries = remote, cores, retries

    def run(self, program: Program, target: str = "native", repeats: int = 10, warmup: int = 2,
            spec: Program | None = None) -> RunResult:
        import ray

        texts = [to_text(without_comments(p)) for p in (program, spec if spec is not None else program)]
        task = self._remote.options(num_cpus=self._cores, max_retries=self._retries)
        try:
            return RunResult.from_json(ray.get(task.remote(*texts, target, repeats, warmup, self._cores)))
        except ray.exceptions.RayError as error:
            lines = str(error).strip().splitlines()
            reason = f"{type(error).__name__}: {lines[0] if lines else ''}"
            if isinstance(error, ray.exceptions.RayTaskError):
                return RunResult.failed(target, f"the evaluation failed on the cluster: {reason}", repeats)
            return RunResult.failed(target, f"the cluster lost this evaluation {self._retries + 1} times: {reason}",
                                    repeats)


class Cluster:
    """A connection to a Ray cluster: `address` "auto" (a running cluster that Ray finds, else a new
    local instance on this machine's cores), "local" (always a new local instance) or a cluster's
    address. Evaluations ask for `cores` CPUs each and are retried `retries` times when their worker
    dies. A new local instance offers `cpus` CPUs (default: this machine's). Closing it stops the
    instance if it started one."""

    def __init__(self, address: str = "auto", cores: int = 1, retries: int = RETRIES, cpus: int | None = None):
        try:
            import ray
        except ImportError:
            raise LibraryError("--ray needs Ray: pip install 'perfdojo[cluster]'") from None
        if cores < 1:
            raise LibraryError(f"an evaluation needs at least one core, not {cores}")
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            try:
                ray.init(address=None if address == "auto" else address, include_dashboard=False,
                         log_to_driver=False, logging_level="ERROR",
                         **({"num_cpus": cpus} if address == "local" and cpus is not None else {}))
            except (ConnectionError, ValueError, RuntimeError) as error:
                raise LibraryError(f"cannot connect to the Ray cluster `{address}`: {error}") from None
        self.cores = cores
        self.retries = retries
        self._remote = ray.remote(evaluate_on_node)
        if self.slots < 1:
            raise LibraryError(f"no node of the Ray cluster has {cores} CPUs for an evaluation")

    @property
    def slots(self) -> int:
        """How many evaluations the cluster's live nodes can run at once."""
        return sum(int(node["Resources"].get("CPU", 0)) // self.cores for node in self._ray.nodes() if node["Alive"])

    def runner(self) -> ClusterRunner:
        return ClusterRunner(self._remote, self.cores, self.retries)

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
