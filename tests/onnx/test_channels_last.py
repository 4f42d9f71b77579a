"""Convolutions whose vector lanes are the output channels (libgen/onnx/channels_last.py): they agree
with ONNX Runtime across strides, pads, groups, ranks and channel counts that the blocks do and do
not divide, and the heuristic pass tiles them as positions by vectors of channels, each block of the
weights read once from memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from agent.passes import heuristic
from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import advance
from libgen.onnx.channels_last import block, blocked_weights, fits
from libgen.onnx.importer import import_model
from libgen.onnx.nodes import Value
from libgen.onnx.ops.linear import Window
from runner.local import LocalRunner
from tests.onnx.single_node import check_node, normal
from tests.onnx.test_importer import assert_calls_match_ort, model, tensor

CASES = [
    # x, w, attributes
    ((1, 8, 9, 9), (32, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # a stage's stride-2 3x3
    ((1, 24, 7, 7), (48, 24, 1, 1), {}),  # pointwise at 7x7: blocks of 16
    ((1, 16, 9, 9), (32, 16, 1, 1), {"strides": [2, 2]}),  # ResNet's stride-2 projection
    ((1, 3, 17, 17), (16, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # the 7x7 stem
    ((2, 8, 6, 7), (40, 8, 3, 2), {"pads": [1, 0, 2, 1], "dilations": [2, 1]}),  # 40: blocks of 8
    ((1, 8, 5, 5), (68, 4, 1, 1), {"group": 2}),  # ShuffleNet's grouped 1x1: 34 a group, one block of 34
    ((1, 8, 6, 6), (17, 8, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),  # 17: no block divides
    ((1, 8, 5, 5), (72, 8, 1, 1), {}),  # 72: 5 blocks of 16, the last half zeros
    ((1, 8, 4, 4), (200, 8, 1, 1), {}),  # 200: 7 blocks of 32, the last 24 zeros (SqueezeNet's 1000 classes)
    ((1, 6, 6, 6), (62, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),  # 31 a group: 2 blocks of 16, one zero
    ((1, 6, 11), (20, 6, 3), {"strides": [2], "pads": [1, 2]}),  # 1-D
    ((1, 4, 4, 5, 6), (16, 4, 2, 3, 3), {"pads": [0, 1, 1, 1, 0, 1], "strides": [1, 2, 2]}),  # 3-D
]


@pytest.mark.parametrize("x, w, attributes", CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_with_channels_as_lanes_agrees_with_onnx_runtime(x, w, attributes, bias: bool) -> None:
    inputs = {"x": normal(*x), "w": normal(*w, seed=1), "b": normal(w[0], seed=2) if bias else None}
    text = check_node("Conv", inputs, attributes, constants=("w", "b") if bias else ("w",))
    assert "+= x" in text and "* wb[" in text and "t[" in text


def _window(row: int, taps: int = 3) -> Window:
    """A `taps` x `taps` window, stride 1, padded to keep a square image of `row` positions a row."""
    pad = taps // 2
    return Window((row, row), (taps, taps), (1, 1), (1, 1), (pad, pad), (pad, pad), (row, row))


@pytest.mark.parametrize("w, group, constant, row, taken", [
    ((16, 8, 3, 3), 1, True, 7, True),
    ((64, 64, 3, 3), 1, True, 28, True),
    ((64, 64, 3, 3), 1, True, 56, True),  # blocked between two such convolutions in a model
    ((64, 64, 3, 3), 1, True, 64, False),  # four vectors of AVX-512 a row: the direct form's are full
    ((64, 3, 3, 3), 1, True, 111, True),  # SqueezeNet's 3x3 stem of an image's 3 channels
    ((96, 3, 3, 3), 1, True, 224, True),
    ((15, 8, 3, 3), 1, True, 7, False),  # under a vector of AVX-512's lanes
    ((64, 1, 3, 3), 64, True, 7, False),  # depthwise: one channel a group
    ((16, 8, 3, 3), 1, False, 7, False),  # weights known only when the model runs: not blocked at import
    ((136, 34, 1, 1), 4, True, 14, True),  # 34 a group, no block divides: a tail, fine at short rows
    ((136, 34, 1, 1), 4, True, 28, False),
    ((1000, 512, 1, 1), 1, True, 13, True),  # blocks of 16 padded: no tail
    ((62, 8, 1, 1), 2, True, 28, True),
])
def test_fits_constant_weights_with_a_vector_of_channels_a_group_and_short_rows(w, group: int, constant: bool,
                                                                                row: int, taken: bool) -> None:
    weights = normal(*w) if constant else None
    assert fits(Value("w", "f32", w, weights), group, _window(row)) is taken


def test_a_7x7_stem_stays_direct_at_long_rows_only_where_an_lrn_reads_it_in_rows() -> None:
    w = Value("w", "f32", (64, 3, 7, 7), normal(64, 3, 7, 7))
    assert fits(w, 1, _window(112, 7)) and not fits(w, 1, _window(112, 7), rows_read=True)
    assert fits(w, 1, _window(28, 7), rows_read=True)


def test_blocked_weights_put_each_block_of_output_channels_innermost() -> None:
    w = normal(2 * 48, 5, 3, 1)
    blocked = blocked_weights(w, group=2)
    assert blocked.shape == (2, 3, 5, 3, 1, 16)  # 48 a group: 3 blocks of 16
    g, j, c, k, lane = 1, 2, 4, 1, 7
    assert blocked[g, j, c, k, 0, lane] == w[g * 48 + j * 16 + lane, c, k, 0]
    assert blocked.flags.c_contiguous


@pytest.mark.parametrize("channels, size", [(1000, 32), (72, 16), (31, 16), (40, 8), (24, 8), (34, 34), (64, 32)])
def test_blocks_fill_vectors_with_a_few_zero_channels_rather_than_halve_them(channels: int, size: int) -> None:
    assert block(channels) == size


def test_blocked_weights_fill_the_last_block_with_zero_channels() -> None:
    w = normal(2 * 31, 3, 1, 1)
    blocked = blocked_weights(w, group=2)
    assert blocked.shape == (2, 2, 3, 1, 1, 16)
    assert blocked[1, 1, 2, 0, 0, 14] == w[31 + 16 + 14, 2, 0, 0]
    assert not blocked[:, 1, :, :, :, 15].any()


@st.composite
def convs(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], dict]:
    """A 2-D Conv with at least a vector of output channels a group, any kernel, stride, dilation
    and pads that fit the image."""
    group = draw(st.integers(1, 3))
    per_in, per_out = draw(st.integers(1, 5)), draw(st.integers(16, 80))
    taps = [draw(st.integers(1, 4)) for _ in range(2)]
    strides, dilations = [draw(st.integers(1, 3)) for _ in range(2)], [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    image = [draw(st.integers(max(1, (k - 1) * d + 1 - pads[i] - pads[i + 2]), 9))
             for i, (k, d) in enumerate(zip(taps, dilations, strict=True))]
    attributes = {"pads": pads, "strides": strides, "dilations": dilations, "group": group}
    return (draw(st.integers(1, 2)), group * per_in, *image), (group * per_out, per_in, *taps), attributes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(convs(), st.integers(0, 99))
def test_any_conv_with_channels_as_lanes_agrees_with_onnx_runtime(conv, seed: int) -> None:
    x, w, attributes = conv
    inputs = {"x": normal(*x, seed=seed), "w": normal(*w, seed=seed + 1), "b": normal(w[0], seed=seed + 2)}
    check_node("Conv", inputs, attributes, constants=("w", "b"))


def _kernel(x: tuple[int, ...], w: tuple[int, ...], attributes: dict) -> str:
    weights = normal(*w, seed=1) / np.float32(np.sqrt(np.prod(w[1:])))  # outputs of about 1
    return check_node("Conv", {"x": normal(*x), "w": weights}, attributes, constants=("w",))


def test_heuristic_reads_each_block_of_weights_once_over_the_output_rows() -> None:
    """ResNet's last stride-2 3x3 at a quarter of its channels: the tile is 7 positions by vectors of
    channels, and the blocks of channels enclose the output rows, so that a block's weights stay in
    cache while every row uses them (with the rows outside, each row streams all the weights)."""
    spec = load(_kernel((1, 128, 14, 14), (128, 128, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}))
    program = advance(spec, heuristic(spec, get_target("x86-avx512")))
    product = next(s for s in Analysis(program).sites if s.op.reduction and s.op.target.array.startswith("t_acc"))
    sizes = [scope.size for scope in product.chain]
    assert sizes[0] == 128 // 32 and product.chain[0].kind == "p"  # the blocks, shared by the cores
    assert sizes[1] == 7  # the output rows, inside
    assert product.chain[-1].kind == "v" and sizes[-1] == 16  # a vector of channels


def test_heuristic_reads_each_row_of_a_larger_input_once_over_the_blocks_of_channels() -> None:
    """ResNet's 1x1 256->64 at 28x28 (at 56x56 in the model): the input is larger than the
    weights, so the rows enclose the blocks of channels and each core reads its rows of the input
    once, the weights (16 KiB here, 64 KiB in the model) again from its cache for each row. With the
    blocks outside, the input (3 MiB at 56x56, more than a core's cache) streamed once a block."""
    spec = load(_kernel((1, 256, 28, 28), (64, 256, 1, 1), {}))
    program = advance(spec, heuristic(spec, get_target("x86-avx512")))
    product = next(s for s in Analysis(program).sites if s.op.reduction and s.op.target.array.startswith("t_acc"))
    assert [(scope.size, scope.kind) for scope in product.chain[:2]] == [(28, "p"), (64 // 32, "")]


def test_a_row_of_the_output_over_many_channels_keeps_the_blocks_outside() -> None:
    """A 1x1 to 256 channels at rows of 56: the input is larger than the weights, but a row over
    all the channels (57 KiB) would not stay in the first-level cache, so the blocks enclose the rows."""
    spec = load(_kernel((1, 64, 56, 56), (256, 64, 1, 1), {}))
    assert spec.body[0].size == 256 // 32


@pytest.mark.parametrize("target", ["x86-avx512", "x86-avx2"])
def test_heuristic_copies_each_row_of_an_nchw_input_into_a_contiguous_temporary(target: str) -> None:
    """A 1x1 like Inception's 320->128 at 28x28 reads its NCHW input one channel plane apart at
    every step of the tile: each core first copies the row that its tiles and both blocks of
    channels read, every channel, onto its stack, with vectors, and the product reads the copy. The
    result is what the spec computes."""
    spec = load(_kernel((1, 40, 14, 14), (64, 40, 1, 1), {}))
    program = advance(spec, heuristic(spec, get_target(target)))
    staged = program.buffer_of["x_s"]
    # every channel of the row's 14 positions, padded to whole vectors
    assert staged.location == "stack" and [d.size for d in staged.dims if d.stored is None] == [40, 16]
    sites = Analysis(program).sites
    copy = next(s for s in sites if s.op.target.array == "x_s")
    product = next(s for s in sites if s.op.reduction)
    assert copy.chain[0].kind == "p" and copy.chain[-1].kind == "v"
    assert [r.array for r in product.op.reads][0] == "x_s"
    if get_target(target).runnable():
        result = LocalRunner().run(program, target=target, repeats=1, spec=spec)
        assert result.error is None and result.verified, result.error


@pytest.mark.parametrize("target", ["native", "x86-avx2"])
def test_heuristic_schedules_compute_what_the_spec_does(target: str) -> None:
    """Compiled and run against the reference interpreter: a grouped 1x1 of 34 channels a group (two
    vectors and a tail) and a strided 3x3."""
    runner = LocalRunner()
    for x, w, attributes in (CASES[0], CASES[5]):
        spec = load(_kernel(x, w, attributes))
        result = runner.run(advance(spec, heuristic(spec, get_target(target))), target=target, repeats=1, spec=spec)
        assert result.error is None and result.verified, (w, result.error)


def test_heuristic_keeps_the_start_of_the_blocked_temporary_vectorised_and_the_padding_on_the_cores() -> None:
    """32 input and 32 output channels: the padding's nest and the start of the blocked
    temporary (channels innermost) once had a scope of 32 in common; fusion brought the bias's
    channels outermost to join them, which left every store of the bias scalar, a cache line apart,
    and the padding's threads started 32 times over (half the kernel's time at 27x27)."""
    spec = load(_kernel((1, 32, 13, 13), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}))
    program = advance(spec, heuristic(spec, get_target("x86-avx512")))
    sites = Analysis(program).sites
    start = next(s for s in sites if s.op.target.array == "t" and not s.op.reads)  # t = 0
    assert start.chain[-1].kind == "v"
    for padding in (s for s in sites if s.op.target.array == "x_padded"):
        assert padding.chain[0].kind == "p"


def test_heuristic_vectorizes_the_pass_back_along_rows_the_lanes_do_not_divide() -> None:
    """The write back to y's layout, alone to write y, along rows of 28 for AVX2 (3 vectors of 8 and
    a tail of 4): the split that leaves the tail renames the operation (`y` becomes `y#1`), which
    the pass once lost track of and left the line scalar."""
    spec = load(_kernel((1, 16, 28, 28), (32, 16, 1, 1), {}))
    program = advance(spec, heuristic(spec, get_target("x86-avx2")))
    back = [s for s in Analysis(program).sites if s.op.target.array == "y"]
    assert [(s.chain[-1].size, s.chain[-1].kind) for s in back] == [(8, "v"), (4, "v")]


def test_fusing_a_bias_residual_and_relu_writes_them_into_the_pass_back() -> None:
    """A ResNet block's end: a stride-1 1x1 Conv with its bias, the Add of the shortcut and the Relu
    are one kernel; the sum starts in the pass back to y's layout (the product's accumulator is the
    blocked temporary), and the Relu reads it there."""
    rng = np.random.default_rng(7)
    weights = numpy_helper.from_array((rng.standard_normal((32, 16, 1, 1)) / 4).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Add", ["c", "shortcut"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    proto = model(nodes, [tensor("x", [1, 16, 7, 7]), tensor("shortcut", [1, 32, 7, 7])], [tensor("y", [1, 32, 7, 7])],
                  [weights, bias])
    imported = import_model(proto, fuse=True)
    assert [c.nodes for c in imported.calls] == [("conv", "add", "relu")]
    (text,) = imported.kernels.values()
    assert "* wb[" in text and text.count("+= ") == 1
    assert_calls_match_ort(imported, proto, {"x": normal(1, 16, 7, 7), "shortcut": normal(1, 32, 7, 7, seed=1)})


def test_weights_with_a_batchnorm_folded_in_are_blocked_from_the_models_constants() -> None:
    """Conv (stride 2, 32 channels) then BatchNormalization: the folded weights are what is blocked,
    one derived constant that names the model's constants it comes from."""
    rng = np.random.default_rng(8)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 8, 3, 3)) / 8).astype(np.float32), "w")]
    stats = {"scale": 1 + 0.2 * rng.standard_normal(32), "shift": 0.3 * rng.standard_normal(32),
             "mean": 0.3 * rng.standard_normal(32), "var": 0.5 + rng.random(32)}
    inits += [numpy_helper.from_array(value.astype(np.float32), name) for name, value in stats.items()]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c", *stats], ["y"], name="bn")]
    proto = model(nodes, [tensor("x", [1, 8, 9, 9])], [tensor("y", [1, 32, 5, 5])], inits)
    imported = import_model(proto)
    (call,) = imported.calls
    assert call.nodes == ("conv", "bn") and "* wb[" in imported.kernels[call.kernel]
    blocked = [d for name, d in imported.constants.items() if name.endswith(".channels_last")]
    assert len(blocked) == 1 and set(blocked[0].sources) == {"w", "scale", "shift", "mean", "var"}
    assert_calls_match_ort(imported, proto, {"x": normal(1, 8, 9, 9)})


@pytest.mark.parametrize("after, lanes", [("MaxPool", True), ("LRN", False)])
def test_a_7x7_stem_takes_channels_as_lanes_unless_an_lrn_reads_it(after: str, lanes: bool) -> None:
    """ResNet-50's stem (Conv, Relu, MaxPool: its output stays in blocks) against ZFNet-512's (Conv,
    Relu, LRN: the LRN reads rows, so the Conv writes them)."""
    window = {"kernel_shape": [3, 3], "strides": [2, 2]} if after == "MaxPool" else {"size": 3}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="stem", pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node(after, ["r"], ["y"], name="after", **window)]
    out = 31 if after == "MaxPool" else 64
    proto = model(nodes, [tensor("x", [1, 3, 128, 128])], [tensor("y", [1, 32, out, out])],
                  [numpy_helper.from_array(normal(32, 3, 7, 7, seed=1) / 12, "w")])
    imported = import_model(proto)
    stem = imported.kernels[next(c.kernel for c in imported.calls if c.nodes == ("stem",))]
    assert ("* wb[" in stem) is lanes and ("_phases[" in stem) is not lanes
    assert_calls_match_ort(imported, proto, {"x": normal(1, 3, 128, 128)})
