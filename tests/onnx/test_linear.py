"""MatMul, Gemm, Einsum, Conv and ConvTranspose agree with ONNX Runtime at odd and round shapes and
across their attributes; the cases the format cannot write are refused with the feature they need."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from dojo_ir import interpret, load
from libgen.onnx import winograd
from libgen.onnx.catalogue import kernel_for
from libgen.onnx.importer import import_model
from libgen.onnx.nodes import Node, Unsupported, Value
from libgen.onnx.ops.linear import Window
from tests.onnx.single_node import OPSET, check_node, node_of, normal, run_ort, single_node_model
from tests.onnx.test_importer import assert_calls_match_ort, model, tensor


@pytest.mark.parametrize("a, b", [
    ((5, 7), (7, 3)),
    ((4, 8), (8, 16)),
    ((2, 5, 7), (7, 3)),
    ((2, 1, 5, 7), (3, 7, 4)),  # batch dimensions broadcast both ways
    ((7,), (2, 7, 3)),  # a 1-D A is a row whose dimension the result drops
    ((5, 7), (7,)),  # a 1-D B is a column
    ((7,), (7,)),  # a dot product: a scalar
    ((5, 1), (1, 3)),  # an outer product: no reduction loop
])
def test_matmul(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    check_node("MatMul", {"a": normal(*a), "b": normal(*b, seed=1)})


def test_matmul_of_integers() -> None:
    integers = np.random.default_rng(0).integers
    a, b = integers(-9, 10, (2, 3, 5), dtype=np.int32), integers(-9, 10, (5, 7), dtype=np.int32)
    assert "y[{0},{1},{2}] += a[{0},{1},{3}] * b[{3},{2}]" in check_node("MatMul", {"a": a, "b": b})


@pytest.mark.parametrize("attributes, c", [
    ({}, None),
    ({}, (5, 3)),
    ({"transA": 1}, (3,)),  # C broadcast along the rows
    ({"transB": 1, "alpha": 0.5}, (5, 1)),  # C broadcast along the columns
    ({"transA": 1, "transB": 1, "alpha": 0.25, "beta": -2.0}, ()),  # a scalar C
    ({"beta": 0.0}, (5, 3)),  # beta 0 leaves C out
])
def test_gemm(attributes: dict, c: tuple[int, ...] | None) -> None:
    m, k, n = 5, 7, 3
    a = normal(k, m) if attributes.get("transA") else normal(m, k)
    b = normal(n, k, seed=1) if attributes.get("transB") else normal(k, n, seed=1)
    text = check_node("Gemm", {"a": a, "b": b, "c": None if c is None else normal(*c, seed=2)}, attributes)
    assert (" c[" in text) == (c is not None and attributes.get("beta") != 0.0)


def test_gemm_at_round_shapes_accumulates_onto_c() -> None:
    """Two lines, as a hand-written product with a bias: C's line, then the product's, whose tile
    the tuner can keep in registers; no line after it."""
    text = check_node("Gemm", {"a": normal(16, 8), "b": normal(8, 4, seed=1), "c": normal(16, 4, seed=2)},
                      {"beta": 0.5})
    assert text.splitlines()[-2:] == ["16 4 y[{0},{1}] = 0.5 * c[{0},{1}]",
                                      "16 4 8 y[{0},{1}] += a[{0},{2}] * b[{2},{1}]"]


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(5, 7), (7, 3)]),
    ("bij,bjk->bik", [(2, 4, 8), (2, 8, 4)]),
    ("ij->ji", [(3, 5)]),  # no summed letter: one `=` line
    ("ii->i", [(4, 4)]),  # a repeated letter reads the diagonal
    ("ii", [(5, 5)]),  # implicit output: the trace
    ("ij,kj", [(3, 5), (7, 5)]),  # implicit output: the letters seen once, sorted
    ("i,i->", [(7,), (7,)]),
    ("...ij,...jk->...ik", [(2, 3, 5), (2, 5, 4)]),
    ("...ij,jk->...ik", [(2, 1, 3, 5), (5, 4)]),
    ("b...,b...->b...", [(3, 1, 5), (3, 2, 5)]),  # ellipsis dimensions broadcast
    ("Ab, bc, cd -> Ad", [(3, 5), (5, 7), (7, 2)]),
])
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    check_node("Einsum", {f"x{i}": normal(*shape, seed=i) for i, shape in enumerate(shapes)}, {"equation": equation})


def test_einsum_writes_one_accumulation_line() -> None:
    text = check_node("Einsum", {"x0": normal(5, 7), "x1": normal(7, 3, seed=1)}, {"equation": "ij,jk->ik"})
    assert "5 3 7 y[{0},{1}] += x0[{0},{2}] * x1[{2},{1}]" in text


CONV = [
    # x, w, attributes
    ((1, 3, 7, 9), (4, 3, 3, 2), {}),
    ((2, 4, 8, 8), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 7, 9), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),  # asymmetric pads
    ((1, 3, 7, 9), (4, 3, 3, 2), {"strides": [2, 2], "dilations": [2, 1]}),
    ((1, 4, 7, 9), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 5, 7, 9), (5, 1, 3, 3), {"group": 5, "strides": [2, 2]}),  # depthwise
    ((1, 3, 7, 9), (4, 3, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 7, 9), (4, 3, 3, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 7, 9), (4, 3, 3, 2), {"auto_pad": "VALID", "strides": [1, 3]}),
    ((1, 3, 7, 9), (4, 3, 3, 2), {"kernel_shape": [3, 2], "pads": [0, 1, 0, 1]}),
    ((2, 3, 13), (5, 3, 3), {"strides": [2], "dilations": [2], "pads": [2, 1]}),  # 1-D
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 2]}),  # 3-D
    ((1, 3, 7, 9), (4, 3, 1, 1), {}),  # a 1x1 convolution has no tap loops
]


@pytest.mark.parametrize("x, w, attributes", CONV)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x: tuple[int, ...], w: tuple[int, ...], attributes: dict, bias: bool) -> None:
    inputs = {"x": normal(*x), "w": normal(*w, seed=1), "b": normal(w[0], seed=2) if bias else None}
    check_node("Conv", inputs, attributes, constants=("w", "b") if bias else ("w",))


def test_conv_reads_its_input_directly_without_pads() -> None:
    text = check_node("Conv", {"x": normal(1, 3, 7, 9), "w": normal(4, 3, 3, 2, seed=1)})
    assert "padded" not in text
    assert "4 5 8 3 3 2 y[0,{0},{1},{2}] += x[0,{3},{1}+{4},{2}+{5}] * w[{0},{3},{4},{5}]" in text


WINOGRAD = [
    # x, w, attributes: 3-row convolutions of constant weights and long enough reductions, which the
    # import computes by Winograd's F(4, 3) along the rows
    ((2, 128, 14, 14), (32, 128, 3, 3), {"pads": [1, 1, 1, 1]}),  # short rows, but input channels enough
    ((1, 6, 9, 11), (6, 6, 3, 3), {"pads": [1, 0, 2, 1]}),  # 10 rows: a last tile of 2, asymmetric pads
    ((1, 8, 11, 13), (6, 8, 3, 3), {"strides": [1, 2], "dilations": [1, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 9), (4, 4, 3, 5), {"pads": [0, 2, 0, 2]}),  # 5 column taps, no row padding
    ((1, 8, 9, 6), (8, 8, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ((3, 6, 8, 7), (6, 6, 3, 3), {}),  # no padding at all: the input is its own tiles
    ((1, 8, 5, 6), (8, 8, 3, 3), {}),  # 3 rows: one tile, its fourth row not written
]


@pytest.mark.parametrize("x, w, attributes", WINOGRAD)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_by_winograd(x: tuple[int, ...], w: tuple[int, ...], attributes: dict, bias: bool) -> None:
    inputs = {"x": normal(*x), "w": normal(*w, seed=1), "b": normal(w[0], seed=2) if bias else None}
    # Winograd's roundings of the transformed values: a few times the direct sum's (sums of 16-72
    # products of N(0, 1) reach 30)
    text = check_node("Conv", inputs, attributes, constants=("w", "b") if bias else ("w",), atol=2e-4)
    assert "+= u[" in text and "w[" not in text


@pytest.mark.parametrize("x, w, attributes", WINOGRAD[1:3])
def test_conv_by_winograd_in_f64_is_the_direct_sum(x: tuple[int, ...], w: tuple[int, ...], attributes: dict) -> None:
    """ONNX Runtime has no f64 Conv: the Winograd kernel against the direct one, both interpreted."""
    inputs = {"x": normal(*x, dtype=np.float64), "w": normal(*w, seed=1, dtype=np.float64)}
    single = {name: value.astype(np.float32) for name, value in inputs.items()}
    (shaped,) = run_ort(single_node_model("Conv", single, attributes, ("w",), 1, OPSET), single, ("w",))
    results = []
    for constants in (("w",), ()):
        kernel = kernel_for(node_of("Conv", inputs, attributes, constants, [shaped.astype(np.float64)]))
        given = {**inputs, **{name: derived.value for name, derived in kernel.derived.items()}}
        results.append(interpret(load(kernel.render()), {a.name: given[kernel.sources[a.name]] for a in kernel.inputs}))
    winograd, direct = results
    np.testing.assert_allclose(winograd["y"], direct["y"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("x, w, attributes, constants", [
    ((1, 4, 8, 8), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, ("w",)),  # 4 channels x 3 taps: too short a reduction
    ((1, 8, 8, 8), (2, 8, 3, 3), {"pads": [1, 1, 1, 1]}, ("w",)),  # 2 output channels: the transforms dominate
    ((1, 8, 8, 8), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}, ()),  # weights known only when the model runs
    ((1, 8, 8, 8), (8, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}, ("w",)),
    ((1, 8, 9, 8), (8, 8, 3, 3), {"strides": [2, 1]}, ("w",)),
    ((1, 8, 9, 8), (8, 8, 3, 3), {"dilations": [2, 1]}, ("w",)),
    ((1, 8, 7, 8), (8, 8, 3, 3), {}, ("w",)),  # 5 rows: two tiles of 4 would waste 3
    ((1, 8, 8, 8), (8, 8, 5, 3), {}, ("w",)),  # 5 rows of taps
    ((1, 8, 8, 8, 8), (8, 8, 3, 3, 3), {}, ("w",)),  # 3-D
])
def test_conv_stays_direct_where_winograd_does_not_pay_or_apply(x, w, attributes, constants) -> None:
    text = check_node("Conv", {"x": normal(*x), "w": normal(*w, seed=1)}, attributes, constants=constants)
    assert "u[" not in text and "+= x" in text


@pytest.mark.parametrize("channels_in, form", [(32, "* wb["), (64, "* wb["), (128, "+= u[")])
def test_short_rows_take_channels_as_lanes_unless_the_reduction_repays_winograd(channels_in: int, form: str) -> None:
    """SqueezeNet's 3x3 expands (32-64 input channels, rows of 27 and 13) run faster with channels
    as lanes; ResNet-50's (128 and more) by Winograd."""
    x, w = normal(1, channels_in, 13, 13), normal(32, channels_in, 3, 3, seed=1) / np.float32(3 * channels_in ** 0.5)
    text = check_node("Conv", {"x": x, "w": w}, {"pads": [1, 1, 1, 1]}, constants=("w",))
    assert form in text


