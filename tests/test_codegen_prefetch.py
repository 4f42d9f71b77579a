"""Prefetches for a register tile's broadcast operand (codegen/prefetch.py): the lines that the
next iteration of the loop around the tile broadcasts from, exactly, in bounds, and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import generate, get_target
from codegen import prefetch as prefetch_module
from dojo_ir import load
from dojo_ir.tree import Program
from tests.test_codegen_c import assert_matches

NATIVE = get_target("native")
LINE = 16  # floats in a cache line


def pointwise(blocks: int = 4, rows: int = 5, pixels: int = 3, channels: int = 32, *, kind: str = "",
              local: bool = False, x_layout: str = "blocked") -> Program:
    """A 1x1 convolution's tile over input `x` in blocks of `channels`: for each row, each block
    of input channels broadcasts `pixels` positions into 2 vectors of output channels. With
    `local`, the tile reads a copy of `x` in a stack array instead."""
    x_shape, x_index = {
        "blocked": ([blocks, rows, pixels, channels], "{1},{0},{3},{2}"),
        "channels_outer": ([blocks, rows, channels, pixels], "{1},{0},{2},{3}"),
    }[x_layout]
    tile = f"y[{{0}},{{3}},{{4}}*16+{{5}}] += x[{x_index}] * w[{{1}}*{channels}+{{2}},{{4}}*16+{{5}}]"
    copy = f"{' '.join(map(str, x_shape))} x[{{0}},{{1}},{{2}},{{3}}] = v[{{0}},{{1}},{{2}},{{3}}]\n" if local else ""
    return load(f"""kernel pw({'v' if local else 'x'}, w) -> y

{'v f32 ' + str(x_shape) + ' heap' if local else ''}
x f32 {x_shape} {'stack' if local else 'heap'}
w f32 [{blocks * channels}, 32] heap
y f32 [{rows}, {pixels}, 32] heap

{copy}{rows} {pixels} 32:v y[{{0}},{{1}},{{2}}] = 0
{rows} {blocks}{':' + kind if kind else ''} {channels} {pixels}:u 2:u 16:v {tile}
""")


def prefetch_block(source: str) -> tuple[str, list[str]]:
    """The guard and the prefetched offsets of `b_x` in `source`."""
    found = re.search(r"if \((i\d+ \+ 1 < \d+)\) \{\n((?:\s*__builtin_prefetch\(&b_x\[.*\]\);\n)+)\s*\}", source)
    assert found, source
    return found.group(1), re.findall(r"__builtin_prefetch\(&b_x\[(.*)\]\);", found.group(2))


def test_the_next_blocks_lines_are_prefetched_before_the_tile_reads_this_ones() -> None:
    source = generate(pointwise(), NATIVE)
    guard, offsets = prefetch_block(source)
    assert guard == "i1 + 1 < 4"
    # x[block + 1, row, 0..2, 0..31]: 3 positions of 32 channels, 2 lines each
    assert offsets == [f"i0*96 + i1*480 + {480 + k * LINE}" for k in range(6)]
    tile = source.index("for (long i2 = 0; i2 < 32; ++i2)")
    assert source.rindex("__builtin_prefetch", 0, tile) > source.rindex("for (long i1", 0, tile)


@pytest.mark.parametrize(("why", "program"), [
    ("a parallel loop's next iteration is another thread's", pointwise(kind="p")),
    ("a local array stays in cache", pointwise(local=True)),
    ("the tile's loop does not run along the lines", pointwise(x_layout="channels_outer")),
])
def test_no_prefetch(why: str, program: Program) -> None:
    assert "__builtin_prefetch" not in generate(program, NATIVE), why


def test_a_tile_that_reads_more_lines_than_a_short_run_is_left_to_the_hardware(monkeypatch) -> None:
    monkeypatch.setattr(prefetch_module, "MAX_LINES", 5)
    assert "__builtin_prefetch" not in generate(pointwise(), NATIVE)


@settings(max_examples=30, deadline=None)
@given(blocks=st.integers(2, 5), rows=st.integers(1, 3), pixels=st.integers(1, 4),
       channels=st.sampled_from([16, 32, 48, 64]))
def test_the_prefetched_lines_are_exactly_those_of_the_next_iteration(blocks: int, rows: int, pixels: int,
                                                                      channels: int) -> None:
    guard, offsets = prefetch_block(generate(pointwise(blocks, rows, pixels, channels), NATIVE))
    assert guard == f"i1 + 1 < {blocks}"
    for row in range(rows):
        for block in range(blocks - 1):
            prefetched = {eval(o, {"i0": row, "i1": block}) for o in offsets}  # noqa: S307 - our own C text
            read = {((block + 1) * rows * pixels * channels + row * pixels * channels + p * channels + c)
                    // LINE * LINE for p in range(pixels) for c in range(channels)}
            assert prefetched == read
            assert max(prefetched) < blocks * rows * pixels * channels


def test_a_prefetching_tile_computes_what_the_interpreter_does(tmp_path: Path) -> None:
    program = pointwise(blocks=3, rows=2, pixels=4)
    assert "__builtin_prefetch" in generate(program, NATIVE)
    assert_matches(program, tmp_path)
