"""Timing on cores of one's own: the runner's per-CPU timing locks, OpenMP's share of the CPUs,
and a cluster evaluation's claim of CPUs (runner/local.py, libgen/cluster.py)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from codegen.targets import get_target
from libgen.cluster import pinned
from runner.files import exclusive
from runner.local import openmp_environment, timing_lock

TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def _acquires_within(lock, seconds: float) -> bool:
    """Whether another thread takes `lock` (a context manager factory) within `seconds`."""
    taken = threading.Event()

    def take() -> None:
        with lock():
            taken.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return taken.wait(seconds)


def test_runs_on_different_cpus_time_at_once_and_a_run_on_both_waits(tmp_path: Path) -> None:
    with timing_lock(tmp_path, [0]):
        assert _acquires_within(lambda: timing_lock(tmp_path, [1]), 5)
        # a run on CPUs 0 and 1 must wait for the run on CPU 0
        assert not _acquires_within(lambda: timing_lock(tmp_path, [1, 0]), 0.3)
        # and so must whatever needs the whole machine (the roofline, the peers)
        assert not _acquires_within(lambda: exclusive(tmp_path / "bench.lock"), 0.3)
    assert (tmp_path / "bench.cpu0.lock").exists() and (tmp_path / "bench.cpu1.lock").exists()


def test_the_whole_machine_lock_excludes_every_timed_run(tmp_path: Path) -> None:
    with exclusive(tmp_path / "bench.lock"):
        assert not _acquires_within(lambda: timing_lock(tmp_path, [3]), 0.3)
    assert _acquires_within(lambda: timing_lock(tmp_path, [3]), 5)


def test_openmp_gets_the_target_cores_among_the_cpus_it_may_use() -> None:
    native = get_target("native")
    one = openmp_environment(native, {1})
    assert one["OMP_NUM_THREADS"] == "1" and one["OMP_PLACES"] == "{1}" and one["OMP_PROC_BIND"] == "true"
    many = openmp_environment(native, range(64))
    assert int(many["OMP_NUM_THREADS"]) == min(native.cores, 64)
    assert many["OMP_PLACES"].split(",")[:2] == ["{0}", "{1}"][:min(native.cores, 2)]


@TWO_CPUS
def test_an_evaluation_pins_itself_to_cpus_no_other_holds_and_gives_them_back(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    first = min(before)
    with open(tmp_path / f"claim.cpu{first}.lock", "a") as held:  # another evaluation holds the first CPU
        fcntl.flock(held, fcntl.LOCK_EX)
        with pinned(1, tmp_path) as cpus:
            assert len(cpus) == 1 and first not in cpus
            assert os.sched_getaffinity(0) == set(cpus)
    assert os.sched_getaffinity(0) == before
    with pinned(2, tmp_path) as cpus:
        assert os.sched_getaffinity(0) == set(cpus) and len(cpus) == 2


@TWO_CPUS
def test_an_evaluation_waits_for_free_cpus(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    handles = [open(tmp_path / f"claim.cpu{cpu}.lock", "a") for cpu in cpus]
    for handle in handles:
        fcntl.flock(handle, fcntl.LOCK_EX)
    got: list[tuple[int, ...]] = []
    thread = threading.Thread(target=lambda: got.append(_claim_once(tmp_path)), daemon=True)
    thread.start()
    time.sleep(0.3)
    assert not got  # every CPU is held
    handles[-1].close()
    thread.join(5)
    assert got == [(cpus[-1],)]
    for handle in handles[:-1]:
        handle.close()


def _claim_once(directory: Path) -> tuple[int, ...]:
    with pinned(1, directory) as cpus:
        return cpus


def test_an_evaluation_cannot_ask_for_more_cpus_than_the_node_has(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="this node has"), pinned(len(os.sched_getaffinity(0)) + 1, tmp_path):
        pass