def test_a_winograd_convolutions_relu_is_applied_as_its_rows_are_written() -> None:
    """`--fuse`: Conv (rows of 34, by Winograd) then Relu is one kernel, the Relu in each of the four
    lines that write the output's rows, and no line after them reads the output back."""
    weights = numpy_helper.from_array(normal(8, 16, 3, 3, seed=1) / np.float32(12), "w")  # too few for lanes
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    proto = model(nodes, [tensor("x", [1, 16, 34, 34])], [tensor("y", [1, 8, 34, 34])], [weights])
    imported = import_model(proto, fuse=True)
    (text,) = imported.kernels.values()
    written = [line for line in text.splitlines() if " y[" in line]
    assert "+= u[" in text and len(written) == 4 and all(" = max(" in line for line in written)
    assert_calls_match_ort(imported, proto, {"x": normal(1, 16, 34, 34)})


@pytest.mark.parametrize("channels, row, taken", [(512, 7, False), (512, 14, False), (128, 28, True), (64, 7, True)])
def test_winograd_uses_each_transformed_weight_often_unless_they_stay_in_cache(channels: int, row: int,
                                                                                taken: bool) -> None:
    """ResNet-50's 512-channel 3x3 at 7x7 would read 18.9 MB of transformed weights a call and use each
    14 times; at 14x14, 56 times; its 128-channel one at 28x28, 196 times. 64 channels' fit a private
    cache, however small the image."""
    w = Value("w", "f32", (channels, channels, 3, 3), np.zeros((channels, channels, 3, 3), np.float32))
    x = Value("x", "f32", (1, channels, row, row))
    assert winograd.fits(x, w, Window((row, row), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (row, row)), 1) is taken


