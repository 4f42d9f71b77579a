"""The passes (agent/passes.py): their moves replay on every library kernel and every foreign
kernel, keep the meaning, and follow the target's facts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.passes import PASSES, fma_in_flight, heuristic, lanes, reduction_block, tile_shape
from codegen.targets import Caches, get_target
from dojo_ir import DojoError, interpret, load, random_inputs, to_text
from dojo_ir.derivation import advance, record, verify
from dojo_ir.library import KERNELS
from dojo_ir.tree import accesses, walk_ops
from libgen.onnx.random_kernels import random_kernels
from runner.roofline import machine_limits

ROOT = Path(__file__).resolve().parent.parent
FOREIGN = sorted((ROOT / "tests" / "foreign" / "valid").glob("*.dojo"))
CPU = replace(get_target("native"), vector_bytes=32, cores=4, caches=Caches())  # not this machine's
# nodes of the ONNX catalogue nobody here chose: odd sizes, strides, groups, axes, broadcasting
RANDOM_ONNX = random_kernels(24, seed=0, smallest=64, largest=32 * 1024, max_flops=5e5)


def _same_meaning(spec, program) -> None:
    for seed in range(20):  # inputs the spec computes on (an integer kernel may divide by zero)
        inputs = random_inputs(spec, seed)
        try:
            expected = interpret(spec, inputs)
        except DojoError:
            continue
        break
    actual = interpret(program, inputs)
    for name in spec.outputs:  # a reduction in blocks sums its partial sums: roundings of the outputs' scale
        scale = float(np.nanmax(np.abs(expected[name]), initial=1.0, where=np.isfinite(expected[name])))
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-4, atol=1e-5 * max(1.0, scale),
                                   equal_nan=True)


def _check(spec, moves: list[str]) -> None:
    program = advance(spec, moves)
    assert verify(record(program, moves, "spec.dojo"), spec) == []
    assert load(to_text(program)) == program
    _same_meaning(spec, program)


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("method", sorted(PASSES))
def test_every_pass_replays_and_keeps_the_meaning_on_the_library(method: str, name: str) -> None:
    spec = load(KERNELS[name].small())
    _check(spec, PASSES[method](spec, CPU))


@pytest.mark.parametrize("path", FOREIGN, ids=lambda p: p.stem)
@pytest.mark.parametrize("method", sorted(PASSES))
def test_every_pass_replays_and_keeps_the_meaning_on_foreign_kernels(method: str, path: Path) -> None:
    spec = load(path.read_text())
    _check(spec, PASSES[method](spec, CPU))


@pytest.mark.parametrize("kernel", RANDOM_ONNX, ids=lambda k: k.name)
@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_the_heuristic_pass_keeps_the_meaning_on_random_kernels_of_the_onnx_catalogue(kernel, vector_bytes: int
                                                                                      ) -> None:
    spec = load(kernel.text)
    _check(spec, heuristic(spec, replace(CPU, vector_bytes=vector_bytes)))


@pytest.mark.parametrize("method", sorted(PASSES))
def test_the_passes_vectorize_library_kernels_at_vector_friendly_shapes(method: str) -> None:
    for name, shape in (("softmax", {"m": 4, "n": 64}), ("matmul", {"m": 8, "k": 8, "n": 32}),
                        ("layernorm1", {"m": 4, "n": 32})):
        spec = load(KERNELS[name].text(**shape))
        _check(spec, PASSES[method](spec, CPU))


def test_heuristic_softmax_is_fused_accumulated_vectorized_and_parallel() -> None:
    spec = load(KERNELS["softmax"].text(m=8, n=64))
    moves = heuristic(spec, CPU)
    text = to_text(advance(spec, moves))
    assert ":v" in text and ":p" in text
    assert any(m.startswith("accumulate(") for m in moves)
    assert any(m.startswith("join_scopes(") for m in moves)


@pytest.mark.parametrize(("vector_bytes", "factor"), [(16, 4), (32, 8), (64, 16)])
def test_heuristic_tiles_by_the_targets_lane_count(vector_bytes: int, factor: int) -> None:
    target = replace(CPU, vector_bytes=vector_bytes)
    assert lanes(target, 4) == factor
    spec = load(KERNELS["softmax"].text(m=8, n=64))
    moves = heuristic(spec, target)
    splits = [m for m in moves if m.startswith("split_scope(")]
    assert splits and all(m.endswith(f"factor={factor})") for m in splits)
    assert f"{factor}:v" in to_text(advance(spec, moves))


def test_heuristic_makes_matmul_contiguous_and_one_core_runs_no_threads() -> None:
    spec = load(KERNELS["matmul"].text(m=16, k=16, n=32))
    moves = heuristic(spec, replace(CPU, cores=1))
    assert moves[0] == "swap_scopes(op=c#2, depth=1)"  # i, k, j: b and c walk rows
    text = to_text(advance(spec, moves))
    assert ":v" in text and ":p" not in text
    _check(spec, moves)


@pytest.mark.parametrize(("rows", "vectors", "registers", "shape"), [
    (768, 64, 32, (6, 4)),  # matmul on AVX-512: 24 accumulators, 10 loads per 24 multiply-adds
    (256, 16, 32, (8, 2)),  # 6 x 4 would leave a tail of 4 rows; 4 x 4 reads the panel twice as often
    (64, 7, 32, (8, 3)),  # 8 x 7 accumulators leave no register for the 7 vectors: 3, 3 and a tail of 1
    (500, 44, 32, (5, 4)),  # 500 x 704 on AVX-512: 5 rows divide 500
    (768, 128, 16, (6, 2)),  # AVX2's 16 registers: 12 accumulators, 2 vectors and a broadcast
    (1, 1, 32, (1, 1)),
])
def test_register_tile_shape_loads_least_per_multiply_add(rows, vectors, registers, shape) -> None:
    assert tile_shape(rows, vectors, registers) == shape


def test_a_register_tile_keeps_as_many_multiply_adds_in_flight_as_the_core_needs() -> None:
    """Three rows on AVX2: 3 x 2 accumulators load least per multiply-add, but a core that must keep
    8 FMAs under way (4 cycles of latency, 2 ports) leaves its units idle a quarter of the time
    with 6, so the tile widens to 3 x 3; 8 accumulators are enough for 8, not for 10."""
    assert tile_shape(3, 8, 16) == (3, 2)
    assert tile_shape(3, 8, 16, in_flight=8) == (3, 3)
    assert tile_shape(4, 4, 16, in_flight=8) == (4, 2)
    assert tile_shape(4, 4, 16, in_flight=10) == (4, 3)


def test_the_fma_latency_is_measured_on_this_machine_for_the_targets_that_run_here() -> None:
    native = get_target("native")
    if not native.runnable():
        pytest.skip("needs a C compiler for this host")
    assert fma_in_flight(native) == machine_limits().fma_in_flight >= 2  # measured now if it never was
    assert fma_in_flight(get_target("arm-neon")) == 1  # under an emulator: no constraint
    assert fma_in_flight(get_target("cuda")) == 1


def test_a_register_tile_shares_its_column_blocks_evenly_over_the_cores() -> None:
    """448 columns are 28 vectors: 4-vector tiles leave 7 column blocks, one core idle for a
    seventh of the work on 2 cores; 2-vector tiles (12 rows deep) give 14."""
    assert tile_shape(768, 28, 32) == (6, 4)
    assert tile_shape(768, 28, 32, cores=2) == (12, 2)
    assert tile_shape(768, 64, 32, cores=2) == (6, 4)  # 16 column blocks already share out evenly


def test_heuristic_blocks_matmul_for_registers_and_cache() -> None:
    """matmul: a 6 x 4-vector tile of accumulators inside blocks of k, each block of b packed
    and reused by every row block; the blocks of k write c first, so the accumulator adds to
    it. Blocks of 256 steps of 4 vectors (64 KiB) fill half of a 128 KiB private cache; a's
    slice of a block (24 KiB) fits the other half, so the blocks of k go outside the column
    blocks and pack it (tests/test_blocking.py)."""
    spec = load(KERNELS["matmul"].text(m=24, k=512, n=128))
    target = replace(CPU, vector_bytes=64, vector_registers=32, cores=2, caches=Caches(private=128 << 10))
    moves = heuristic(spec, target)
    program = advance(spec, moves)
    text = to_text(program)
    assert "accumulate_partial(op=c#2, depth=3)" in moves
    assert "256 6:u 4:u 16:v c_acc[" in text  # the reduction block around the register tile
    assert "\n2 24:p 16 16:v a_s[" in text  # k blocks, a's slice packed
    assert "| 2:p 256 4 16:v b_s[" in text  # column blocks on the cores: b's panel packed
    assert "| |   4 6:u 4:u 16:v c_acc[" in text  # then the row blocks
    _check(spec, moves)


def test_heuristic_reduces_whole_when_the_panel_fits() -> None:
    """AVX2's 2-vector panel of all 512 steps (32 KiB) fits: one block, so c is read and written
    once, its tile loaded into the accumulators before the reduction."""
    spec = load(KERNELS["matmul"].text(m=24, k=512, n=128))
    moves = heuristic(spec, replace(CPU, vector_bytes=32, vector_registers=16))
    assert "512 6:u 2:u 8:v c_acc[" in to_text(advance(spec, moves))
    assert not any(m.startswith("accumulate_partial") for m in moves)
    _check(spec, moves)


@pytest.mark.parametrize(("row", "location"), [(16384, "stack"), (16400, "heap")])
def test_a_folded_temporary_goes_to_the_stack_only_up_to_64_kib(row: int, location: str) -> None:
    """A row of 16,384 floats is 64 KiB: each thread keeps its own on the stack; a longer one stays
    on the heap, so that its folded scope does not become what the threads share."""
    spec = load(f"""kernel k(x) -> y

