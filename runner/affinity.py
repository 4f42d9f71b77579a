"""The CPUs a run may use, kept apart from what an OpenMP runtime does to the calling thread.

An OpenMP runtime loaded while OMP_PROC_BIND is set pins the thread that loads it to one core:
PyTorch's as it is imported (the learned agent's), a library's at its first parallel region (a
model run on its library). Every process that thread starts afterwards inherits the one core. The
runner took its CPUs from the calling thread's affinity, so its timed binaries then ran all their
threads on one core: `dojo model tune`, once the agent had loaded PyTorch, measured every program
single-threaded and kept serial programs that ran twice as slow in the model.

So the CPUs are read when this module is first imported (`CPUS`; the entry points, server/cli.py
and server/lsp/main.py, import it before anything loads OpenMP, and runner/local.py does); a process
started on fewer (`taskset`) keeps to those. Whoever gives a run fewer on purpose says so with
`on_cpus` (libgen/cluster.py's evaluations, each on CPUs no other holds), and the runner asks
`assigned()`, not the thread's affinity. What starts processes or thread pools that must use the
CPUs starts them `on_cpus()`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CPUS: frozenset[int] = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
_assigned: ContextVar[frozenset[int] | None] = ContextVar("assigned CPUs", default=None)


def assigned() -> frozenset[int]:
    """The CPUs the calling thread's runs use: those `on_cpus` gave it, else the process's."""
    return _assigned.get() or CPUS


def cores() -> int:
    """How many CPUs the calling thread's runs use."""
    return len(assigned()) or os.cpu_count() or 1


@contextmanager
def on_cpus(cpus: Iterable[int] | None = None) -> Iterator[frozenset[int]]:
    """The calling thread on `cpus` (default: `assigned()`) meanwhile, its runs told so, and what
    it starts (a process, ONNX Runtime's thread pool) inheriting them; its affinity and assignment
    are restored after."""
    chosen = frozenset(cpus) if cpus is not None else assigned()
    if not chosen or not hasattr(os, "sched_setaffinity"):
        yield chosen
        return
    before = os.sched_getaffinity(0)
    token = _assigned.set(chosen)
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, before)
        _assigned.reset(token)
