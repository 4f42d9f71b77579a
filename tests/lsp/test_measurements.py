"""Cancelling a measurement stops its benchmark: the child process is killed, and the CPU lock is
released, and the next measurement starts, only once it is gone."""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.library import KERNELS
from runner import local
from server.lsp.measurements import Measurements
from server.lsp.settings import Settings


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def held(lock: Path) -> bool:
    """Whether someone holds `lock` (a runner's CPU lock)."""
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


@pytest.fixture
def sleeping_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The native target, but its benchmark writes its pid to the returned file and sleeps a minute."""
    monkeypatch.setenv("DOJO_CACHE", str(tmp_path / "cache"))
    started = tmp_path / "harness.pid"
    launcher = tmp_path / "sleeper.sh"
    launcher.write_text(f"#!/bin/sh\necho $$ > {started}.part && mv {started}.part {started}\nexec sleep 60\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    native = get_target("native")
    monkeypatch.setattr(local, "get_target", lambda name: replace(native, launcher=(str(launcher),)))
    return started


async def test_a_cancelled_measurement_kills_its_child_and_only_then_frees_the_cpu(sleeping_harness: Path,
                                                                                   tmp_path: Path):
    tasks: set[asyncio.Task] = set()

    def spawn(work, name: str) -> asyncio.Task:
        task = asyncio.ensure_future(work)
        tasks.add(task)
        return task

    measurements = Measurements(spawn, on_change=lambda: None)
    program = load(KERNELS["relu"].small())
    measuring = asyncio.ensure_future(measurements.measure(program, None, Settings(repetitions=3), 3))
    async with asyncio.timeout(120):  # building the kernel comes first
        while not sleeping_harness.exists():
            await asyncio.sleep(0.02)
    pid = int(sleeping_harness.read_text())
    lock = tmp_path / "cache" / f"bench.cpu{min(os.sched_getaffinity(0))}.lock"
    assert alive(pid) and held(lock)

    measuring.cancel()
    async with asyncio.timeout(10):  # not the minute the benchmark would sleep
        while not measuring.done():
            if not held(lock) or not measurements._lock.locked():
                assert not alive(pid), "the CPU was freed while the cancelled benchmark still ran"
            await asyncio.sleep(0.001)
    with pytest.raises(asyncio.CancelledError):
        await measuring
    assert not alive(pid)
    assert not held(lock) and not measurements._lock.locked()
    assert measurements.get(program, Settings(repetitions=3)) is None  # nothing was measured


def test_a_cancelled_runner_runs_nothing_more(sleeping_harness: Path):
    runner = local.LocalRunner()
    runner.cancel()
    result = runner.run(load(KERNELS["relu"].small()), repeats=3)
    assert result.error == local.CANCELLED
    assert not sleeping_harness.exists()