x f32 [4, {row}] heap
y f32 [4, {row}] heap
t f32 [4, {row}] heap

4 {row} t[{{0}},{{1}}] = exp(x[{{0}},{{1}}])
4 {row} y[{{0}},{{1}}] = t[{{0}},{{1}}] + t[{{0}},0]
""")
    moves = PASSES["naive"](spec, CPU)
    assert "reuse_dims(buffer=t, dim=0)" in moves
    assert advance(spec, moves).buffer_of["t"].location == location


@pytest.mark.parametrize(("steps", "panel_row", "private", "block"), [
    (1024, 64, 1 << 20, 1024),  # AVX2's 2-vector panel: 64 KiB, all of k
    (1024, 256, 1 << 20, 1024),  # AVX-512's 4-vector panel: 256 KiB, all of k
    (4096, 256, 1 << 22, 2048),  # 512 KiB: what a thread's stack holds, in a 4 MiB private cache
    (1024, 64, 1 << 16, 512),  # half of a 64 KiB private cache
    (1000, 1024, 1 << 20, 500),  # the largest divisor that fits
    (7, 1 << 20, 1 << 18, 1),  # a panel row larger than the cache: one step per block
])
def test_reduction_block_keeps_the_panel_packable_and_in_cache(steps, panel_row, private, block) -> None:
    assert reduction_block(steps, panel_row, replace(CPU, caches=Caches(private=private))) == block


def test_heuristic_packs_a_strided_panel_that_fits_the_stack() -> None:
    """AVX2's panel of b, 2 vectors by all 256 steps (32 KiB), is copied into a contiguous
    temporary on each thread's stack, with vectors, before the row blocks that read it; a panel
    that is whole rows of b (a 1-vector-wide b) gains nothing from a copy and stays in place."""
    spec = load(KERNELS["matmul"].text(m=24, k=256, n=64))
    avx2 = replace(CPU, vector_bytes=32, vector_registers=16)
    moves = heuristic(spec, avx2)
    text = to_text(advance(spec, moves))
    assert "stage_reads(op=c_acc#2, depth=1, buffer=b)" in moves
    assert "b_s f32 [4:1, 256, 16] stack" in text
    assert "* b_s[{0},{2},{4}*8+{5}]" in text and " 8:v b_s[" in text
    _check(spec, moves)
    narrow = load(KERNELS["matmul"].text(m=24, k=256, n=16))
    assert not any(m.startswith("stage_reads") for m in heuristic(narrow, avx2))


def test_heuristic_blocks_each_reduction_of_swiglu_on_its_own() -> None:
    spec = load(KERNELS["swiglu"].text(b=1, t=8, d=64, h=64))
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32))
    blocked = {m.split("(")[0] + ":" + m.split("op=")[1].split(",")[0] for m in moves if m.startswith("accumulate")}
    assert blocked == {"accumulate:a#2", "accumulate:c#2"}
    _check(spec, moves)


def test_heuristic_sets_a_blocked_targets_tiles_inside_the_reductions_nest() -> None:
    """bmm has no blocks of k outside its rows, so `c = 0` moves into the blocked nest, set one
    tile at a time just before the tile is loaded, instead of in a pass over all of c."""
    spec = load(KERNELS["bmm"].text(b=2, m=8, k=16, n=64))
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32, cores=2))
    text = to_text(advance(spec, moves)).split("\n\n")[-1]
    init, load_ = text.splitlines()[:2]
    assert init.startswith("2:p 2 8:u 2:u 16:v c[") and init.endswith("= 0")  # batch, column blocks, tile
    assert load_.strip("| ").startswith("8:u 2:u 16:v c_acc[")
    assert any(m.startswith("join_scopes(op=c#1") for m in moves)
    _check(spec, moves)


CONV_SUM_RELU = """kernel conv_sum_relu(x, wb, b, r) -> y

