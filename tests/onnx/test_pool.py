"""MaxPool, AveragePool, LpPool, their Global forms and LRN agree with ONNX Runtime at odd and round
shapes and across their attributes; the cases the format cannot write are refused with the feature
they need."""

from __future__ import annotations

import pytest

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Node, Unsupported, Value
from tests.onnx.single_node import check_node, normal

WINDOWS = [
    # input, attributes
    ((1, 2, 7, 9), {"kernel_shape": [3, 2]}),
    ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 9), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 2]}),  # asymmetric pads
    ((1, 2, 7, 9), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [2, 1]}),
    ((1, 2, 8, 9), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),  # windows past the end
    ((1, 2, 8, 9), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 7, 9), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 7, 9), {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 9), {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [1, 3]}),
    ((2, 3, 13), {"kernel_shape": [3], "pads": [2, 1], "strides": [2]}),  # 1-D
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 2]}),  # 3-D
]


@pytest.mark.parametrize("x, attributes", WINDOWS)
def test_max_pool(x: tuple[int, ...], attributes: dict) -> None:
    check_node("MaxPool", {"x": normal(*x)}, attributes)


@pytest.mark.parametrize("x, attributes", WINDOWS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(x: tuple[int, ...], attributes: dict, count_include_pad: int) -> None:
    check_node("AveragePool", {"x": normal(*x)}, {**attributes, "count_include_pad": count_include_pad})


@pytest.mark.parametrize("x, attributes", WINDOWS)
@pytest.mark.parametrize("p", [1, 2])
def test_lp_pool(x: tuple[int, ...], attributes: dict, p: int) -> None:
    check_node("LpPool", {"x": normal(*x)}, {**attributes, "p": p})


@pytest.mark.parametrize("count_include_pad, ceil_mode, divisor", [
    (1, 0, "/ 6"),  # every window covers 3 x 2 elements
    (0, 0, "/ count["),  # border windows cover fewer input elements
    (1, 1, "/ count["),  # the last windows run past the padding, which they do not count
])
def test_average_pool_divisor(count_include_pad: int, ceil_mode: int, divisor: str) -> None:
    attributes = {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 2], "ceil_mode": ceil_mode,
                  "count_include_pad": count_include_pad}
    assert divisor in check_node("AveragePool", {"x": normal(1, 2, 8, 9)}, attributes)


def test_pool_without_pads_reads_its_input_directly_its_small_window_in_one_expression() -> None:
    text = check_node("MaxPool", {"x": normal(1, 2, 7, 9)}, {"kernel_shape": [3, 2]})
    assert "padded" not in text and "max=" not in text
    assert "2 5 8 y[0,{0},{1},{2}] = max(max(max(max(max(x[0,{0},{1},{2}], x[0,{0},{1},{2}+1]), " \
           "x[0,{0},{1}+1,{2}]), x[0,{0},{1}+1,{2}+1]), x[0,{0},{1}+2,{2}]), x[0,{0},{1}+2,{2}+1])" in text


def test_a_pools_window_of_more_than_nine_taps_is_a_reduction() -> None:
    text = check_node("AveragePool", {"x": normal(1, 2, 9, 9)}, {"kernel_shape": [5, 2], "strides": [2, 3]})
    assert "2 3 3 y[0,{0},{1},{2}] = 0" in text
    assert "2 3 3 5 2 y[0,{0},{1},{2}] += x[0,{0},{1}*2+{3},{2}*3+{4}]" in text


def test_max_pool_pads_with_minus_infinity() -> None:
    x = -10 - abs(normal(1, 2, 7, 9))  # a zero padding would win every border window
    text = check_node("MaxPool", {"x": x}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    border = [line for line in text.splitlines() if " x_padded[" in line.split(" = ")[0] and "= x[" not in line]
    assert len(border) == 4 and all(line.endswith("= -inf") for line in border)  # above, below, left, right


GLOBAL = [(1, 3, 7, 9), (2, 4, 8, 8), (2, 3, 13), (1, 2, 3, 5, 7)]


@pytest.mark.parametrize("x", GLOBAL)
@pytest.mark.parametrize("op, attributes", [
    ("GlobalAveragePool", {}),
    ("GlobalMaxPool", {}),
    ("GlobalLpPool", {"p": 1}),
    ("GlobalLpPool", {"p": 2}),
])
def test_global_pool(x: tuple[int, ...], op: str, attributes: dict) -> None:
    check_node(op, {"x": normal(*x)}, attributes)


@pytest.mark.parametrize("x", [(2, 7, 3, 5), (1, 8, 4, 4), (1, 3, 1, 13)])
@pytest.mark.parametrize("attributes", [
    {"size": 3},
    {"size": 5, "alpha": 0.01, "beta": 0.75, "bias": 2.0},
    {"size": 1, "alpha": 0.5, "beta": 0.5},
    {"size": 7, "alpha": 0.3, "beta": 1.0, "bias": 0.5},  # wider than some of the channels
])
def test_lrn(x: tuple[int, ...], attributes: dict) -> None:
    check_node("LRN", {"x": normal(*x)}, attributes)


def node(op: str, x: tuple[int, ...], y: tuple[int, ...], attributes: dict, outputs: int = 1) -> Node:
    """A node built by hand, for the cases ONNX Runtime itself does not run."""
    return Node("n", op, (Value("x", "f32", x),), tuple(Value(f"y{i}", "f32", y) for i in range(outputs)),
                attributes)


@pytest.mark.parametrize("refused, feature", [
    (node("MaxPool", (1, 2, 7, 9), (1, 2, 5, 8), {"kernel_shape": [3, 2]}, outputs=2), "control flow"),  # Indices
    (node("LpPool", (1, 2, 7, 9), (1, 2, 5, 8), {"kernel_shape": [3, 2], "p": 3}), "function"),
    (node("GlobalLpPool", (1, 2, 7, 9), (1, 2, 1, 1), {"p": 4}), "function"),
    (node("MaxPool", (1, 2, 8, 9), (1, 2, 4, 5), {"kernel_shape": [3, 2], "strides": [2, 2],
                                                  "dilations": [2, 1], "auto_pad": "SAME_UPPER"}), "dynamic shape"),
    (node("AveragePool", (1, 2, 7, 9), (1, 2, 7, 9), {"kernel_shape": [3, 2]}), "dynamic shape"),  # wrong shape
])
def test_refused(refused: Node, feature: str) -> None:
    with pytest.raises(Unsupported) as error:
        kernel_for(refused)
    assert error.value.feature == feature
