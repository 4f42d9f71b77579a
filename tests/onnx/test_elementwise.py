"""Elementwise operators against ONNX Runtime, one node at a time, at an odd shape and a round one."""

from __future__ import annotations

import numpy as np
import pytest

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Node, Unsupported, Value
from libgen.onnx.ops.elementwise import FORMULAS
from tests.onnx.single_node import check_node, normal

SHAPES = [(3, 5, 7), (4, 8)]


def wide(*shape: int, seed: int = 0) -> np.ndarray:
    """Values out to +-60, where exp overflows and naive formulas lose everything."""
    return (normal(*shape, seed=seed) * 20).astype(np.float32)


def positive(*shape: int, seed: int = 0) -> np.ndarray:
    return np.asarray(np.abs(normal(*shape, seed=seed)) + 0.1, np.float32)


UNARY = ["Abs", "Neg", "Exp", "Tanh", "Erf", "Relu", "Sigmoid", "Softplus", "Softsign", "Elu", "Selu", "Celu",
         "LeakyRelu", "HardSigmoid", "HardSwish", "Mish"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", UNARY)
def test_unary_operators_match_ort(op, shape):
    check_node(op, {"x": normal(*shape)})


@pytest.mark.parametrize("op", ["Sigmoid", "Softplus", "Elu", "Selu", "Celu", "Mish", "Tanh", "HardSwish", "Swish",
                                "Erf", "Gelu"])
def test_activations_hold_at_large_magnitudes(op):
    # sigmoid(-60) must not be 1/(1+inf) = nan, softplus(60) must not overflow
    opset = 24 if op == "Swish" else 21
    check_node(op, {"x": wide(3, 5, 7)}, opset=opset, atol=1e-6)


POSITIVE = ["Log", "Sqrt", "Reciprocal"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", POSITIVE)
def test_operators_of_positive_numbers_match_ort(op, shape):
    check_node(op, {"x": positive(*shape)})


def scalar(value, dtype=np.float32):
    return np.array(value, dtype)


# op -> (inputs at a shape, attributes, constant inputs, opset)
RECIPES = {
    "Swish": (lambda s: {"x": normal(*s)}, {"alpha": 0.8}, (), 24),
    "Gelu": (lambda s: {"x": normal(*s) * 2}, {}, (), 20),  # approximate="none": through erf
    "PRelu": (lambda s: {"x": normal(*s), "slope": positive(s[-1], seed=1)}, {}, (), 21),
    "Clip": (lambda s: {"x": normal(*s), "min": scalar(-0.3), "max": scalar(0.6)}, {}, ("min", "max"), 21),
    "Shrink": (lambda s: {"x": normal(*s)}, {"lambd": 0.4, "bias": 0.4}, (), 21),
    "Pow": (lambda s: {"x": normal(*s), "e": scalar(3)}, {}, ("e",), 21),
    "Cast": (lambda s: {"x": normal(*s) * 10}, {"to": 7}, (), 21),
    "CastLike": (lambda s: {"x": normal(*s), "like": np.zeros(1, np.float64)}, {}, (), 21),
}
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", RECIPES)
def test_operators_with_more_than_one_input_or_attribute(op, shape):
    inputs, attributes, constants, opset = RECIPES[op]
    check_node(op, inputs(shape), attributes, constants=constants, opset=opset)


def test_every_operator_of_the_table_is_tested():
    assert set(FORMULAS) == set(UNARY) | set(POSITIVE) | set(RECIPES) | set(BINARY)


@pytest.mark.parametrize(("op", "attributes"), [
    ("LeakyRelu", {"alpha": 0.3}), ("Elu", {"alpha": 0.5}), ("Celu", {"alpha": 2.5}),
    ("Selu", {"alpha": 1.5, "gamma": 0.7}), ("HardSigmoid", {"alpha": 0.4, "beta": 0.3}),
    ("Swish", {"alpha": 1.7}), ("Swish", {}), ("Gelu", {"approximate": "tanh"}), ("Gelu", {"approximate": "none"}),
])
def test_attributes_are_honoured(op, attributes):
    opset = 24 if op == "Swish" else 21
    check_node(op, {"x": normal(3, 5, 7) * 3}, attributes, opset=opset)


def test_negative_slopes_are_scaled_and_positive_values_kept():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    assert "0.3 * min(" in check_node("LeakyRelu", {"x": x}, {"alpha": 0.3})
    check_node("Elu", {"x": x}, {"alpha": 0.5})


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize(("a", "b"), [((3, 5, 7), (3, 5, 7)), ((4, 8), (4, 8)), ((3, 1, 7), (5, 1)), ((4, 8), ())],
                         ids=["odd", "round", "broadcast", "scalar"])
def test_binary_operators_broadcast_as_onnx(op, a, b):
    check_node(op, {"a": normal(*a), "b": positive(*b, seed=1)})


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_operators_take_any_number_of_operands(op):
    text = check_node(op, {"a": normal(3, 1, 7), "b": normal(5, 1, seed=1), "c": normal(7, seed=2),
                           "d": normal(3, 5, 7, seed=3)})
    assert text.count(" f32 [") == 5
    check_node(op, {"a": normal(4, 8)})


def test_a_constant_scalar_operand_is_a_literal():
    text = check_node("Div", {"a": normal(4, 8), "b": np.array(8.0, np.float32)}, constants=("b",))
    assert "a[{0},{1}] / 8" in text and "b f32" not in text


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_arithmetic_is_exact(op, dtype):
    a = np.random.default_rng(0).integers(-50, 50, (3, 5, 7)).astype(dtype)
    b = np.random.default_rng(1).integers(1, 9, (5, 1)).astype(dtype) * np.array([[1], [-1], [1], [-1], [1]], dtype)
    check_node(op, {"a": a, "b": b}, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Relu"])
def test_integer_unary_operators(op):
    # ONNX Runtime has no int64 Relu
    check_node(op, {"x": np.arange(-17, 18, dtype=np.int32).reshape(5, 7)}, rtol=0, atol=0)


def test_prelu_broadcasts_its_slope():
    check_node("PRelu", {"x": normal(3, 5, 7), "slope": positive(5, 1, seed=1)})
    check_node("PRelu", {"x": normal(4, 8), "slope": positive(8, seed=1)})


@pytest.mark.parametrize(("low", "high"), [(-0.5, 0.5), (None, 0.3), (-0.2, None), (None, None), (0.5, -0.5)])
def test_clip_bounds_are_optional_inputs(low, high):
    inputs = {"x": normal(3, 5, 7), "min": None if low is None else np.array(low, np.float32),
              "max": None if high is None else np.array(high, np.float32)}
    check_node("Clip", inputs, constants=("min", "max"))


def test_clip_with_computed_bounds_reads_them():
    text = check_node("Clip", {"x": normal(4, 8), "min": np.array(-0.1, np.float32), "max": np.array(0.2, np.float32)})
    assert "low[]" in text and "high[]" in text


def test_clip_before_opset_11_takes_attributes():
    check_node("Clip", {"x": normal(3, 5, 7)}, {"min": -0.25, "max": 0.75}, opset=6)


def test_integer_clip():
    check_node("Clip", {"x": np.arange(-20, 15, dtype=np.int32).reshape(5, 7), "min": np.array(-3, np.int32),
                        "max": np.array(4, np.int32)}, constants=("min", "max"), rtol=0, atol=0)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 1.0, 0.0, -2.0, 0.5])
def test_pow_with_a_constant_exponent(exponent):
    check_node("Pow", {"x": positive(3, 5, 7), "e": np.array(exponent, np.float32)}, constants=("e",))


def test_integer_pow():
    check_node("Pow", {"x": np.arange(-6, 6, dtype=np.int64).reshape(3, 4), "e": np.array(3, np.int64)},
               constants=("e",), rtol=0, atol=0)


def test_shrink_with_bias_equal_to_lambd():
    x = np.concatenate([normal(33), np.array([-0.5, 0.5, 0.0], np.float32)]).reshape(4, 9)
    check_node("Shrink", {"x": x}, {"lambd": 0.5, "bias": 0.5})
    check_node("Shrink", {"x": normal(3, 5, 7)}, {"lambd": 0.0, "bias": 0.0})


@pytest.mark.parametrize(("source", "target"), [(np.float32, 6), (np.float32, 7), (np.float32, 11), (np.float64, 1),
                                                (np.int64, 1), (np.int32, 7), (np.int64, 6)])
def test_cast_converts_as_ort_does(source, target):
    # floats to integers truncate toward zero in both
    x = (normal(3, 5, 7) * 40).astype(source)
    check_node("Cast", {"x": x}, {"to": target}, rtol=0, atol=0)


def test_gelu_is_written_with_erf_or_its_tanh_approximation():
    x = {"x": np.linspace(-6, 6, 97, dtype=np.float32)}
    assert "0.5 * x[{0}] * (1 + erf(x[{0}] * 0.70710677))" in check_node("Gelu", x, opset=20, rtol=3e-7, atol=1e-7)
    assert "tanh(0.7978846 * (x[{0}] + 0.044715 * x[{0}] * x[{0}] * x[{0}]))" in check_node(
        "Gelu", x, {"approximate": "tanh"}, opset=20)
    assert "= erf(x[{0}])" in check_node("Erf", x, rtol=0, atol=6e-8)  # within an ulp of ONNX Runtime's


def test_castlike_takes_the_dtype_of_its_second_input():
    check_node("CastLike", {"x": normal(4, 8) * 9, "like": np.zeros(1, np.int32)}, rtol=0, atol=0)


def unsupported(op: str, inputs: list[Value], attributes: dict | None = None, opset: int = 21) -> Unsupported:
    output = Value("y", inputs[0].dtype, inputs[0].shape)
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("n", op, tuple(inputs), (output,), attributes or {}, opset))
    return caught.value


X = Value("x", "f32", (3, 5, 7))


@pytest.mark.parametrize(("op", "inputs", "attributes", "feature", "says"), [
    ("Gelu", [X], {"approximate": "exact"}, "invalid", '"none" and "tanh"'),
    ("Pow", [X, Value("e", "f32", ())], {}, "function", "computed exponent"),
    ("Pow", [X, Value("e", "f32", (), np.array(1.5, np.float32))], {}, "function", "exponent 1.5"),
    ("Pow", [X, Value("e", "f32", (2,), np.array([2, 3], np.float32))], {}, "function", "differing"),
    ("Shrink", [X], {"lambd": 0.5, "bias": 0.2}, "control flow", "bias 0.2"),
    ("Sqrt", [Value("x", "i32", (3,))], {}, "dtype", "floats only"),
])
def test_what_cannot_be_written_exactly_is_refused(op, inputs, attributes, feature, says):
    error = unsupported(op, inputs, attributes)
    assert error.feature == feature and says in error.detail
