"""Compound steps (agent/compound/) and the heuristic pass on programs nobody here wrote: random trees
from `strategies.programs()` and random nodes of the ONNX catalogue as `dojo import` writes them.
Whatever the program, every step offered is its single moves, each legal where it is played, and
computes what the program before it computed; the heuristic pass likewise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from strategies import programs

from agent.compound import FUSION, TILE, compound_steps
from agent.evaluate import replay_moves
from agent.passes import PASSES
from codegen.targets import get_target
from dojo_ir import DojoError, interpret, load, random_inputs
from dojo_ir.paths import without_comments
from dojo_ir.tree import Program
from libgen.onnx.random_kernels import KiB, random_kernels

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TARGETS = ("x86-avx2", "x86-avx512")


def outputs(program: Program, inputs: dict) -> dict[str, np.ndarray]:
    """What `program` computes from `inputs`; a program that fails on them (an integer division by
    zero a random tree may hold) is no example."""
    try:
        return interpret(program, inputs)
    except DojoError:
        reject()


def assert_same_outputs(want: dict[str, np.ndarray], got: dict[str, np.ndarray], what: str) -> None:
    for name, value in want.items():  # reductions may be reassociated: equal within the verifier's tolerance
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4, err_msg=f"{name} after {what}")


def assert_steps_keep_the_meaning(spec: Program, target: str, most: int | None = None) -> set[str]:
    """Check every compound step of `spec` (the first `most`); the kinds met."""
    inputs = random_inputs(spec, seed=0)
    want = outputs(spec, inputs)
    kinds = set()
    for index, step in enumerate(compound_steps(spec, get_target(target))):
        if most is not None and index >= most:
            break
        replayed, applied = replay_moves(spec, list(step.moves))
        assert applied == list(step.moves) and replayed == step.program, step.text
        assert_same_outputs(want, interpret(step.program, inputs), step.text)
        kinds.add(step.kind)
    return kinds


@PROPERTY
@given(programs())
@pytest.mark.parametrize("target", TARGETS)
def test_every_compound_step_of_a_random_program_replays_and_keeps_its_meaning(target: str, program: Program) -> None:
    assert_steps_keep_the_meaning(without_comments(program), target)


@PROPERTY
@given(programs())
@pytest.mark.parametrize("target", TARGETS)
def test_the_heuristic_pass_on_a_random_program_plays_legal_moves_that_keep_its_meaning(target: str,
                                                                                         program: Program) -> None:
    spec = without_comments(program)
    moves = list(PASSES["heuristic"](spec, get_target(target)))
    after, applied = replay_moves(spec, moves)
    assert applied == moves
    inputs = random_inputs(spec, seed=0)
    assert_same_outputs(outputs(spec, inputs), interpret(after, inputs), "the heuristic pass")


@pytest.mark.parametrize("target", TARGETS)
def test_compound_steps_of_random_onnx_nodes_as_imported_keep_their_meaning(target: str) -> None:
    kinds = set()
    for kernel in random_kernels(40, seed=1, smallest=256, largest=64 * KiB, max_flops=2e6):
        kinds |= assert_steps_keep_the_meaning(without_comments(load(kernel.text)), target, most=6)
    assert kinds == {TILE, FUSION}  # the draws exercise both kinds
