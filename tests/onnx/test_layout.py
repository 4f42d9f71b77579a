"""The data-movement operators match ONNX Runtime, at odd and round shapes and across their attributes;
what the format cannot write is reported with its feature.

    check_node("Transpose", {"x": normal(3, 5, 7)}, {"perm": [2, 0, 1]})
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Node, Unsupported, Value, affine
from libgen.onnx.ops.layout import pad_runs, refinement
from tests.onnx.single_node import check_node, normal


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def counting(*shape: int, dtype=np.float32) -> np.ndarray:
    """Distinct values, so that any misplaced element shows."""
    return np.arange(np.prod(shape)).reshape(shape).astype(dtype)


# (operator, inputs, attributes, constant inputs, opset)
CASES = [
    ("Transpose", {"x": normal(3, 5, 7)}, {}, (), 21),
    ("Transpose", {"x": normal(3, 5, 7)}, {"perm": [2, 0, 1]}, (), 21),
    ("Transpose", {"x": normal(2, 4, 8, 16)}, {"perm": [0, 2, 3, 1]}, (), 21),
    ("Transpose", {"x": normal(3, 1, 5)}, {"perm": [1, 2, 0]}, (), 21),
    ("Reshape", {"x": normal(6, 4), "shape": ints(2, 3, 4)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(2, 12), "shape": ints(2, 3, 4)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(3, 5, 7), "shape": ints(-1, 7)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(3, 5, 7), "shape": ints(0, -1)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(8, 16), "shape": ints(0, 4, 4)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(3, 1, 5), "shape": ints(15)}, {}, ("shape",), 21),
    ("Reshape", {"x": normal(2, 3, 4), "shape": ints(6, 1, 4)}, {"allowzero": 1}, ("shape",), 21),
    ("Flatten", {"x": normal(3, 5, 7)}, {}, (), 21),
    ("Flatten", {"x": normal(3, 5, 7)}, {"axis": 0}, (), 21),
    ("Flatten", {"x": normal(2, 4, 8)}, {"axis": -1}, (), 21),
    ("Flatten", {"x": normal(3, 5, 7)}, {"axis": 3}, (), 21),
    ("Squeeze", {"x": normal(3, 1, 5, 1)}, {}, (), 21),
    ("Squeeze", {"x": normal(3, 1, 5, 1), "axes": ints(-1)}, {}, ("axes",), 21),
    ("Squeeze", {"x": normal(1, 4, 1, 8)}, {"axes": [0, 2]}, (), 11),
    ("Unsqueeze", {"x": normal(3, 5), "axes": ints(0, -1)}, {}, ("axes",), 21),
    ("Unsqueeze", {"x": normal(4, 8)}, {"axes": [1]}, (), 11),
    ("Identity", {"x": normal(3, 5, 7)}, {}, (), 21),
    ("Identity", {"x": counting(4, 8, dtype=np.int64)}, {}, (), 21),
    ("Dropout", {"x": normal(3, 5, 7)}, {}, (), 21),
    ("Dropout", {"x": normal(4, 8), "ratio": np.array(0.5, np.float32)}, {}, ("ratio",), 21),
    ("Concat", {"a": normal(3, 5), "b": normal(3, 7, seed=1), "c": normal(3, 1, seed=2)}, {"axis": 1}, (), 21),
    ("Concat", {"a": normal(4, 8), "b": normal(4, 8, seed=1)}, {"axis": -2}, (), 21),
    ("Slice", {"x": normal(5, 7), "starts": ints(1, 0), "ends": ints(4, 7)}, {}, ("starts", "ends"), 21),
    ("Slice", {"x": normal(5, 7), "starts": ints(-1), "ends": ints(-1000), "axes": ints(-1), "steps": ints(-2)}, {},
     ("starts", "ends", "axes", "steps"), 21),
    ("Slice", {"x": normal(8, 16), "starts": ints(2, 100), "ends": ints(2**62, 0), "axes": ints(0, 1),
               "steps": ints(3, -5)}, {}, ("starts", "ends", "axes", "steps"), 21),
    ("Slice", {"x": normal(3, 5, 7), "starts": ints(-4), "ends": ints(-1), "axes": ints(2)}, {},
     ("starts", "ends", "axes"), 21),
    ("Slice", {"x": normal(5, 7)}, {"starts": [1], "ends": [-1], "axes": [1]}, (), 9),
    ("Tile", {"x": normal(3, 5), "repeats": ints(2, 3)}, {}, ("repeats",), 21),
    ("Tile", {"x": normal(4, 1, 8), "repeats": ints(1, 4, 1)}, {}, ("repeats",), 21),
    ("Expand", {"x": normal(3, 1), "shape": ints(2, 3, 5)}, {}, ("shape",), 21),
    ("Expand", {"x": normal(1, 8), "shape": ints(4, 1)}, {}, ("shape",), 21),
    ("Expand", {"x": normal(2, 1, 5), "shape": ints(3, 1)}, {}, ("shape",), 21),
    ("DepthToSpace", {"x": counting(2, 12, 3, 5)}, {"blocksize": 2}, (), 21),
    ("DepthToSpace", {"x": counting(2, 12, 3, 5)}, {"blocksize": 2, "mode": "CRD"}, (), 21),
    ("DepthToSpace", {"x": counting(1, 18, 4, 4)}, {"blocksize": 3, "mode": "CRD"}, (), 21),
    ("SpaceToDepth", {"x": counting(2, 3, 6, 10)}, {"blocksize": 2}, (), 21),
    ("SpaceToDepth", {"x": counting(1, 4, 9, 3)}, {"blocksize": 3}, (), 21),
    ("EyeLike", {"x": normal(3, 5)}, {}, (), 21),
    ("EyeLike", {"x": normal(5, 3)}, {"k": 1}, (), 21),
    ("EyeLike", {"x": normal(8, 4)}, {"k": -3, "dtype": 7}, (), 21),
    ("EyeLike", {"x": normal(3, 5)}, {"k": 9}, (), 21),
    ("Range", {"s": np.array(1.5, np.float32), "l": np.array(9.0, np.float32), "d": np.array(0.75, np.float32)},
     {}, ("s", "l", "d"), 21),
    ("Range", {"s": np.array(10, np.int64), "l": np.array(-3, np.int64), "d": np.array(-3, np.int64)},
     {}, ("s", "l", "d"), 21),
    ("Range", {"s": np.array(0, np.int32), "l": np.array(16, np.int32), "d": np.array(1, np.int32)},
     {}, ("s", "l", "d"), 21),
    ("CenterCropPad", {"x": normal(5, 7), "shape": ints(3, 10)}, {}, ("shape",), 21),
    ("CenterCropPad", {"x": normal(4, 8, 3), "shape": ints(7, 5)}, {"axes": [0, -2]}, ("shape",), 21),
]


@pytest.mark.parametrize("op, inputs, attributes, constants, opset", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_onnx_runtime(op, inputs, attributes, constants, opset):
    check_node(op, inputs, attributes, constants=constants, opset=opset)


# (inputs, attributes, constant inputs, outputs, opset)
SPLITS = [
    ({"x": normal(3, 12)}, {"axis": 1}, (), 3, 13),
    ({"x": normal(3, 7), "split": ints(2, 5)}, {"axis": -1}, ("split",), 2, 21),
    ({"x": normal(8, 4), "split": ints(2, 6)}, {}, ("split",), 2, 21),
    ({"x": normal(7, 5)}, {"num_outputs": 3}, (), 3, 21),
    ({"x": normal(16, 4)}, {"num_outputs": 4}, (), 4, 21),
    ({"x": normal(3, 7)}, {"axis": 1, "split": [3, 1, 3]}, (), 3, 11),
]


@pytest.mark.parametrize("inputs, attributes, constants, outputs, opset", SPLITS)
def test_split(inputs, attributes, constants, outputs, opset):
    check_node("Split", inputs, attributes, constants=constants, outputs=outputs, opset=opset)


@pytest.mark.parametrize("shape, value", [((3, 5), None), ((4, 8), np.array([-2.5], np.float32)),
                                          ((7,), np.array([3], np.int64)), ((2, 3), np.array([1.25], np.float64))])
def test_constant_of_shape(shape, value):
    attributes = {} if value is None else {"value": numpy_helper.from_array(value)}
    check_node("ConstantOfShape", {"shape": ints(*shape)}, attributes, constants=("shape",))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape, pads", [((5, 7), (2, 1, 1, 3)), ((4, 8), (1, 0, 0, 2)), ((3, 5), (0, 4, 0, 0)),
                                         ((4, 6), (3, 3, 2, 4)), ((5, 7), (-1, 2, 1, -3))])
def test_pad_modes(mode, shape, pads):
    """Every mode, borders on one side or both, and negative pads that crop before padding."""
    check_node("Pad", {"x": normal(*shape), "pads": ints(*pads)}, {"mode": mode}, constants=("pads",))


# (inputs, attributes, constant inputs, opset)
PADS = [
    ({"x": normal(3, 2), "pads": ints(7, 0, 5, 5)}, {"mode": "wrap"}, ("pads",), 21),  # wraps more than once
    ({"x": counting(3, 4, 5, dtype=np.int32), "pads": ints(1, 2, 0, 3), "value": None, "axes": ints(-1, 0)},
     {"mode": "edge"}, ("pads", "axes"), 21),
    ({"x": counting(3, 5, dtype=np.int64), "pads": ints(1, 0, 0, 2), "value": np.array(-7, np.int64)}, {},
     ("pads", "value"), 21),
    ({"x": normal(3, 5)}, {"pads": [0, 1, 2, 0], "value": 2.0}, (), 10),
]


@pytest.mark.parametrize("inputs, attributes, constants, opset", PADS)
def test_pad_variants(inputs, attributes, constants, opset):
    check_node("Pad", inputs, attributes, constants=constants, opset=opset)


@pytest.mark.parametrize("value, constants", [(np.array(1.5, np.float32), ("pads", "value")),
                                              (np.array(-4.0, np.float32), ("pads",)),
                                              (None, ("pads",))])
def test_pad_value_constant_or_read(value, constants):
    """A constant fill is a literal; a fill that is a graph input is read from its scalar."""
    text = check_node("Pad", {"x": normal(3, 5), "pads": ints(1, 2, 3, 0), "value": value}, {}, constants=constants)
    assert ("value[]" in text) == (value is not None and "value" not in constants)


def test_reshape_loops_over_the_common_refinement():
    text = check_node("Reshape", {"x": normal(6, 4), "shape": ints(2, 3, 4)}, constants=("shape",))
    assert "2 3 4 y[{0},{1},{2}] = x[{0}*3+{1},{2}]" in text


def test_reflection_reads_backwards():
    assert affine([("{0}", -1)], 3) == "3-{0}"
    assert affine([("{0}", 4), ("{1}", 1)]) == "{0}*4+{1}"
    assert affine([("{3}", 2), ("0", 5), (None, 1)], -1) == "{3}*2-1"
    assert affine([], 0) == "0"
    # reflect, 2 before and 2 after 4 elements: borders [2,1] and [2,1], interior 0..3
    runs = pad_runs(4, 2, 2, "reflect")
    assert [(r.size, r.start, r.source, r.step) for r in runs] == [(2, 0, 2, -1), (4, 2, 0, 1), (2, 6, 2, -1)]


@pytest.mark.parametrize("a, b, factors", [((6, 4), (2, 3, 4), [2, 3, 4]), ((2, 12), (2, 3, 4), [2, 3, 4]),
                                           ((6, 4), (4, 6), None), ((1, 5), (5, 1), [5]), ((), (1,), [])])
def test_refinement(a, b, factors):
    assert refinement(a, b) == factors


def node(op: str, inputs: list[Value], outputs: list[Value], attributes=None, opset: int = 21) -> Node:
    return Node("n", op, tuple(inputs), tuple(outputs), attributes or {}, opset)


def f32(name: str, *shape: int, constant=None) -> Value:
    return Value(name, "f32", shape, constant)


def i64(name: str, *values: int, constant: bool = True) -> Value:
    return Value(name, "i64", (len(values),), ints(*values) if constant else None)


# (node, the feature it needs, a word of its detail)
NOT_APPLICABLE = [
    (node("Reshape", [f32("x", 6, 4), i64("s", 4, 6)], [f32("y", 4, 6)]), "function", "division"),
    (node("Reshape", [f32("x", 3, 5), i64("s", 5, 3, constant=False)], [f32("y", 5, 3)]), "dynamic shape",
     "constant"),
    (node("Flatten", [f32("x", 2, 3)], [f32("y", 3, 2)]), "dynamic shape", "graph"),
    (node("Dropout", [f32("x", 3, 5)], [f32("y", 3, 5), Value("m", "i32", (3, 5))]), "dtype", "bool"),
    (node("Dropout", [f32("x", 3, 5), None, Value("t", "i32", (), np.array(1))], [f32("y", 3, 5)]), "random",
     "training"),
    (node("Range", [Value("s", "f32", ()), f32("l", constant=np.float32(3)), f32("d", constant=np.float32(1))],
          [f32("y", 3)]), "data-dependent range", "constant"),
    (node("Tile", [f32("x", 3, 5), i64("r", 2, 2, constant=False)], [f32("y", 6, 10)]), "dynamic shape", "constant"),
    (node("Pad", [f32("x", 3, 5), i64("p", 1, 1, 1, 1)], [f32("y", 5, 7)], {"mode": "mirror"}), "not written",
     "mirror"),
]


@pytest.mark.parametrize("case, feature, word", NOT_APPLICABLE, ids=[f"{c[0].op}-{i}" for i, c in
                                                                    enumerate(NOT_APPLICABLE)])
def test_not_applicable(case, feature, word):
    with pytest.raises(Unsupported) as raised:
        kernel_for(case)
    assert raised.value.feature == feature
    assert word in raised.value.detail
