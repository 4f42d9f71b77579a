"""The buffer layout moves (reuse_dims, unreuse_dims, swap_dims, pad_dim,
unpad_dim, set_location) beyond their own examples: they undo each other, and
on every library kernel fused as far as join_scopes goes (where reuse_dims
finds work, as in the paper's Figure 5) every listed one keeps the meaning."""

from __future__ import annotations

from functools import cache

import pytest
from test_moves import same_outputs

from dojo_ir import check, load, to_text
from dojo_ir.affine import Affine
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find
from dojo_ir.moves.examples import FUSED_PAIR
from dojo_ir.moves.reuse_dims import injective
from dojo_ir.tree import Program

LAYOUT = ("reuse_dims", "unreuse_dims", "swap_dims", "pad_dim", "unpad_dim", "set_location")

FIGURE_6_FUSED = FUSED_PAIR


@cache
def fused(kernel: str) -> Program:
    """The kernel at its small shape after every join_scopes that is legal,
    the first listed one each time."""
    program = load(KERNELS[kernel].small())
    while joins := [m for m in find(program) if m.name == "join_scopes"]:
        program = apply(program, joins[0])
    return program


def listed(program: Program, name: str) -> list[str]:
    return [str(m) for m in find(program) if m.name == name]


def test_figure_6_reuse_needs_the_join_first() -> None:
    unfused = load(KERNELS["softmax"].small())
    assert listed(unfused, "reuse_dims") == []
    assert "reuse_dims(buffer=e, dim=0)" in listed(fused("softmax"), "reuse_dims")


def test_reuse_then_unreuse_gives_the_original_text() -> None:
    program = load(FIGURE_6_FUSED)
    reused = apply(program, "reuse_dims(buffer=t, dim=0)")
    assert "t f32 [4:1] heap" in to_text(reused)
    assert to_text(apply(reused, "unreuse_dims(buffer=t, dim=0)")) == FIGURE_6_FUSED


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_reuse_is_undone_by_unreuse(kernel: str) -> None:
    program = fused(kernel)
    for move in listed(program, "reuse_dims"):
        reused = apply(program, move)
        inverse = move.replace("reuse_dims", "unreuse_dims")
        assert inverse in listed(reused, "unreuse_dims"), move
        assert to_text(apply(reused, inverse)) == to_text(program), move


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_swap_dims_twice_gives_the_original_text(kernel: str) -> None:
    program = fused(kernel)
    for move in listed(program, "swap_dims"):
        swapped = apply(program, move)
        assert to_text(swapped) != to_text(program), move
        assert to_text(apply(swapped, move)) == to_text(program), move


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_pad_then_unpad_gives_the_original_text(kernel: str) -> None:
    program = fused(kernel)
    for move in [m for m in find(program) if m.name == "pad_dim"]:
        padded = apply(program, move)
        buffer, dim = move.arg("buffer"), move.arg("dim")
        extent = next(b for b in program.buffers if b.name == buffer).dims[dim].size
        inverse = f"unpad_dim(buffer={buffer}, dim={dim}, size={extent})"
        assert inverse in listed(padded, "unpad_dim"), move
        assert to_text(apply(padded, inverse)) == to_text(program), move


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_reuse_after_fusion_keeps_the_outputs(kernel: str) -> None:
    program = fused(kernel)
    for move in listed(program, "reuse_dims"):
        moved = apply(program, move)
        assert check(load(to_text(moved))) == [], move
        same_outputs(program, moved)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_reusing_all_that_can_be_reused_keeps_the_outputs(kernel: str) -> None:
    program = reused = fused(kernel)
    while moves := listed(reused, "reuse_dims"):
        reused = apply(reused, moves[0])
    assert check(load(to_text(reused))) == []
    same_outputs(program, reused)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_layout_move_after_fusion_applies_keeps_the_outputs_and_checks(kernel: str) -> None:
    program = fused(kernel)
    for move in find(program):
        if move.name in LAYOUT:
            moved = apply(program, move)
            assert check(load(to_text(moved))) == [], move
            same_outputs(program, moved)


def test_the_fused_softmax_keeps_one_row_as_in_figure_5() -> None:
    program = fused("softmax")
    for buffer in ("m", "e", "s"):
        program = apply(program, f"reuse_dims(buffer={buffer}, dim=0)")
    declared = {b.name: str(b.dims[0]) for b in program.buffers}
    assert (declared["m"], declared["e"], declared["s"]) == ("3:1", "3:1", "3:1")


def test_forms_together_tell_apart_iterations_that_one_alone_does_not() -> None:
    i, j, k = (Affine.of({d: 1}) for d in range(3))
    assert not injective([j], [2, 3])
    assert injective([i, j], [2, 3])
    # the steps that start at {2} leave `{0}+{1}*2` unchanged: only `{2}` tells them apart
    assert injective([i + j.scale(2), k], [2, 3, 4])
    assert not injective([i + j, k], [2, 3, 4])