@pytest.mark.parametrize("channels_in, channels_out, row, taken", [
    (64, 64, 27, False), (128, 128, 27, True),  # SqueezeNet's 3x3 expands at 27x27 against ResNet-50's at 28x28
    (64, 192, 56, True), (64, 64, 56, False), (16, 64, 55, False),  # Inception's, ResNet-50's, SqueezeNet's
])
def test_winograd_gives_way_to_channels_as_lanes_at_few_channels_and_short_rows(channels_in: int, channels_out: int,
                                                                                row: int, taken: bool) -> None:
    """Channels as lanes at rows of 27 below 128 input channels; at rows of 55 and 56 by Winograd only
    where enough channels in and out repay the transforms (Inception v1's 64 -> 192), since its rows
    cost the convolutions around it their blocks of channels."""
    shape = (channels_out, channels_in, 3, 3)
    w = Value("w", "f32", shape, np.zeros(shape, np.float32))
    x = Value("x", "f32", (1, channels_in, row, row))
    window = Window((row, row), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (row, row))
    assert winograd.fits(x, w, window, 1, lanes=True) is taken


def test_winograd_f43_is_a_correlation_exactly() -> None:
    from fractions import Fraction

    from libgen.onnx.winograd import AT, BT, G
    rng = np.random.default_rng(0)
    for _ in range(20):
        d, g = [Fraction(int(v)) for v in rng.integers(-9, 10, 6)], [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        products = [sum(G[a][r] * g[r] for r in range(3)) * sum(BT[a][i] * d[i] for i in range(6)) for a in range(6)]
        assert [sum(AT[i][a] * products[a] for a in range(6)) for i in range(4)] == \
            [sum(d[i + r] * g[r] for r in range(3)) for i in range(4)]


COL2IM = [
    # channels, image_shape, block_shape, attributes
    (1, [4, 4], [2, 2], {}),
    (2, [5, 6], [2, 3], {"strides": [1, 2], "pads": [0, 1, 1, 0]}),  # asymmetric pads
    (2, [5, 7], [3, 3], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    (2, [5, 6], [2, 2], {"dilations": [2, 2], "strides": [2, 2]}),
    (3, [7], [3], {}),  # 1-D
    (1, [3, 4, 5], [2, 2, 2], {"pads": [0, 0, 0, 1, 0, 1]}),  # 3-D
]


@pytest.mark.parametrize("channels, image, block, attributes", COL2IM)
def test_col2im(channels: int, image: list[int], block: list[int], attributes: dict) -> None:
    rank = len(image)
    strides, dilations = attributes.get("strides", [1] * rank), attributes.get("dilations", [1] * rank)
    pads = attributes.get("pads", [0] * 2 * rank)
    blocks = [(n + pads[d] + pads[d + rank] - (k - 1) * dilations[d] - 1) // strides[d] + 1
              for d, (n, k) in enumerate(zip(image, block, strict=True))]
    x = normal(2, channels * int(np.prod(block)), int(np.prod(blocks)))
    check_node("Col2Im", {"x": x, "image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)},
               attributes, constants=("image_shape", "block_shape"), opset=18)


def test_col2im_of_columns_that_are_not_the_images_blocks_is_invalid() -> None:
    shapes = (Value("x", "f32", (1, 4, 8)), Value("image", "i64", (2,), np.array([4, 4])),
              Value("block", "i64", (2,), np.array([2, 2])))
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("c", "Col2Im", shapes, (Value("y", "f32", (1, 1, 4, 4)),), {}, 18))
    assert caught.value.feature == "invalid"


CONV_TRANSPOSE = [
    ((1, 3, 5, 6), (3, 4, 3, 2), {}),
    ((2, 4, 4, 4), (4, 8, 3, 3), {"strides": [2, 2]}),
    ((1, 3, 5, 6), (3, 2, 3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1]}),
    ((1, 3, 5, 6), (3, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 0]}),
    ((1, 3, 5, 6), (3, 2, 3, 2), {"strides": [2, 1], "dilations": [2, 2], "pads": [2, 1, 1, 0]}),
    ((1, 4, 5, 6), (4, 3, 3, 2), {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 1], "output_padding": [1, 1]}),
    ((1, 3, 5, 6), (3, 1, 3, 3), {"group": 3}),  # depthwise
    ((1, 2, 5, 6), (2, 3, 3, 2), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6), (2, 3, 3, 2), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 5, 6), (2, 3, 3, 2), {"strides": [2, 2], "output_shape": [10, 12]}),
    ((2, 3, 7), (3, 2, 3), {"strides": [3], "pads": [1, 2]}),  # 1-D
    ((1, 2, 3, 4, 5), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),  # 3-D
]