x f32 [1, 2, 4, 28, 16] heap
wb f32 [1, 2, 32, 1, 1, 16] heap
b f32 [32] heap
r f32 [1, 2, 4, 28, 16] heap
y f32 [1, 2, 4, 28, 16] heap
t f32 [1, 2, 1792] heap

2 4 28 16 t[0,{0},{1}*448+{2}*16+{3}] = b[{0}*16+{3}]
2 4 28 16 2 16 t[0,{0},{1}*448+{2}*16+{3}] += x[0,{4},{1},{2},{5}] * wb[0,{0},{4}*16+{5},0,0,{3}]
2 4 28 16 y[0,{0},{1},{2},{3}] = max(t[0,{0},{1}*448+{2}*16+{3}] + r[0,{0},{1},{2},{3}], 0)
"""


def test_heuristic_starts_and_finishes_each_tile_in_the_reductions_nest() -> None:
    """A pointwise convolution as the import writes it, channels innermost and its accumulator's
    row flattened (`t[.., h*448 + w*16 + c]`): the bias that starts a tile and the residual and
    ReLU that finish it join the reduction's nest around the tile, each tile's copy unrolled and
    vectorised as the tile is, so that the compiler keeps the tile in registers from the bias
    to the output."""
    spec = load(CONV_SUM_RELU)
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32, cores=2))
    lines = to_text(advance(spec, moves)).split("\n\n")[-1].splitlines()
    assert len(lines) == 5 and all(line.startswith("|") for line in lines[1:])  # one nest
    assert lines[0].startswith("2:p 4 28:u 16:v t[") and lines[0].endswith("= b[{0}*16+{3}]")
    assert lines[-1] == ("|   | 28:u 16:v y[0,{0},{1},{2},{3}] = "
                         "max(t[0,{0},{1}*448+{2}*16+{3}] + r[0,{0},{1},{2},{3}], 0)")
    assert {"join_scopes(op=t_acc#1, depth=1)", "join_scopes(op=t#1, depth=1)"} <= set(moves)
    _check(spec, moves)


POINTWISE_IN_BLOCKS = """kernel conv_relu(x, wb, b) -> y

