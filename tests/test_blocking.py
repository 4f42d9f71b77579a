"""The order of a register-blocked reduction's blocks (agent/blocking.py), and the heuristic pass
playing it: the blocks of the reduction outside the column blocks when the slice of the broadcast
operand that one block reads fits half the private cache, each core's share of the column blocks
one loop outermost."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.blocking import cores_share, reduction_outside_columns
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


@given(st.integers(1, 64), st.integers(1, 8))
def test_the_cores_shares_split_the_column_blocks_exactly(blocks: int, cores: int) -> None:
    share = cores_share(blocks, cores)
    if share is not None:
        assert share * cores == blocks and share >= 2
    else:
        assert cores < 2 or blocks % cores or blocks < 2 * cores


def _schedule(m: int, private: int, cores: int = 2) -> tuple[str, object, list[str]]:
    spec = load(KERNELS["matmul"].text(m=m, k=512, n=512))
    moves = heuristic(spec, replace(AVX512, cores=cores, caches=Caches(private=private)))
    return to_text(advance(spec, moves)), spec, moves


def test_heuristic_reuses_the_slice_of_a_from_the_private_cache_across_column_blocks() -> None:
    """24 rows by 256 steps of a (24 KiB) fit half of 128 KiB: per core, its 4 column blocks inside
    each block of k, in one parallel loop of the 2 cores' shares."""
    text, spec, moves = _schedule(24, 128 << 10)
    assert "2:p 2 4 256 4 16:v b_s[" in text  # cores, k blocks, column blocks: b's panel packed
    assert "|   | | 4 6:u 4:u 16:v c_acc[" in text  # then the row blocks
    inputs = random_inputs(spec, 0)
    assert abs(interpret(advance(spec, moves), inputs)["c"] - interpret(spec, inputs)["c"]).max() < 1e-3


def test_heuristic_keeps_the_column_blocks_outermost_when_the_slice_outgrows_the_private_cache() -> None:
    """96 rows by 64 steps (24 KiB) do not fit half of 32 KiB: each column block's output stays in
    cache over the blocks of k instead."""
    text, _, _ = _schedule(96, 32 << 10)
    assert "8:p 8 64 4 16:v b_s[" in text


def test_one_core_puts_the_blocks_of_the_reduction_outermost() -> None:
    text, _, _ = _schedule(24, 128 << 10, cores=1)
    assert "\n2 8 256 4 16:v b_s[" in text
