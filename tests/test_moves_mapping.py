"""The moves that map a scope onto hardware and `unmap_scope`, their inverse:
mapping and unmapping gives back the text, on hand-written cases for every
kind and on every library kernel; and the paper's GPU elementwise multiply
is reachable move by move."""

from __future__ import annotations

import pytest

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.library import KERNELS
from dojo_ir.moves import Move, apply, find, parse_move, why_not

MAPPING_MOVES = ("unroll_scope", "parallelize_scope", "vectorize_scope", "map_gpu")

ROW = """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4 8 y[{0},{1}] = x[{0},{1}] * 2
"""

GPU = """kernel k(x) -> y

x f32 [2, 4, 8] heap
y f32 [2, 4, 8] heap

2:g 4:b 8 y[{0},{1},{2}] = x[{0},{1},{2}] * 2
"""

ROUND_TRIPS = [
    pytest.param(ROW, "unroll_scope(op=y, depth=1)", "4 8:u", id="u"),
    pytest.param(ROW, "parallelize_scope(op=y, depth=0)", "4:p 8", id="p"),
    pytest.param(ROW, "vectorize_scope(op=y, depth=1)", "4 8:v", id="v"),
    pytest.param(ROW, "map_gpu(op=y, depth=0, kind=g)", "4:g 8", id="g"),
    pytest.param(GPU.replace("4:b", "4"), "map_gpu(op=y, depth=1, kind=b)", "2:g 4:b 8", id="b"),
    pytest.param(GPU, "map_gpu(op=y, depth=2, kind=w)", "2:g 4:b 8:w", id="w"),
]


def _unmap(move: Move) -> str:
    """The move that undoes `move`: `unmap_scope` at the same scope."""
    return f"unmap_scope(op={move.arg('op')}, depth={move.arg('depth')})"


@pytest.mark.parametrize("text, move, scopes", ROUND_TRIPS)
def test_map_then_unmap_gives_back_the_text(text: str, move: str, scopes: str) -> None:
    program = load(text)
    mapped = apply(program, move)
    assert f"\n{scopes} y[" in to_text(mapped)
    unmap = _unmap(parse_move(move))
    assert unmap in [str(m) for m in find(mapped)]
    assert to_text(apply(mapped, unmap)) == text


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_every_listed_mapping_is_undone_by_unmap_scope(kernel: str) -> None:
    program = load(KERNELS[kernel].small())
    text = to_text(program)
    for move in find(program, Analysis(program)):
        if move.name not in MAPPING_MOVES:
            continue
        mapped = apply(program, move)
        unmap = _unmap(move)
        assert why_not(mapped, unmap) is None, (move, why_not(mapped, unmap))
        assert to_text(apply(mapped, unmap)) == text


def test_reductions_are_not_parallel_but_their_outer_scopes_are() -> None:
    program = load(KERNELS["matmul"].small())
    legal = [str(m) for m in find(program)]
    assert "parallelize_scope(op=c#2, depth=2)" not in legal
    assert "map_gpu(op=c#2, depth=2, kind=g)" not in legal
    assert "parallelize_scope(op=c#2, depth=0)" in legal
    # A horizontal reduction of 4 lanes, but `b[{2},{1}]` walks down a column.
    assert "is strided" in why_not(program, "vectorize_scope(op=c#2, depth=2)")


POOL = """kernel k(x) -> y, z

x f32 [4, 32] heap
y f32 [4, 16] heap
z f32 [4, 32] heap

4 16 y[{0},{1}] = max(x[{0},{1}*2], x[{0},{1}*2+1])
4 16 z[{0},{1}*2] = x[{0},{1}]
"""


def test_a_read_may_stride_through_the_lanes_but_a_write_may_not() -> None:
    """A stride-2 pool's reads are a vector (the code generator gathers them); a store that
    skips elements is not, nor is a read whose index steps down."""
    program = load(POOL)
    assert why_not(program, "vectorize_scope(op=y, depth=1)") is None
    assert "is strided" in why_not(program, "vectorize_scope(op=z, depth=1)")
    reversed_read = load(POOL.replace("x[{0},{1}*2+1]", "x[{0},31-{1}]"))
    assert "is strided" in why_not(reversed_read, "vectorize_scope(op=y, depth=1)")


def test_the_papers_gpu_elementwise_multiply() -> None:
    program = load(KERNELS["mul"].text(m=2, n=32))
    moves = ["split_scope(op=z, depth=1, factor=4)", "map_gpu(op=z, depth=0, kind=g)",
             "map_gpu(op=z, depth=1, kind=b)", "vectorize_scope(op=z, depth=2)"]
    moved = program
    for move in moves:
        assert move in [str(m) for m in find(moved)], move
        moved = apply(moved, move)
    assert "\n2:g 8:b 4:v z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]\n" in to_text(moved)
    assert check(load(to_text(moved))) == []
    inputs = random_inputs(program, 0)
    assert (interpret(moved, inputs)["z"] == interpret(program, inputs)["z"]).all()
    # Unmapping the grid would leave the block without one.
    assert "no `:g` scope above it" in why_not(moved, "unmap_scope(op=z, depth=0)")
