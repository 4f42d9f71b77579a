"""The process that rates moves for dojo-lsp (server/lsp/ratings.py `_Worker`): jobs run in another
process, one at a time; a job's failure reaches its waiter; a process that dies fails its job and
the next job starts another; a job cancelled while it waits never runs."""

from __future__ import annotations

import operator
import os
import time

import pytest

from server.lsp.ratings import _Worker


def test_jobs_run_in_another_process_and_their_failures_reach_their_waiters() -> None:
    worker = _Worker()
    assert worker.submit(os.getpid).result(timeout=60) != os.getpid()
    with pytest.raises(ValueError, match="invalid literal"):
        worker.submit(int, "x").result(timeout=60)
    assert worker.submit(operator.add, 2, 3).result(timeout=60) == 5


def test_a_process_that_dies_fails_its_job_and_the_next_job_starts_another() -> None:
    worker = _Worker()
    first = worker.submit(os.getpid).result(timeout=60)
    with pytest.raises(RuntimeError, match="the rating process ended"):
        worker.submit(os._exit, 3).result(timeout=60)
    second = worker.submit(os.getpid).result(timeout=60)
    assert second != first and worker.submit(operator.mul, 6, 7).result(timeout=60) == 42


def test_a_job_cancelled_while_it_waits_never_runs(tmp_path) -> None:
    worker = _Worker()
    busy = worker.submit(time.sleep, 1.0)
    marker = tmp_path / "ran"
    waiting = worker.submit(marker.touch)
    assert waiting.cancel()
    busy.result(timeout=60)
    assert worker.submit(operator.add, 1, 1).result(timeout=60) == 2 and not marker.exists()
