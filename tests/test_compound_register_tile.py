"""Register tiles as one step of a ranked search (agent/compound/register_tile.py): every shape that fits the
target's registers is offered, each is the single moves that build it, all legal, and it computes
what the program before it computed."""

from __future__ import annotations

import numpy as np
import pytest

from agent.compound import Tile, register_tiles
from agent.costmodel.model import SHIPPED, CostModel
from agent.costmodel.search import Ranked, continue_ranked
from agent.evaluate import replay_moves
from agent.passes.register_tile import live_registers
from agent.perfllm.game import kind
from agent.perfllm.play import PlayResult
from codegen.targets import get_target
from dojo_ir import Program, interpret, load, random_inputs, to_text
from dojo_ir.paths import without_comments

AVX2, AVX512 = get_target("x86-avx2"), get_target("x86-avx512")

MATMUL = load("""kernel mm(a, b) -> y

a f32 [6, 16] heap
b f32 [16, 32] heap
y f32 [6, 32] heap

6 32 y[{0},{1}] = 0
6 32 16 y[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""")

# channels innermost as the lanes, two reductions (input channels and a window of 3), rows of
# outputs reading the input at a stride of 2
CONV = load("""kernel conv(x, w) -> y

x f32 [9, 4] heap
w f32 [3, 4, 16] heap
y f32 [4, 16] heap

4 16 y[{0},{1}] = 0
4 16 4 3 y[{0},{1}] += x[{0}*2+{3},{2}] * w[{3},{2},{1}]
""")

BATCHED = load("""kernel bmm(a, b) -> y

a f32 [2, 4, 8] heap
b f32 [2, 8, 16] heap
y f32 [2, 4, 16] heap

2 4 16 y[{0},{1},{2}] = 0
2 4 16 8 y[{0},{1},{2}] += a[{0},{1},{3}] * b[{0},{3},{2}]
""")


def test_a_tile_of_two_rows_by_two_vectors_of_a_matmul_and_its_blocks_in_either_order() -> None:
    """The tile the step makes: the columns split into vectors of the target's lanes, the rows by R,
    the reduction outside the tile, the lanes vectorised, the rows and vectors unrolled, and the
    tile kept in an accumulator."""
    found = {tile: (moves, program) for tile, moves, program in register_tiles(MATMUL, AVX2)}
    moves, program = found[Tile("y#2", columns=1, vectors=2, lanes=8, rows=0, row_factor=2)]
    assert [kind(m) for m in moves] == ["split_scope"] * 3 + ["swap_scopes"] * 4 + [
        "vectorize_scope", "unroll_scope", "unroll_scope", "accumulate"]
    assert to_text(program) == """kernel mm(a, b) -> y

a f32 [6, 16] heap
b f32 [16, 32] heap
y f32 [6, 32] heap
y_acc f32 [3:1, 2:1, 2, 2, 8] stack

6 32 y[{0},{1}] = 0
3 2 2:u 2:u 8:v y_acc[{0},{1},{2},{3},{4}] = y[{0}*2+{2},{1}*16+{3}*8+{4}]
| | 16 2:u 2:u 8:v y_acc[{0},{1},{3},{4},{5}] += a[{0}*2+{3},{2}] * b[{2},{1}*16+{4}*8+{5}]
| | 2:u 2:u 8:v y[{0}*2+{2},{1}*16+{3}*8+{4}] = y_acc[{0},{1},{2},{3},{4}]
"""
    _, swapped = found[Tile("y#2", columns=1, vectors=2, lanes=8, rows=0, row_factor=2, columns_outside=True)]
    assert to_text(swapped).endswith("""
2 3 2:u 2:u 8:v y_acc[{0},{1},{2},{3},{4}] = y[{1}*2+{2},{0}*16+{3}*8+{4}]
| | 16 2:u 2:u 8:v y_acc[{0},{1},{3},{4},{5}] += a[{1}*2+{3},{2}] * b[{2},{0}*16+{4}*8+{5}]
| | 2:u 2:u 8:v y[{1}*2+{2},{0}*16+{3}*8+{4}] = y_acc[{0},{1},{2},{3},{4}]
""")


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_every_shape_that_fits_the_registers_is_offered_and_no_other(target) -> None:
    lanes = target.vector_bytes // 4
    vectors = 32 // lanes
    offered = {(t.rows, t.row_factor, t.vectors, t.columns_outside) for t, _, _ in register_tiles(MATMUL, target)}
    fits = {(rows, r, w, outside) for w in range(1, vectors + 1) if vectors % w == 0
            for rows, r in [(None, 1), *((0, r) for r in (2, 3, 6))]
            if live_registers(r, w, 1) <= target.vector_registers
            # both orders of the blocks where the rows and the columns both leave some
            for outside in ((False, True) if r < 6 and w < vectors and rows is not None else (False,))}
    assert offered == fits
    assert all(live_registers(r, w, 1) <= target.vector_registers for _, r, w, _ in offered)