@pytest.mark.parametrize("x, w, attributes", CONV_TRANSPOSE)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(x: tuple[int, ...], w: tuple[int, ...], attributes: dict, bias: bool) -> None:
    group = attributes.get("group", 1)
    inputs = {"x": normal(*x), "w": normal(*w, seed=1), "b": normal(w[1] * group, seed=2) if bias else None}
    check_node("ConvTranspose", inputs, attributes)


def node(op: str, inputs: list[tuple[int, ...]], output: tuple[int, ...], attributes: dict, dtype: str = "f32",
         outputs: int = 1) -> Node:
    """A node built by hand, for the cases ONNX Runtime itself does not run."""
    values = tuple(Value(f"x{i}", dtype, shape) for i, shape in enumerate(inputs))
    return Node("n", op, values, tuple(Value(f"y{i}", dtype, output) for i in range(outputs)), attributes)


@pytest.mark.parametrize("refused, feature", [
    (node("Gemm", [(5, 7), (7, 3)], (5, 3), {"alpha": 0.5}, dtype="i32"), "dtype"),
    (node("Conv", [(1, 3, 7, 9), (4, 3, 3, 3)], (1, 4, 7, 9), {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}),
     "dynamic shape"),
    (node("Conv", [(1, 3, 7, 9), (4, 3, 3, 3)], (1, 4, 7, 9), {}), "dynamic shape"),  # shapes that disagree
    (node("Einsum", [(3, 5), (5, 7)], (3, 7), {"equation": "ij,jkl->ik"}), "dynamic shape"),  # a rank that disagrees
    (node("ConvTranspose", [(1, 3, 5, 5), (3, 2, 3, 3)], (1, 2, 13, 13), {"output_shape": [13, 13]}),
     "dynamic shape"),  # larger than the full result: not a crop of it
])
def test_refused(refused: Node, feature: str) -> None:
    with pytest.raises(Unsupported) as error:
        kernel_for(refused)
    assert error.value.feature == feature
