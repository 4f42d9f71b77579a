"""Measure for at least a minimum time, with any runner (local or remote).

This machine, like most virtual ones, has slow spells that come from the host: with nothing else
running, for 30 to 200 ms at a time every repetition of a memory-bound kernel takes up to 60%
longer, and no pinning avoids them. Ten repetitions of a 3 ms kernel fit inside one spell, and the
median of repeated `dojo run`s then varies by up to 80%; it takes about a second of timed
repetitions before no spell covers half of them (bench/results/runner_noise.md). `measure` runs
the requested repetitions and, when they add up to less than `min_time_s`, asks the runner for as
many more as fill the rest, so a fast kernel is timed over a span that outlasts a spell while a
slow one costs nothing extra. A search that evaluates thousands of programs calls the runner with
a few repetitions instead, and measures its best candidates again with `measure`.
"""

from __future__ import annotations

import math
import statistics
from typing import Protocol

from dojo_ir import Program

from .result import RunResult

MIN_TIME_S = 1.0
MAX_REPEATS = 1000  # what the runner service accepts in one request


class Runner(Protocol):
    def run(self, program: Program, target: str = "native", repeats: int = 10, warmup: int = 2,
            spec: Program | None = None) -> RunResult: ...


def measure(runner: Runner, program: Program, target: str = "native", repeats: int = 10, warmup: int = 2,
            spec: Program | None = None, min_time_s: float = MIN_TIME_S) -> RunResult:
    """`runner.run`, then a second run with more repetitions if the first one's timed repetitions
    took less than `min_time_s` in all; the result holds the times of both, at most MAX_REPEATS
    in the second. The second run is verified too, and its failure is the result."""
    first = runner.run(program, target=target, repeats=repeats, warmup=warmup, spec=spec)
    if first.error is not None or sum(first.times) >= min_time_s:
        return first
    more = min(MAX_REPEATS, math.ceil((min_time_s - sum(first.times)) / max(first.median_s, 1e-9)))
    second = runner.run(program, target=target, repeats=more, warmup=warmup, spec=spec)
    if second.error is not None:
        return second
    times = first.times + second.times
    verified = None if None in (first.verified, second.verified) else first.verified and second.verified
    errors = [r.max_error for r in (first, second) if r.max_error is not None]
    return RunResult(first.target, statistics.median(times), min(times), max(times), len(times), first.compile_s,
                     verified, max(errors) if errors else None, None, times)