x f32 [1, 8, 56, 56, 32] heap
wb f32 [1, 2, 256, 1, 1, 32] heap
b f32 [64] heap
y f32 [1, 2, 56, 56, 32] heap
t f32 [1, 2, 100352] heap

56 2 56 32 t[0,{1},{0}*1792+{2}*32+{3}] = b[{1}*32+{3}]
56 2 56 32 8 32 t[0,{1},{0}*1792+{2}*32+{3}] += x[0,{4},{0},{2},{5}] * wb[0,{1},{4}*32+{5},0,0,{3}]
56 2 56 32 y[0,{1},{0},{2},{3}] = max(t[0,{1},{0}*1792+{2}*32+{3}], 0)
"""


def test_heuristic_reads_an_input_in_blocks_of_channels_in_place() -> None:
    """ResNet-50's pointwise convolution from 256 to 64 channels at 56x56, its input in blocks of
    32 channels: the tile's next step reads the next channel of the same line, so the row that both
    blocks of output channels read is not copied first (as an NCHW input's is, a plane apart)."""
    spec = load(POINTWISE_IN_BLOCKS)
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32, cores=2))
    assert any(m.startswith("accumulate(op=t#2") for m in moves)
    assert not any(m.startswith("stage_reads") for m in moves)


def test_heuristic_vectorizes_a_convolution_row_the_lanes_do_not_divide() -> None:
    spec = load(KERNELS["conv2"].text(n=1, co=8, ci=4, h=8, w=10, k=3))  # rows of 8 outputs
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32))
    text = to_text(advance(spec, moves))
    assert "8:v y_acc[" in text and "accumulate(op=y#2" in " ".join(moves)
    _check(spec, moves)


