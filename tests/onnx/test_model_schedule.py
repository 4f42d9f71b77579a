"""The task scheduler of `dojo model tune`: rounds go to the kernel of largest expected gain in model
time, so that a kernel's rounds follow its share of the model's time."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libgen.onnx.schedule import Task, estimated_model_s, next_tasks


def task(name: str, model_s: float, own_s: float = 1e-3) -> Task:
    return Task(name, model_s, own_s, (own_s,))


def play(tasks: list[Task], rounds: int, speedup: dict[str, float] | None = None) -> list[Task]:
    """`rounds` rounds of 4 evaluations, each making the chosen kernel `speedup[kernel]` times
    faster (default: no faster)."""
    for _ in range(rounds):
        [i] = next_tasks(tasks)
        tasks[i] = tasks[i].after_round(tasks[i].best_s / (speedup or {}).get(tasks[i].kernel, 1.0), 4)
    return tasks


def test_the_first_round_goes_to_the_kernel_that_takes_the_most_model_time() -> None:
    tasks = [task("relu", 2e-6), task("matmul", 9e-5, own_s=4e-5), task("mul", 1e-6)]
    assert next_tasks(tasks) == [1]
    assert next_tasks(tasks, count=2) == [1, 0]


def test_a_kernel_that_got_faster_takes_less_model_time_and_fewer_rounds() -> None:
    steady = play([task("a", 1e-4), task("b", 1e-4)], 16)
    faster = play([task("a", 1e-4), task("b", 1e-4)], 16, speedup={"a": 1.5})
    assert [t.rounds for t in steady] == [8, 8]
    assert [t.rounds for t in faster] == [4, 12]
    assert faster[0].estimated_s == pytest.approx(faster[0].model_s / 1.5 ** 4)


def test_a_finished_search_gets_no_more_rounds() -> None:
    tasks = [task("big", 1e-3).after_round(None, 0), task("small", 1e-6)]
    assert tasks[0].done
    assert next_tasks(tasks) == [1]
    assert next_tasks([tasks[0]]) == []


def test_the_estimate_scales_the_profiled_time_by_the_kernels_own_speedup() -> None:
    matmul = task("matmul", 8e-5, own_s=4e-5).after_round(2e-5, 8)
    assert matmul.estimated_s == 4e-5
    assert estimated_model_s([matmul, task("relu", 1e-5)], rest_s=3e-5) == 8e-5
    assert matmul.profiled(5e-5).estimated_s == 5e-5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1e-2), min_size=1, max_size=8), st.integers(1, 60))
def test_rounds_follow_the_shares_of_the_model_time(times: list[float], rounds: int) -> None:
    """Without gains, each kernel gets at least its share of the rounds, rounded down (the
    scheduler apportions as D'Hondt does), and every round is given."""
    tasks = play([task(f"k{i}", t) for i, t in enumerate(times)], rounds)
    total = sum(times)
    assert sum(t.rounds for t in tasks) == rounds
    for t, model_s in zip(tasks, times, strict=True):
        assert t.rounds >= math.floor(rounds * model_s / total * (1 - 1e-9))
        assert t.evaluations == 4 * t.rounds
