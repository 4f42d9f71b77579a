"""The heuristic pass's matmul keeps its register tile in registers: the compiler's assembly for
the inner loop of the tuned library matmul is R broadcasts of a and R x W fused multiply-adds
into accumulators that never touch the stack (a spilled accumulator would be a load and a store
of the stack per multiply-add). Read for AVX2's 16 registers and AVX-512's 32; only compiled,
so it runs on any x86 host with gcc. The same for every tile of the tuned conv2 on AVX2, whose rows
of 54 end in a tail of 6 lanes."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import pytest

from agent.passes import heuristic
from codegen import generate, get_target
from dojo_ir import load
from dojo_ir.derivation import advance
from dojo_ir.library import KERNELS

LABEL = re.compile(r"^(\.L\w+):")
JUMP = re.compile(r"^\s+j\w+\s+(\.L\w+)")
STACK = re.compile(r"\(%[re]?(sp|bp)\)|%[re]?(sp|bp)\b")


def innermost_loop(assembly: str, mnemonic: str) -> list[str]:
    """The instructions of the smallest loop among those with the most `mnemonic` (the harness's
    random inputs have a few multiply-adds too)."""
    return min(loops(assembly), key=lambda body: (-sum(mnemonic in line for line in body), len(body)))


def loops(assembly: str) -> list[list[str]]:
    """The instructions of every loop: a label and a later jump back to it."""
    lines = assembly.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := LABEL.match(line))}
    return [lines[labels[m.group(1)] + 1:j] for j, line in enumerate(lines)
            if (m := JUMP.match(line)) and labels.get(m.group(1), j) < j]


def tuned_assembly(kernel: str, target: str) -> str:
    facts = get_target(target)
    if not facts.buildable() or not get_target("native").x86:
        pytest.skip("needs gcc for an x86 host")
    spec = load(KERNELS[kernel].text())
    source = generate(advance(spec, heuristic(spec, facts)), facts)
    return subprocess.run([*facts.compiler, "-x", "c", "-", *facts.flags, "-S", "-o", "-"], input=source,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(("target", "fmas", "broadcasts"), [
    ("x86-avx2", 12, 6),  # 6 rows x 2 vectors of 8 floats in 12 of 16 ymm registers
    ("x86-avx512", 24, 6),  # 6 rows x 4 vectors of 16 floats in 24 of 32 zmm registers
])
def test_the_tuned_matmuls_inner_loop_keeps_its_accumulators_in_registers(target, fmas, broadcasts) -> None:
    loop = [line.strip() for line in innermost_loop(tuned_assembly("matmul", target), "vfmadd")]
    assert sum(line.startswith("vfmadd") for line in loop) == fmas
    assert sum(line.startswith("vbroadcastss") for line in loop) == broadcasts
    assert [line for line in loop if STACK.search(line)] == []  # nothing spilled to, or reloaded from, the stack


def test_the_tuned_conv2s_tiles_and_tail_tile_keep_their_accumulators_in_registers() -> None:
    """conv2's rows of 54 on AVX2: tiles of vectors of 8 and of the 6-lane tail, every one of them
    without a vector register to or from the stack. (On AVX-512 the rows would leave a sixth of
    the lanes idle and the output channels take the vectors, `channel_lanes`: that tile is loaded
    and stored a lane at a time, and GCC keeps it in its array.)"""
    tiles = [[line.strip() for line in body] for body in loops(tuned_assembly("conv2", "x86-avx2"))]
    tiles = [body for body in tiles if sum(line.startswith("vfmadd") for line in body) >= 12]
    assert tiles and all(all("ymm" in line for line in body if line.startswith("vfmadd")) for body in tiles)
    assert [line for body in tiles for line in body if STACK.search(line) and "mm" in line] == []


POINTWISE_14 = """kernel conv(x, w, b) -> y

x f32 [1, 32, 14, 14] heap
w f32 [32, 32, 1, 1] heap
b f32 [32] heap
y f32 [1, 32, 14, 14] heap

32 14 14 y[0,{0},{1},{2}] = b[{0}]
32 14 14 32 y[0,{0},{1},{2}] += x[0,{3},{1},{2}] * w[{0},{3},0,0]
"""


def test_a_row_wider_than_one_avx2_vector_keeps_its_tile_in_registers() -> None:
    """A 1x1 Conv's direct form at 14x14 for AVX2: the row of 14 is split into a vector of 8 and a
    tail of 6 (widened to 8), each a tile in registers. As one vector of 14, widened to 16 lanes
    (two ymm registers), GCC kept the accumulators' halves on the stack and built each read lane
    by lane: 17 ms for ResNet-50's 1x1 at 14x14, against 0.8 ms with the channels as lanes."""
    facts = get_target("x86-avx2")
    if not facts.buildable() or not get_target("native").x86:
        pytest.skip("needs gcc for an x86 host")
    spec = load(POINTWISE_14)
    program = advance(spec, heuristic(spec, facts))
    source = generate(program, facts)
    assert "x16" not in source  # no vector of 16 floats, twice AVX2's registers
    assembly = subprocess.run([*facts.compiler, "-x", "c", "-", *facts.flags, "-S", "-o", "-"], input=source,
                              capture_output=True, text=True, check=True).stdout
    innermost = [body for body in loops(assembly) if not any(LABEL.match(line) for line in body)]
    tiles = [body for body in innermost if sum("vfmadd" in line for line in body) >= 8]  # 8 rows of the tile
    assert len(tiles) >= 2  # the vectors of 8, and the tail of 6
    assert [line for body in tiles for line in body if STACK.search(line)] == []


BLOCKS_7 = """kernel conv(x, wb, b) -> y

x f32 [1, 7, 9, 9, 32] heap
wb f32 [1, 7, 224, 3, 3, 32] heap
b f32 [224] heap
y f32 [1, 7, 7, 7, 32] heap

7 7 7 32 y[0,{0},{1},{2},{3}] = b[{0}*32+{3}]
7 7 7 32 7 32 3 3 y[0,{0},{1},{2},{3}] += x[0,{4},{1}+{6},{2}+{7},{5}] * wb[0,{0},{4}*32+{5},{6},{7},{3}]
"""


def test_a_tile_is_not_cut_for_cores_that_the_scopes_outside_it_already_keep_busy() -> None:
    """Inception v2's 3x3 224 -> 224 at 7x7 with the channels as lanes, on 2 cores: its 7 blocks of
    channels by 7 rows are what the parallel pass shares out, so the tile keeps both vectors of a
    block (7 positions x 2 vectors, 14 accumulators), where one cut to a vector for the cores to
    share the two had 7, fewer than the multiply-adds in flight: 336 us a call in the model, 263
    us with the whole block."""
    facts = replace(get_target("x86-avx512"), cores=2)
    spec = load(BLOCKS_7)
    source = generate(advance(spec, heuristic(spec, facts)), facts)
    accumulators = set(re.findall(r"\*\(vf32x16 \*\)&(\w+_acc\w*\[\d+\]) \+=", source))
    assert len(accumulators) == 14