def test_heuristic_blocks_a_row_the_lanes_do_not_divide_and_its_tail() -> None:
    """conv2's rows of 54 outputs on AVX2 are 6 vectors of 8 and a tail of 6 lanes: the vectors
    get a tile of 4 output channels by 3 vectors, and the tail a loop nest of its own with a
    tile of 4 channels by its one 6-lane vector, both accumulated in registers."""
    spec = load(KERNELS["conv2"].text(n=1, co=4, ci=2, h=10, w=56, k=3))
    moves = heuristic(spec, replace(CPU, vector_bytes=32, vector_registers=16))
    text = to_text(advance(spec, moves))
    assert "4:u 3:u 8:v y_acc2[{0},{1},{2},{6},{7},{8}] += x[{0},{4},{1}+{3},{5}+{2}*24+{7}*8+{8}]" in text
    assert "4:u 6:v y_acc[{0},{1},{5},{6}] += x[{0},{3},{1}+{2},{4}+{6}+48]" in text
    _check(spec, moves)


def test_heuristic_gives_the_vectors_to_the_output_channels_when_the_rows_leave_many_lanes_idle() -> None:
    """Rows of 8 outputs fill half of a 16-lane vector; 32 output channels fill two: the weights are
    copied once with their output channels innermost and a tile of output positions by both
    channel vectors is kept in registers (`channel_lanes`)."""
    spec = load(KERNELS["conv2"].text(n=1, co=32, ci=4, h=8, w=10, k=3))
    moves = heuristic(spec, replace(CPU, vector_bytes=64, vector_registers=32))
    text = to_text(advance(spec, moves))
    assert "w_s f32 [4, 3, 3, 32] heap" in text
    assert "2:u 16:v y_acc[" in text and "* w_s[{2},{3},{4},{6}*16+{7}]" in text
    _check(spec, moves)


@pytest.mark.parametrize(("co", "w"), [(16, 56), (30, 10)])
def test_heuristic_keeps_the_row_vectors_when_few_lanes_idle_or_the_channels_leave_a_tail(co: int, w: int) -> None:
    """On AVX2, rows of 54 leave 4% of the lanes idle; 30 channels are no whole vectors of 8."""
    spec = load(KERNELS["conv2"].text(n=1, co=co, ci=2, h=4, w=w, k=3))
    moves = heuristic(spec, replace(CPU, vector_bytes=32, vector_registers=16))
    assert not any(m.startswith("stage_reads") and "buffer=w" in m for m in moves)
    _check(spec, moves)


MAXPOOL = """kernel maxpool(x) -> y

x f32 [2, 3, 16, 32] heap
y f32 [2, 3, 8, 16] heap

2 3 8 16 y[{0},{1},{2},{3}] = -inf
2 3 8 16 2 2 y[{0},{1},{2},{3}] max= x[{0},{1},{2}*2+{4},{3}*2+{5}]
"""


@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_heuristic_vectorizes_a_pools_output_row_not_its_window(vector_bytes: int) -> None:
    """A 2x2 window innermost would be a vector of 2 lanes; the output row of 16 is one of 8 or
    16 lanes whose reads step by 2, which the code generator gathers."""
    spec = load(MAXPOOL)
    moves = heuristic(spec, replace(CPU, vector_bytes=vector_bytes))
    text = to_text(advance(spec, moves))
    lanes_ = vector_bytes // 4
    assert f"{lanes_}:v y[" in text and "2:v" not in text
    assert "max= x[{0},{1},{2}*2+{3}," in text  # the window's rows outside the vector
    _check(spec, moves)


