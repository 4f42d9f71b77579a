"""Prefetches for a register tile's operands (codegen/prefetch.py): for its broadcast operand, the
lines that the next iteration of the loop around the tile broadcasts from; for a panel of its vector
operand that rows reuse, the lines of the next panel, spread over the rows. Exactly those, in bounds,
and nowhere else."""

from __future__ import annotations

import re
from itertools import product
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


# -- panels of the vector operand --------------------------------------------------


def blocked(blocks: int = 3, rows: int = 4, channels: int = 32, *, groups: int = 0, reused: bool = True,
            location: str = "heap") -> Program:
    """A 1x1 convolution's tile in blocks of `channels` input channels, the rows inside the blocks
    (register_tile's blocks of K outside the rows): each row broadcasts x into 2 vectors of output
    channels, and every row of a block reads the block's panel of weights, `channels` * 2 lines.
    With `groups`, a loop of groups outside the blocks, whose weights follow one another; unless
    `reused`, each row reads a panel of its own; w in another `location` than the heap is a copy
    of the input `v` there."""
    outer, g = (f"{groups} ", "{0}*" + str(blocks * channels) + "+") if groups else ("", "")
    b, r, c = (1, 2, 3) if groups else (0, 1, 2)
    w_rows = (groups or 1) * blocks * channels * (1 if reused else rows)
    w_row = f"{g}{{{b}}}*{channels}+{{{c}}}" if reused else f"({g}{{{b}}}*{rows}+{{{r}}})*{channels}+{{{c}}}"
    copied = location != "heap"  # a temporary, copied from the input `v` first
    n = "{0}" if groups else "0"
    return load(f"""kernel cv(x, {'v' if copied else 'w'}) -> y

x f32 [{groups or 1}, {blocks}, {rows}, 4, {channels}] heap
{f'v f32 [{w_rows}, 32] heap' if copied else ''}
w f32 [{w_rows}, 32] {location}
y f32 [{groups or 1}, {rows}, 4, 32] heap

{f'{w_rows} 32 w[{{0}},{{1}}] = v[{{0}},{{1}}]' if copied else ''}
{groups or 1} {rows} 4 32:v y[{{0}},{{1}},{{2}},{{3}}] = 0
{outer}{blocks} {rows} {channels} 4:u 2:u 16:v y[{n},{{{r}}},{{{c + 1}}},{{{c + 2}}}*16+{{{c + 3}}}] \
+= x[{n},{{{b}}},{{{r}}},{{{c + 1}}},{{{c}}}] * w[{w_row},{{{c + 2}}}*16+{{{c + 3}}}]
""")


def panel_prefetches(source: str) -> tuple[str, list[str]]:
    """The guard and the prefetched offsets of `b_w` in `source`."""
    found = re.search(r"if \((.*)\) \{\n((?:\s*__builtin_prefetch\(&b_w\[.*\], 0, 2\);\n)+)\s*\}", source)
    assert found, source
    return found.group(1), re.findall(r"__builtin_prefetch\(&b_w\[(.*)\], 0, 2\);", found.group(2))


def prefetched_lines(source: str, loops: dict[str, int]) -> dict[tuple[int, ...], set[int]]:
    """The lines of w prefetched in each iteration of the loops outside the rows (`loops`, their
    variables and sizes, outermost first, then the rows' and the channels'), over all the rows."""
    guard, offsets = panel_prefetches(source)
    guard = guard.replace("&&", "and")
    outside = list(loops)[:-2]
    found: dict[tuple[int, ...], set[int]] = {}
    for values in product(*(range(size) for size in loops.values())):
        env = dict(zip(loops, values, strict=True))
        lines = found.setdefault(tuple(env[v] for v in outside), set())
        if eval(guard, {}, env):  # noqa: S307 - our own C text
            lines.update(eval(o, {}, env) for o in offsets)  # noqa: S307
    return found


@settings(max_examples=25, deadline=None)
@given(blocks=st.integers(2, 4), rows=st.integers(2, 6), channels=st.sampled_from([16, 32, 48, 64]))
def test_the_rows_of_a_block_prefetch_exactly_the_next_blocks_panel(blocks: int, rows: int, channels: int) -> None:
    source = generate(blocked(blocks, rows, channels), NATIVE)
    found = prefetched_lines(source, {"i0": blocks, "i1": rows, "i2": channels})
    panel = channels * 32
    for block, lines in found.items():
        following = block[0] + 1
        assert lines == ({following * panel + k * LINE for k in range(panel // LINE)} if following < blocks
                         else set()), block


def test_the_last_block_of_a_group_prefetches_the_next_groups_first_panel() -> None:
    groups, blocks, rows, channels = 3, 2, 4, 32
    source = generate(blocked(blocks, rows, channels, groups=groups), NATIVE)
    found = prefetched_lines(source, {"i0": groups, "i1": blocks, "i2": rows, "i3": channels})
    panel = channels * 32
    for (group, block), lines in found.items():
        following = group * blocks + block + 1
        assert lines == ({following * panel + k * LINE for k in range(panel // LINE)}
                         if following < groups * blocks else set()), (group, block)


def test_the_prefetches_are_spread_over_the_rows_and_the_channels_inside_them() -> None:
    source = generate(blocked(blocks=2, rows=4, channels=32), NATIVE)
    _, offsets = panel_prefetches(source)
    assert len(offsets) == 1  # 64 lines over 4 rows of 32 channels: one a step
    channels_loop = source.index("for (long i2 = 0; i2 < 32; ++i2)")
    assert source.index("__builtin_prefetch(&b_w", channels_loop) < source.index("b_y", channels_loop)


@pytest.mark.parametrize(("why", "program"), [
    ("each row reads a panel of its own: nothing is reused", blocked(reused=False)),
    ("a panel on the stack stays in cache", blocked(location="stack")),
    ("a panel of 16 lines is the hardware prefetcher's", blocked(channels=8)),
])
def test_no_panel_prefetch(why: str, program: Program) -> None:
    assert "__builtin_prefetch(&b_w" not in generate(program, NATIVE), why


def test_a_tile_prefetching_its_panels_computes_what_the_interpreter_does(tmp_path: Path) -> None:
    program = blocked(blocks=3, rows=3, channels=32, groups=2)
    assert "__builtin_prefetch(&b_w" in generate(program, NATIVE)
    assert_matches(program, tmp_path)
