"""swap_ops, fission, accumulate and inline_accumulator against their
inverses: each move, and the move that undoes it, are listed, and together
give back the text. Beyond the module examples, every listed move of these
kinds is tried on every library kernel with its scopes fused as far as
join_scopes goes, since the unfused kernels offer few of them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find, parse_move
from dojo_ir.moves.base import scope_of, site_of
from dojo_ir.moves.examples import FUSED_SOFTMAX
from dojo_ir.paths import TreePath
from dojo_ir.tree import Program

FUSED_SOFTMAX = FUSED_SOFTMAX

OWN = ("swap_ops", "fission", "accumulate", "inline_accumulator")


def listed(program: Program) -> list[str]:
    return [str(m) for m in find(program)]


def node_move(name: str, program: Program, path: TreePath) -> str:
    label, depth = Analysis(program).locate(path)
    return f"{name}(op={label})" if depth is None else f"{name}(op={label}, depth={depth})"


def path_of(program: Program, move: str) -> TreePath:
    """The node a `op=..., depth=...` (or `op=...`) move names."""
    a, parsed = Analysis(program), parse_move(move)
    return scope_of(a, parsed)[1] if "depth" in dict(parsed.args) else site_of(a, parsed).path


def inverse(program: Program, move: str, moved: Program) -> str:
    """The move that undoes `move` (applied to `program`, giving `moved`)."""
    path = path_of(program, move)
    name = move[: move.index("(")]
    if name == "swap_ops":
        return node_move("swap_ops", moved, path)
    if name == "fission":
        return node_move("join_scopes", moved, path)
    if name == "accumulate":  # the load, alone or at the bottom of its tile nest
        load = Analysis(moved).first_site(path)
        return f"inline_accumulator(op={load.label})"
    raise AssertionError(name)


def same_outputs(before: Program, after: Program) -> None:
    inputs = random_inputs(before, 0)
    expected, actual = interpret(before, inputs), interpret(after, inputs)
    for name in before.outputs:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


def fused(program: Program) -> Program:
    """`program` after join_scopes wherever it applies, outermost first."""
    while True:
        joins = [m for m in find(program) if m.name == "join_scopes"]
        if not joins:
            return program
        program = apply(program, joins[0])


ROUND_TRIPS = [
    pytest.param(FUSED_SOFTMAX, ["accumulate(op=m#2, depth=1)", "inline_accumulator(op=m_acc#1)"], id="acc-max"),
    pytest.param(FUSED_SOFTMAX, ["accumulate(op=s#2, depth=1)", "inline_accumulator(op=s_acc#1)"], id="acc-sum"),
    pytest.param(FUSED_SOFTMAX, ["accumulate(op=m#2, depth=1)", "accumulate(op=s#2, depth=1)",
                                 "inline_accumulator(op=m_acc#1)", "inline_accumulator(op=s_acc#1)"], id="acc-both"),
    pytest.param(FUSED_SOFTMAX, ["swap_ops(op=e, depth=1)", "swap_ops(op=s#1)"], id="swap"),
    pytest.param(FUSED_SOFTMAX, ["fission(op=s#1, depth=0)", "join_scopes(op=m#1, depth=0)"], id="fission"),
    pytest.param(FUSED_SOFTMAX, ["fission(op=e, depth=0)", "fission(op=y, depth=0)",
                                 "join_scopes(op=e, depth=0)", "join_scopes(op=m#1, depth=0)"], id="fission-twice"),
]


@pytest.mark.parametrize("text, moves", ROUND_TRIPS)
def test_moves_then_their_inverses_give_back_the_text(text: str, moves: list[str]) -> None:
    program = load(text)
    for move in moves:
        assert move in listed(program), (move, to_text(program))
        moved = apply(program, move)
        assert check(load(to_text(moved))) == []
        same_outputs(program, moved)
        program = moved
    assert to_text(program) == text


def test_accumulate_keeps_the_arithmetic_bitwise() -> None:
    program = load(FUSED_SOFTMAX)
    moved = apply(apply(program, "accumulate(op=m#2, depth=1)"), "accumulate(op=s#2, depth=1)")
    inputs = random_inputs(program, 3)
    expected, actual = interpret(program, inputs), interpret(moved, inputs)
    assert np.array_equal(expected["y"], actual["y"])


def test_a_second_accumulator_is_not_offered_for_an_accumulator() -> None:
    program = apply(load(FUSED_SOFTMAX), "accumulate(op=m#2, depth=1)")
    assert not [m for m in listed(program) if m.startswith("accumulate(op=m_acc")]


def test_fission_is_refused_across_the_accumulator() -> None:
    # m_acc stores one element for every row: split between its load and its
    # update, all rows would load before any updates.
    program = apply(load(FUSED_SOFTMAX), "accumulate(op=m#2, depth=1)")
    assert "fission(op=m_acc#2, depth=0)" not in listed(program)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_move_on_the_fused_kernel_is_undone_by_its_inverse(kernel: str) -> None:
    program = fused(load(KERNELS[kernel].small()))
    text = to_text(program)
    for move in (m for m in find(program) if m.name in OWN[:3]):
        moved = apply(program, move)
        moved_text = to_text(moved)
        assert check(load(moved_text)) == [], (move, moved_text)
        same_outputs(program, moved)
        back = inverse(program, str(move), moved)
        assert back in listed(moved), (move, back, moved_text)
        assert to_text(apply(moved, back)) == text, (move, back)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_random_walks_keep_the_meaning(kernel: str) -> None:
    # Walks through these moves and the scope moves reach shapes (split,
    # interchanged, partly fused) that no hand-written case lists.
    rng = random.Random(kernel)
    start = load(KERNELS[kernel].small())
    for _ in range(3):
        program = start
        for _ in range(12):
            moves = [m for m in find(program) if m.name in OWN + ("join_scopes", "split_scope", "swap_scopes")]
            if not moves:
                break
            own = [m for m in moves if m.name in OWN]
            move = rng.choice(own if own and rng.random() < 0.7 else moves)
            moved = apply(program, move)
            text = to_text(moved)
            assert check(load(text)) == [], (move, text)
            same_outputs(start, moved)
            program = moved



def test_the_row_scope_can_still_run_on_threads_after_accumulate() -> None:
    # Why the accumulator has a logical element per row (`[4:1]`) and not `[]`:
    # each thread's copy is then its own as far as the race test can tell.
    program = apply(apply(load(FUSED_SOFTMAX), "accumulate(op=m#2, depth=1)"), "accumulate(op=s#2, depth=1)")
    assert "parallelize_scope(op=m#1, depth=0)" in listed(program)