WIDE_MAXPOOL = MAXPOOL.replace("16] heap", "512] heap").replace("32] heap", "1024] heap").replace(" 16 ", " 512 ")


@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_heuristic_keeps_a_pools_row_of_outputs_in_registers_across_its_window(vector_bytes: int) -> None:
    """The taps update an accumulator row loaded and stored once, not the output at every tap
    (a store read back before it leaves the core: 3x slower for a 3x3 pool at 528x13x13); a row
    wider than ROW_REGISTERS vectors stays in memory."""
    chosen = replace(CPU, vector_bytes=vector_bytes)
    for text, accumulated in ((MAXPOOL, True), (WIDE_MAXPOOL, False)):
        spec = load(text)
        moves = heuristic(spec, chosen)
        program = advance(spec, moves)
        updated = {op.target.array for op, _ in walk_ops(program.body) if op.assign == "max="}
        assert updated == ({"y_acc"} if accumulated else {"y"}), to_text(program)
        _check(spec, moves)


ROW_TRANSFORM = """kernel rows(x) -> v

x f32 [4, 6, 18] heap
v f32 [3, 4, 2, 18] heap

4 2 18 v[0,{0},{1},{2}] = x[{0},{1}*2,{2}] - x[{0},{1}*2+2,{2}]
4 2 18 v[1,{0},{1},{2}] = x[{0},{1}*2+1,{2}] + x[{0},{1}*2+2,{2}]
4 2 18 v[2,{0},{1},{2}] = x[{0},{1}*2+3,{2}] - x[{0},{1}*2+1,{2}]
"""


def test_heuristic_vectorizes_each_of_the_operations_fused_into_one_row() -> None:
    """Fusion joins the three lines down to their rows of 18; a vector scope holds one operation,
    so each row gets its own innermost scope again (fission) and is vectorised, the outer scopes
    staying fused (a Winograd input transform)."""
    spec = load(ROW_TRANSFORM)
    moves = heuristic(spec, CPU)
    body = to_text(advance(spec, moves)).split("\n\n")[-1].splitlines()
    assert len([line for line in body if not line.startswith("|")]) == 1  # one loop nest
    assert len(body) >= 3 and all(":v v[" in line for line in body)  # 8-lane vectors and a 2-lane tail
    _check(spec, moves)


def test_heuristic_vectorizes_and_parallelizes_a_bias_and_gelu_fused_into_one_row() -> None:
    """Fusion joins the bias add and the tanh-GELU that reads it down to one row of 768. The
    temporary keeps that row (folded to one element it tied both to one scalar loop, 1.9x over the
    spec where vectors and threads give 41x): each operation's innermost scope is a vector, the
    rows of tokens are shared by the cores, and both stay in one loop nest."""
    spec = load((ROOT / "examples" / "bias_gelu.dojo").read_text())
    moves = heuristic(spec, CPU)
    program = advance(spec, moves)
    chains = [chain for _, chain in walk_ops(program.body)]
    assert len(chains) == 2 and all(chain[-1].kind == "v" for chain in chains)
    assert all(chain[0].kind == "p" for chain in chains) and len(program.body) == 1
    assert [str(d) for d in program.buffer_of["t"].dims] == ["512:1", "768"]  # the row kept, on the stack
    _check(spec, moves)


def test_heuristic_normalises_each_channel_right_after_its_statistics() -> None:
    """batchnorm's `n c h w` normalisation is interchanged to `c n h w` and fused with the
    per-channel mean and variance, so a channel is read again while it is in cache; with fewer
    channels than four per core it stays apart (3 channels on 4 cores would leave cores idle)."""
    wide = load(KERNELS["batchnorm2"].text(n=2, c=16, h=4, w=8))
    text = to_text(advance(wide, moves := heuristic(wide, CPU)))
    assert len([line for line in text.split("\n\n")[-1].splitlines() if not line.startswith("|")]) == 1
    _check(wide, moves)
    narrow = load(KERNELS["batchnorm2"].text(n=2, c=3, h=4, w=8))
    text = to_text(advance(narrow, heuristic(narrow, CPU)))
    assert len([line for line in text.split("\n\n")[-1].splitlines() if not line.startswith("|")]) == 2


