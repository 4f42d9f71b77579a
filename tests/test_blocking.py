"""The order of a register-blocked reduction's blocks (agent/blocking.py), and the heuristic pass
playing it: the blocks of the reduction outside the column blocks, and the slice of the broadcast
operand that one block reads packed, when that slice fits half the private cache."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.blocking import reduction_outside_columns
from agent.passes import heuristic
from codegen.targets import Caches, get_target
from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.derivation import advance
from dojo_ir.library import KERNELS

AVX512 = replace(get_target("native"), vector_bytes=64, vector_registers=32, cores=2)  # not this machine's


@pytest.mark.parametrize(("rows", "block", "private", "outside"), [
    (768, 256, 2 << 20, True),  # the Xeon's matmul: a 768 KiB slice of a in half of a 2 MiB L2
    (768, 256, 1 << 20, False),  # a 1 MiB L2: the slice would push the panel out
    (512, 256, 1 << 20, True),  # exactly half
    (513, 256, 1 << 20, False),
])
def test_the_reductions_blocks_go_outside_when_the_slice_fits_half_the_private_cache(rows, block, private,
                                                                                    outside) -> None:
    target = replace(AVX512, caches=Caches(private=private))
    assert reduction_outside_columns(rows * block * 4, target) is outside


def _schedule(m: int, private: int, cores: int = 2) -> tuple[str, object, list[str]]:
    spec = load(KERNELS["matmul"].text(m=m, k=512, n=512))
    moves = heuristic(spec, replace(AVX512, cores=cores, caches=Caches(private=private)))
    return to_text(advance(spec, moves)), spec, moves


def test_heuristic_reuses_a_packed_slice_of_a_from_the_private_cache_across_column_blocks() -> None:
    """24 rows by 256 steps of a (24 KiB) fit half of 128 KiB: each block of k packs its slice of a
    once, on the heap, with the cores' vectors, rows 256 apart instead of 512; the column blocks
    inside, on the cores, each with b's panel packed on its thread's stack, then the row blocks."""
    text, spec, moves = _schedule(24, 128 << 10)
    assert "a_s f32 [2:1, 24, 256] " in text
    assert "\n2 24:p 16 16:v a_s[{0},{1},{2}*16+{3}] = a[{1},{0}*256+{2}*16+{3}]" in text
    assert "\n| 8:p 256 4 16:v b_s[" in text
    assert "| |   4 6:u 4:u 16:v c_acc[" in text
    assert "+= a_s[{0},{2}*6+{4},{3}] * b_s[" in text
    inputs = random_inputs(spec, 0)
    assert abs(interpret(advance(spec, moves), inputs)["c"] - interpret(spec, inputs)["c"]).max() < 1e-3


def test_heuristic_keeps_the_column_blocks_outermost_when_the_slice_outgrows_the_private_cache() -> None:
    """96 rows by 64 steps (24 KiB) do not fit half of 32 KiB: each column block's output stays in
    cache over the blocks of k instead, and a is read where it lies."""
    text, _, _ = _schedule(96, 32 << 10)
    assert "8:p 8 64 4 16:v b_s[" in text
    assert "a_s" not in text


def test_a_batch_on_the_cores_leaves_the_slice_unpacked() -> None:
    """bmm's batches are what the cores share, outside the blocks of k: a slice on the heap would be
    one buffer that both threads write."""
    spec = load(KERNELS["bmm"].text(b=2, m=24, k=512, n=512))
    moves = heuristic(spec, replace(AVX512, caches=Caches(private=128 << 10)))
    assert not any("buffer=a)" in m for m in moves)
