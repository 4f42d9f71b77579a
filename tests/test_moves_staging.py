"""stage_reads and unstage_reads beyond their own examples: the staged
temporary is shaped by the layout moves like any other and can still be
read in place again, its name is fresh, the editor places the move on its
scope, and on every library kernel every listed staging keeps the meaning and
is undone by unstage_reads."""

from __future__ import annotations

import pytest
from test_moves import same_outputs

from dojo_ir import check, load, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find, move_lines, parse_move, why_not
from dojo_ir.moves.stage_reads import EXAMPLES

BLOCKED, STAGE, STAGED = EXAMPLES[0]


def test_the_layout_moves_shape_the_staged_tile_and_unstaging_still_applies() -> None:
    spec = load(BLOCKED)
    staged = load(STAGED)
    for moves in (["swap_dims(buffer=b_s, dim=1)"], ["pad_dim(buffer=b_s, dim=2, size=32)"],
                  ["set_location(buffer=b_s, location=stack)"], ["unreuse_dims(buffer=b_s, dim=0)"]):
        program = staged
        for move in moves:
            program = apply(program, move)
        assert check(load(to_text(program))) == []
        same_outputs(spec, program)
        unstaged = apply(program, "unstage_reads(op=b_s)")
        assert to_text(unstaged) == BLOCKED, moves


def test_a_folded_dimension_of_the_box_is_not_unstaged() -> None:
    folded = STAGED.replace("b_s f32 [2:1, 4, 16] heap", "b_s f32 [2:1, 4:2, 16] heap")
    assert "folded" in why_not(load(folded), "unstage_reads(op=b_s)")


def test_the_temporary_gets_a_fresh_name() -> None:
    taken = BLOCKED.replace("c f32 [4, 16] heap\n", "c f32 [4, 16] heap\nb_s f32 [4] heap\n")
    taken += "4 b_s[{0}] = 0\n"
    staged = to_text(apply(load(taken), STAGE))
    assert "b_s2 f32 [2:1, 4, 16] heap" in staged and "b_s2[{0},{2},{3}]" in staged


def test_the_editor_places_the_move_on_its_scope() -> None:
    analysis = Analysis(load(BLOCKED))
    # the scope at depth 1 of `c#2` is on line 8, b's declaration on line 4
    assert move_lines(analysis, parse_move(STAGE)) == (8, 8)


def test_reads_offset_differently_by_the_scopes_around_are_refused() -> None:
    program = load("""kernel k(x) -> y

x f32 [8] heap
y f32 [4, 2] heap

4 2 y[{0},{1}] = x[{0}+{1}] + x[{0}*2+{1}]
""")
    assert "offset dimension 0 differently" in why_not(program, "stage_reads(op=y, depth=1, buffer=x)")


@pytest.mark.parametrize("kernel", ["matmul", "conv1", "softmax", "layernorm1"])
def test_every_listed_staging_keeps_the_meaning_and_is_undone(kernel: str) -> None:
    spec = load(KERNELS[kernel].small())
    stagings = [m for m in find(spec) if m.name == "stage_reads"]
    assert stagings
    for move in stagings:
        staged = apply(spec, move)
        assert check(load(to_text(staged))) == [], move
        same_outputs(spec, staged)
        copy = [m for m in find(staged) if m.name == "unstage_reads"]
        assert any(apply(staged, m) == spec for m in copy), move