BLOCKED_CONV = """kernel conv(x, wb) -> y

x f32 [1, 4, 9, 9, 32] heap
wb f32 [1, 2, 128, 3, 3, 32] heap
y f32 [1, 2, 7, 7, 32] heap

2 7 7 32 y[0,{0},{1},{2},{3}] = 0
2 7 7 32 4 32 3 3 y[0,{0},{1},{2},{3}] += x[0,{4},{1}+{6},{2}+{7},{5}] * wb[0,{0},{4}*32+{5},{6},{7},{3}]
"""


def test_heuristic_leads_a_reduction_split_into_blocks_with_its_outer_part() -> None:
    """A convolution over input channels in blocks of 32 (4 blocks) reduces over the blocks, then
    the 32 channels of one, then the taps, as the weights lie in memory: with the longer scope of
    32 first, every step would read weights a block apart. The blocks are cut in two, those of two
    outside the output rows (`register_tile.streamed_block`)."""
    spec = load(BLOCKED_CONV)
    moves = heuristic(spec, get_target("x86-avx512"))
    program = advance(spec, moves)
    (product,) = [chain for op, chain in walk_ops(program.body) if any(a.array == "x" for a in accesses(op.value))]
    reductions = [scope.size for scope in product if not scope.kind][-4:]
    assert reductions == [2, 32, 3, 3]
    _check(spec, moves)


POINTWISE_14X14 = """kernel conv(x, wb) -> y

x f32 [1, 18, 14, 14, 32] heap
wb f32 [1, 3, 576, 1, 1, 32] heap
y f32 [1, 3, 14, 14, 32] heap

3 14 14 32 y[0,{0},{1},{2},{3}] = 0
3 14 14 32 18 32 y[0,{0},{1},{2},{3}] += x[0,{4},{1},{2},{5}] * wb[0,{0},{4}*32+{5},0,0,{3}]
"""


@pytest.mark.parametrize("private, blocks_outside", [(2 << 20, False), (256 << 10, True)])
def test_heuristic_keeps_a_reduction_inside_rows_that_hold_its_weights(private: int, blocks_outside: bool) -> None:
    """Inception v2's pointwise convolution 576->96 at 14x14 on 2 cores: its 221 KB of weights fit in
    half of a 2 MB private cache, so its 14 rows read them from there after the first, keep the 18
    blocks of input channels whole inside them and run on the cores; blocks of the reduction
    outside the rows would leave the 3 blocks of output channels to the cores, one idle a third of
    the time. With 256 KB a core, the blocks go outside the rows (`register_tile.streamed_block`)."""
    target = replace(get_target("x86-avx512"), cores=2,
                     caches=Caches(l1d=48 << 10, l2=private, l3=32 << 20, private=private))
    spec = load(POINTWISE_14X14)
    program = advance(spec, moves := heuristic(spec, target))
    (product,) = [chain for op, chain in walk_ops(program.body) if any(a.array == "x" for a in accesses(op.value))]
    assert (18 not in [scope.size for scope in product]) == blocks_outside
    if not blocks_outside:
        assert [scope.size for scope in product if scope.kind == "p"] == [14]
    _check(spec, moves)


@pytest.mark.parametrize("outer, inner, parallel", [(3, 28, 1), (7, 7, 0), (4, 28, 0)])
def test_heuristic_parallelises_a_scope_that_balances_over_the_cores(outer: int, inner: int, parallel: int) -> None:
    """On 2 cores: 3 blocks would leave a core idle a third of the time, so the 28 rows inside them
    run on the cores; 7 rows inside 7 blocks would start the threads 49 times, and 4 blocks
    balance already."""
    spec = load(f"kernel scale(x) -> y\n\nx f32 [{outer}, {inner}, 64] heap\ny f32 [{outer}, {inner}, 64] heap\n\n"
                f"{outer} {inner} 64 y[{{0}},{{1}},{{2}}] = x[{{0}},{{1}},{{2}}] * 2\n")
    program = advance(spec, moves := heuristic(spec, replace(CPU, cores=2)))
    ((_, chain),) = list(walk_ops(program.body))
    assert [d for d, scope in enumerate(chain) if scope.kind == "p"] == [parallel]
    _check(spec, moves)
