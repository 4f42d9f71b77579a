"""Every move kind against its own specification: the before/after examples
and the not-applicable cases in its module, plus the invariants that hold for
every kind (a listed move applies, keeps the meaning and passes the checker)."""

from __future__ import annotations

import numpy as np
import pytest

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.fuzz import fuzz_shape
from dojo_ir.library import KERNELS
from dojo_ir.moves import KINDS, IllegalMove, apply, find, why_not

EXAMPLES = [
    pytest.param(kind, before, move, after, id=f"{name}-{i}")
    for name, kind in KINDS.items()
    for i, (before, move, after) in enumerate(kind.EXAMPLES)
]
NOT_APPLICABLE = [
    pytest.param(before, move, id=f"{name}-{i}")
    for name, kind in KINDS.items()
    for i, (before, move) in enumerate(kind.NOT_APPLICABLE)
]


def same_outputs(before, after, seed: int = 0) -> None:
    inputs = random_inputs(before, seed)
    expected, actual = interpret(before, inputs), interpret(after, inputs)
    for name in before.outputs:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kind, before, move, after", EXAMPLES)
def test_example(kind, before: str, move: str, after: str) -> None:
    program = load(before)
    assert move in [str(m) for m in find(program)], f"{move} is not listed"
    moved = apply(program, move)
    assert to_text(moved) == after
    assert check(load(after)) == []
    same_outputs(program, moved)


@pytest.mark.parametrize("before, move", NOT_APPLICABLE)
def test_not_applicable(before: str, move: str) -> None:
    program = load(before)
    assert why_not(program, move) is not None
    assert move not in [str(m) for m in find(program)]
    with pytest.raises(IllegalMove, match="is not legal here"):
        apply(program, move)


def test_every_kind_has_examples_of_both_sorts() -> None:
    for name, kind in KINDS.items():
        assert kind.EXAMPLES and kind.NOT_APPLICABLE, name
        assert kind.TITLE and kind.__doc__, name


@pytest.mark.parametrize("name", list(KINDS))
def test_moves_name_their_location_unambiguously_after_printing(name: str) -> None:
    for kernel in KERNELS.values():
        program = load(kernel.small())
        reparsed = load(to_text(program))
        assert [str(m) for m in find(program)] == [str(m) for m in find(reparsed)]


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_move_applies_keeps_the_meaning_and_checks(kernel: str) -> None:
    program = load(KERNELS[kernel].small())
    analysis = Analysis(program)
    for move in find(program, analysis):
        moved = apply(program, move, analysis)
        text = to_text(moved)
        assert check(load(text)) == [], (move, text)
        same_outputs(program, moved)


def test_an_unknown_move_or_location_says_what_exists() -> None:
    program = load(KERNELS["softmax"].small())
    with pytest.raises(IllegalMove, match="unknown move `fuse`"):
        apply(program, "fuse(op=e, depth=0)")
    assert "no operation `q`" in why_not(program, "join_scopes(op=q, depth=0)")
    assert "depth is 0 to 1" in why_not(program, "join_scopes(op=e, depth=5)")


INVERSES = {
    "join_scopes": ("fission",),
    "fission": ("join_scopes",),
    "split_scope": ("merge_scopes",),
    "merge_scopes": ("split_scope",),
    "swap_scopes": ("swap_scopes",),
    "swap_ops": ("swap_ops",),
    "reuse_dims": ("unreuse_dims",),
    "unreuse_dims": ("reuse_dims",),
    "swap_dims": ("swap_dims",),
    "pad_dim": ("unpad_dim",),
    "unpad_dim": ("pad_dim",),
    "set_location": ("set_location",),
    "stage_reads": ("unstage_reads",),
    "unstage_reads": ("stage_reads",),
    "accumulate": ("inline_accumulator",),
    "accumulate_partial": ("inline_accumulator",),
    "inline_accumulator": ("accumulate", "accumulate_partial"),
    "unroll_scope": ("unmap_scope",),
    "parallelize_scope": ("unmap_scope",),
    "vectorize_scope": ("unmap_scope",),
    "map_gpu": ("unmap_scope",),
    "unmap_scope": ("unroll_scope", "parallelize_scope", "vectorize_scope", "map_gpu"),
}


def fused(program):
    """`program` after every join that is legal, first scope first."""
    while joins := [m for m in find(program) if m.name == "join_scopes"]:
        program = apply(program, joins[0])
    return program


def test_every_kind_has_an_inverse() -> None:
    assert set(INVERSES) == set(KINDS)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_move_can_be_undone_by_another_move(kernel: str) -> None:
    """Non-destructive: whatever a move does, a move listed afterwards gives
    the program back."""
    spec = load(KERNELS[kernel].text(**fuzz_shape(kernel)))
    for program in (spec, fused(spec)):
        for move in find(program):
            after = apply(program, move)
            undo = [m for m in find(after) if m.name in INVERSES[move.name]]
            assert any(apply(after, m) == program for m in undo), f"nothing undoes {move}"
