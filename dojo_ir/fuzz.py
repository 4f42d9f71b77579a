"""Random walks over the moves, each step checked against the spec.

This is the test of the legality analysis: a walk starts from a library
kernel at a small shape, plays random legal moves (a random kind, then a
random place for it), and after every
move checks that the program still prints, parses back to itself, passes the
checker and computes the spec's outputs (reference interpreter, same inputs).
A failure carries the exact move list that reproduces it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .analysis import Analysis
from .checker import check
from .errors import DojoError
from .interpreter import interpret, random_inputs
from .library import KERNELS
from .moves import apply, find, of_a_random_kind
from .moves.base import scope_of
from .parser import parse
from .printer import to_text
from .tree import Program

# Reductions may be reassociated by moves, so f32 results agree to rounding.
RTOL, ATOL = 1e-4, 1e-5


def fuzz_shape(kernel: str) -> dict[str, int]:
    """The kernel's small test shape with every size rounded up to an even
    number, so that scopes split evenly as well as with a tail."""
    return {k: v + v % 2 for k, v in KERNELS[kernel].small_params.items()}


@dataclass(frozen=True)
class Failure:
    kernel: str
    shape: str  # as `dojo kernels NAME --shape` takes it
    moves: tuple[str, ...]
    problem: str


@dataclass
class Report:
    walks: int = 0
    moves: int = 0
    failures: list[Failure] = field(default_factory=list)
    played: list[str] = field(default_factory=list)  # every move played, in order
    tails: int = 0  # splits that left a tail (a factor that does not divide the scope)


def _problem(spec: Program, expected: dict[str, np.ndarray], inputs, program: Program) -> str | None:
    text = to_text(program)
    try:
        reparsed = parse(text)
    except DojoError as error:
        return f"the result does not parse: {error}"
    if reparsed != program:
        return "the result does not parse back to the same tree"
    errors = check(reparsed)
    if errors:
        return f"the result fails the checker: {errors[0].message}"
    actual = interpret(program, inputs)
    for name in spec.outputs:
        if not np.allclose(actual[name], expected[name], rtol=RTOL, atol=ATOL, equal_nan=True):
            worst = float(np.nanmax(np.abs(actual[name].astype(np.float64) - expected[name])))
            return f"output `{name}` differs from the spec's by up to {worst:.3g}"
    return None


def walk(kernel: str, steps: int, rng: random.Random) -> tuple[list[str], int, Failure | None]:
    """One random walk; returns the moves played, how many of them split with a tail, and a
    failure, if any."""
    shape = fuzz_shape(kernel)
    spec = parse(KERNELS[kernel].text(**shape))
    inputs = random_inputs(spec, rng.randrange(1 << 30))
    expected = interpret(spec, inputs)
    program, played, tails = spec, [], 0
    for _ in range(steps):
        analysis = Analysis(program)
        legal = find(program, analysis)
        if not legal:
            break
        move = legal[of_a_random_kind(rng, [m.name for m in legal])]
        played.append(str(move))
        if move.name == "split_scope" and scope_of(analysis, move)[2].size % move.arg("factor"):
            tails += 1
        try:
            program = apply(program, move, analysis)
        except DojoError as error:
            problem = f"a listed move failed to apply: {error}"
        else:
            try:
                problem = _problem(spec, expected, inputs, program)
            except Exception as error:  # noqa: BLE001 - a crash is a finding, reported with its moves
                problem = f"checking the result crashed: {type(error).__name__}: {error}"
        if problem is not None:
            shape_text = " ".join(f"{k}={v}" for k, v in shape.items())
            return played, tails, Failure(kernel, shape_text, tuple(played), problem)
    return played, tails, None


def fuzz(kernels: list[str], walks: int, steps: int, seed: int,
         progress: Callable[[int, int, int], None] | None = None) -> Report:
    """`walks` random walks of up to `steps` moves, spread over `kernels`."""
    rng = random.Random(seed)
    report = Report()
    for i in range(walks):
        played, tails, failure = walk(kernels[i % len(kernels)], steps, rng)
        report.walks += 1
        report.tails += tails
        report.moves += len(played)
        report.played += played
        if failure is not None:
            report.failures.append(failure)
        if progress is not None:
            progress(i + 1, walks, report.moves)
    return report