@pytest.mark.parametrize("spec", [MATMUL, CONV, BATCHED], ids=["matmul", "conv", "batched"])
@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_every_tile_replays_move_by_move_and_computes_what_the_spec_does(spec, target) -> None:
    inputs = random_inputs(spec, seed=1)
    expected = interpret(spec, inputs)
    found = list(register_tiles(spec, target))
    assert found, "a reduction with contiguous columns has at least its one-vector tile"
    for tile, moves, program in found:
        replayed, applied = replay_moves(spec, moves)
        assert applied == list(moves) and replayed == program, tile
        assert any(b.name.endswith("_acc") for b in program.buffers), tile
        got = interpret(program, inputs)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=str(tile))


def test_the_rows_of_a_convolution_are_any_scope_its_output_indexes_but_the_lanes() -> None:
    rows = {t.rows for t, _, _ in register_tiles(CONV, AVX2)}
    assert rows == {None, 0}  # the output's row, not the channels that are the lanes


def test_no_tile_where_there_are_no_vectors_or_the_reduction_is_already_accumulated() -> None:
    assert list(register_tiles(MATMUL, get_target("cuda"))) == []
    _, _, tiled = next(iter(register_tiles(MATMUL, AVX2)))
    assert list(register_tiles(tiled, AVX2)) == []
    # columns of 12 floats are not a whole number of AVX2's 8 lanes: a tail would copy the nest
    ragged = load(to_text(MATMUL).replace("[16, 32]", "[16, 12]").replace("[6, 32]", "[6, 12]")
                  .replace("6 32", "6 12"))
    assert list(register_tiles(ragged, AVX2)) == []
    # a sum into a scalar has no row of lanes (a random program once made the search fail on it)
    total = load("kernel total(x) -> s\n\nx f32 [64] heap\ns f32 [] heap\n\ns[] = 0\n64 s[] += x[{0}]\n")
    assert list(register_tiles(total, AVX2)) == []


def one_step_where(pays: str, spec: Program) -> PlayResult:
    """One step of a ranked game from `spec`, where a program with a move of kind `pays` is ten times
    as fast and any other move costs 1%."""
    from test_costmodel_search import HOST

    def cost(moves: list[str]) -> float:
        return 1e-3 * 1.01 ** len(moves) / (10 if pays in map(kind, moves) else 1)

    return continue_ranked(spec, CostModel.load(SHIPPED), HOST, 1, cost, target="x86-avx2",
                           ranked=Ranked(measure=2, explore=2, refit_steps=0))


def test_a_game_can_play_a_whole_tile_in_one_step() -> None:
    spec = without_comments(MATMUL)
    result = one_step_where("accumulate", spec)
    assert len(result.steps) == 1 and result.steps[0].move.startswith("register tile of y#2")
    assert len(result.moves) >= 4  # the tile's single moves, which replay as they were played
    assert replay_moves(spec, result.moves)[1] == result.moves
