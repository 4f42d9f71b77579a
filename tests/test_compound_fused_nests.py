"""Fused nests as one step of a ranked search (agent/compound/fused_nests.py): a scope joined with every
next scope it can fuse with, the temporaries then wholly inside it folded, each step the legal
single moves that make it, computing what the program before it computed."""

from __future__ import annotations

import numpy as np
import pytest

from agent.compound import FUSION, TILE, Fusion, compound_steps, fused_nests
from agent.evaluate import replay_moves
from agent.perfllm.game import kind
from codegen.targets import get_target
from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.paths import without_comments

# a padded input, a product over a window of it, and the product transposed: the shape of a
# depthwise convolution as `dojo import` writes it, in blocks of channels
BLOCKED = load("""kernel blocked(x, w) -> y

x f32 [4, 6, 8] heap
w f32 [4, 3, 8] heap
y f32 [4, 8, 4] heap
p f32 [4, 6, 8] heap
t f32 [4, 4, 8] heap

4 6 8 p[{0},{1},{2}] = x[{0},{1},{2}]
4 4 8 t[{0},{1},{2}] = 0
4 4 8 3 t[{0},{1},{2}] += p[{0},{1}+{3},{2}] * w[{0},{3},{2}]
4 8 4 y[{0},{1},{2}] = t[{0},{2},{1}]
""")

PAIR = load("""kernel pair(x) -> y

x f32 [4, 16] heap
y f32 [4, 16] heap
t f32 [4, 16] heap

4 16 t[{0},{1}] = x[{0},{1}] * 2
4 16 y[{0},{1}] = t[{0},{1}] + 1
""")

# every row of y reads t's last row, which the first scope writes in its last iteration
LAST_ROW = load("""kernel last_row(x) -> y

x f32 [4, 16] heap
y f32 [4, 16] heap
t f32 [4, 16] heap

4 16 t[{0},{1}] = x[{0},{1}]
4 16 y[{0},{1}] = t[3,{1}]
""")


def test_a_producer_and_its_consumer_fuse_and_the_temporary_folds_to_one_row_on_the_stack() -> None:
    [(fusion, moves, program)] = list(fused_nests(PAIR))
    assert fusion == Fusion("t", 0, 1, (("t", (0,)),))
    assert str(fusion) == "fuse the scope at depth 0 of t with the next 1, t folded along dim 0"
    assert list(moves) == ["join_scopes(op=t, depth=0)", "reuse_dims(buffer=t, dim=0)",
                           "set_location(buffer=t, location=stack)"]
    assert to_text(program) == """kernel pair(x) -> y

x f32 [4, 16] heap
y f32 [4, 16] heap
t f32 [4:1, 16] stack

4 16 t[{0},{1}] = x[{0},{1}] * 2
| 16 y[{0},{1}] = t[{0},{1}] + 1
"""
    # the fused scope's rows fuse in turn, one level down, and the row folds to one element
    [(inner, _, folded)] = list(fused_nests(program))
    assert inner == Fusion("t", 1, 1, (("t", (1,)),))
    assert "t f32 [4:1, 16:1] stack" in to_text(folded)


def test_a_chain_fuses_as_far_as_it_stays_legal_and_once_from_its_first_scope() -> None:
    [(fusion, moves, program)] = list(fused_nests(BLOCKED))
    assert (fusion.label, fusion.depth, fusion.joined) == ("p", 0, 3)
    assert dict(fusion.folded) == {"p": (0,), "t": (0,)}
    assert [kind(m) for m in moves].count("join_scopes") == 3
    assert len(program.body) == 1


def test_no_fusion_where_an_iteration_reads_what_a_later_one_writes() -> None:
    assert list(fused_nests(LAST_ROW)) == []


def test_a_temporary_that_a_scope_outside_the_fusion_reads_is_not_folded() -> None:
    """z's scope, of another size, does not fuse, and reads two rows of t."""
    outside = load(to_text(PAIR).replace("y f32 [4, 16] heap", "y f32 [4, 16] heap\nz f32 [2, 16] heap")
                   .replace("-> y", "-> y, z") + "2 16 z[{0},{1}] = t[{0}*2,{1}]\n")
    [(fusion, moves, _)] = list(fused_nests(outside))
    assert (fusion.label, fusion.joined, fusion.folded) == ("t", 1, ())
    assert [kind(m) for m in moves] == ["join_scopes"]


@pytest.mark.parametrize("spec", [BLOCKED, PAIR], ids=["blocked", "pair"])
def test_every_fusion_replays_move_by_move_and_computes_what_the_spec_does(spec) -> None:
    inputs = random_inputs(spec, seed=3)
    expected = interpret(spec, inputs)
    frontier, checked = [spec], 0
    while frontier:  # fusions of the fused programs too, down to the innermost scopes
        program = frontier.pop()
        for fusion, moves, after in fused_nests(program):
            replayed, applied = replay_moves(program, moves)
            assert applied == list(moves) and replayed == after, fusion
            got = interpret(after, inputs)
            for name, value in expected.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=str(fusion))
            frontier.append(after)
            checked += 1
    assert checked >= 2


def test_compound_steps_offer_fusions_beside_tiles_of_their_own_kind() -> None:
    kinds = {step.kind for step in compound_steps(without_comments(BLOCKED), get_target("x86-avx2"))}
    assert kinds == {TILE, FUSION}


def test_a_game_can_play_a_whole_fusion_in_one_step() -> None:
    from test_compound_register_tile import one_step_where

    spec = without_comments(PAIR)
    result = one_step_where("reuse_dims", spec)  # a program with a folded temporary pays
    assert len(result.steps) == 1 and result.steps[0].move.startswith("fuse the scope at depth 0 of t")
    assert replay_moves(spec, result.moves)[1] == result.moves
