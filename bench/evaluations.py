"""Evaluations per second: generate, compile, run and verify, for a small kernel.

A search spends its time here, so this is its throughput bound. Each program is measured by
`LocalRunner.run` with the defaults of `dojo run` (2 warm-up, 10 timed repetitions) against its
spec, relu at 128 x 256, with an empty build cache. Two sets of programs:

- near the spec: short random walks (1 to 6 legal moves from the spec, a kind of move first, then
  a place, as `dojo fuzz` plays them), what a search tries early and most;
- one long walk: 40 programs along one walk, where unrolls compound into large bodies.

Programs whose C source repeats an earlier one (a GPU mapping, which the C target ignores) are
skipped, so every evaluation compiles. Each set runs with one worker, then with two threads that
share one runner: the runner lets a compile overlap the other thread's benchmark and holds its lock
only around the timed run. Results in bench/results/evaluations.md.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codegen import generate
from dojo_ir import Program, load
from dojo_ir.analysis import Analysis
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find
from runner.local import LocalRunner
from runner.result import RunResult

PROGRAMS = 40
SEED = 1


def step(program: Program, rng: random.Random) -> Program:
    analysis = Analysis(program)
    legal = find(program, analysis)
    kind = rng.choice(sorted({m.name for m in legal}))
    return apply(program, rng.choice([m for m in legal if m.name == kind]), analysis)


def distinct(next_program: Callable[[], Program], count: int) -> list[Program]:
    """`count` programs from `next_program`, each with C source unlike any before it."""
    seen, found = set(), []
    while len(found) < count:
        program = next_program()
        source = generate(program, "native")
        if source not in seen:
            seen.add(source)
            found.append(program)
    return found


def near(spec: Program, rng: random.Random) -> Callable[[], Program]:
    def next_program() -> Program:
        program = spec
        for _ in range(rng.randint(1, 6)):
            program = step(program, rng)
        return program

    return next_program


def along(spec: Program, rng: random.Random) -> Callable[[], Program]:
    state = [spec]

    def next_program() -> Program:
        state[0] = step(state[0], rng)
        return state[0]

    return next_program


def evaluate(programs: list[Program], spec: Program, workers: int) -> tuple[float, list[RunResult]]:
    with tempfile.TemporaryDirectory() as cache:
        runner = LocalRunner(cache_dir=Path(cache))
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda p: runner.run(p, spec=spec), programs))
        return time.perf_counter() - started, results


def main() -> None:
    spec = load(KERNELS["relu"].text(m=128, n=256))
    sets = [("near the spec (1-6 moves)", distinct(near(spec, random.Random(SEED)), PROGRAMS)),
            ("one long walk", distinct(along(spec, random.Random(SEED)), PROGRAMS))]
    report = ["# Evaluations per second", "",
              f"`python bench/evaluations.py`: {PROGRAMS} programs per set, each generated, compiled (cache empty, "
              "no two with the same source), run (2 warm-up, 10 timed) and verified against the spec (relu, "
              f"128 x 256) by `LocalRunner.run`, on this {os.cpu_count()}-core machine. The goal is >= 3 evaluations "
              "per second. Overhead = wall time per evaluation minus its compile time, with one worker.", "",
              "| programs | workers | evaluations/s | median compile | slowest compile | overhead | all verified |",
              "|---|---|---|---|---|---|---|"]
    for name, programs in sets:
        for workers in (1, 2):
            elapsed, results = evaluate(programs, spec, workers)
            failed = [r for r in results if not r.ok]
            compiles = [r.compile_s for r in results]
            overhead = (elapsed - sum(compiles)) / len(results) * 1e3 if workers == 1 else None
            report.append(f"| {name} | {workers} | {len(results) / elapsed:.1f} | "
                          f"{statistics.median(compiles) * 1e3:.0f} ms | {max(compiles):.2f} s | "
                          f"{'' if overhead is None else f'{overhead:.0f} ms'} | "
                          f"{'yes' if not failed else f'no: {len(failed)} failed, e.g. {failed[0]}'} |")
            print(report[-1], flush=True)
    out = Path(__file__).parent / "results" / "evaluations.md"
    out.write_text("\n".join(report) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
