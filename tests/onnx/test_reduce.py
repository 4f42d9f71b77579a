"""The reductions and normalisations of `libgen/onnx/ops/reduce.py` compute what ONNX Runtime does.

Each case is one node run by ORT and by its kernel on random inputs (`check_node`), at shapes no
power of two divides (3, 5, 7) and at round ones (4, 8, 16), over every axis including negative
ones; the cases the format cannot write must name the feature they need.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import onnx
import pytest

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Unsupported
from tests.onnx.single_node import check_node, node_of, normal

REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]

# (shape, axes, keepdims, noop_with_empty_axes); axes None: not given
REDUCE_CASES = [
    ((3, 5, 7), [0], 1, 0),
    ((3, 5, 7), [1], 0, 0),
    ((3, 5, 7), [-1], 0, 0),
    ((3, 5, 7), [-3, 2], 1, 0),
    ((2, 3, 5, 7), [1, 3], 0, 0),
    ((2, 3, 5, 7), [-2, 0, 3], 1, 0),
    ((3, 5, 7), None, 0, 0),
    ((3, 5, 7), [], 1, 0),
    ((3, 5, 7), [], 0, 1),
    ((4, 8, 16), [2], 1, 0),
    ((4, 8, 16), [0, -2], 0, 0),
    ((4, 8, 16), None, 1, 0),
]


def reduce_input(op: str, shape: Sequence[int], dtype: type = np.float32) -> np.ndarray:
    """Inputs where the operator is well conditioned: positive for a log of a sum, near ±1 for a product."""
    x = normal(*shape, seed=len(shape))
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    elif op == "ReduceProd":
        x = np.sign(x) * (1 + 0.05 * x)
    return x.astype(dtype)


def check_reduce(op: str, x: np.ndarray, axes: list[int] | None, keepdims: int, noop: int, opset: int) -> str:
    """Axes as a constant input from ReduceSum's opset 13 and the others' 18, as an attribute before."""
    attributes = {"keepdims": keepdims}
    inputs = {"x": x}
    if opset >= (13 if op == "ReduceSum" else 18):
        attributes["noop_with_empty_axes"] = noop
        if axes is not None:
            inputs["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attributes["axes"] = axes
    return check_node(op, inputs, attributes, constants=("axes",), opset=opset)


@pytest.mark.parametrize("shape, axes, keepdims, noop", REDUCE_CASES)
@pytest.mark.parametrize("op", REDUCE)
def test_reduce_with_axes_as_input(op, shape, axes, keepdims, noop):
    check_reduce(op, reduce_input(op, shape), axes, keepdims, noop, opset=18)


@pytest.mark.parametrize("shape, axes, keepdims", [((3, 5, 7), [-1], 0), ((2, 3, 5, 7), [0, 2], 1),
                                                   ((4, 8, 16), None, 0)])
@pytest.mark.parametrize("op", REDUCE)
def test_reduce_with_axes_as_attribute(op, shape, axes, keepdims):
    check_reduce(op, reduce_input(op, shape), axes, keepdims, 0, opset=11 if op == "ReduceSum" else 13)


@pytest.mark.parametrize("op, dtype", [("ReduceSum", np.int32), ("ReduceSum", np.int64), ("ReduceMean", np.int32),
                                       ("ReduceMax", np.int32), ("ReduceMin", np.int64), ("ReduceProd", np.int64),
                                       ("ReduceL1", np.int32), ("ReduceSumSquare", np.int64),
                                       ("ReduceMax", np.float64)])
@pytest.mark.parametrize("axes", [[1], [0, 2]])
def test_reduce_other_dtypes(op, dtype, axes):
    """Integers have no infinity: a maximum starts from the first element; a mean truncates."""
    x = (normal(3, 5, 7) * 4).astype(dtype) if np.dtype(dtype).kind == "i" else normal(3, 5, 7, dtype=dtype)
    check_reduce(op, x, axes, 0, 0, opset=18)


def test_reduce_log_sum_exp_does_not_overflow():
    x = normal(3, 5, 7) * 100
    check_reduce("ReduceLogSumExp", x, [1], 0, 0, opset=18)


def test_reduce_of_nothing_keeps_each_element_through_the_finishing_step():
    """noop_with_empty_axes: ORT still squares (SumSquare), takes abs (L1, L2) and log (LogSum)."""
    text = check_reduce("ReduceSumSquare", normal(3, 5), [], 1, 1, opset=18)
    assert "3 5 y[{0},{1}] += x[{0},{1}] * x[{0},{1}]" in text


def test_empty_axes_input_known_empty_without_a_constant():
    check_node("ReduceMax", {"x": normal(3, 5, 7), "axes": np.zeros(0, np.int64)}, {"keepdims": 0})


def test_reduction_style_follows_the_library():
    """Kept loops outermost, reduced ones innermost; init, reduce, finish."""
    text = check_reduce("ReduceMean", normal(3, 5, 7), [0, 2], 0, 0, opset=18)
    assert text.splitlines()[-3:] == ["5 y[{0}] = 0", "5 3 7 y[{0}] += x[{1},{0},{2}]", "5 y[{0}] = y[{0}] / 21"]


SOFTMAX_CASES = [((3, 5, 7), a) for a in (0, 1, 2, -1, -2, -3)] + [((2, 3, 5, 7), 2), ((4, 8, 16), -1),
                                                                       ((4, 8, 16), 0), ((13,), 0)]


@pytest.mark.parametrize("shape, axis", SOFTMAX_CASES)
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(op, opset, shape, axis):
    """Opset 13 on: along `axis`; before: over all axes from `axis` on."""
    check_node(op, {"x": normal(*shape) * 3}, {"axis": axis}, opset=opset)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_subtracts_the_maximum(op):
    check_node(op, {"x": normal(3, 5, 7) * 200}, {"axis": 1})


def parameters(shape: Sequence[int], seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    return normal(*shape, seed=seed), normal(*shape, seed=seed + 1)


@pytest.mark.parametrize("shape, axis", [((3, 5, 7), -1), ((3, 5, 7), 1), ((3, 5, 7), 0), ((3, 5, 7), -2),
                                         ((2, 3, 5, 7), 2), ((4, 8, 16), -1), ((4, 8, 16), 1)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("outputs", [1, 3])
def test_layer_normalization(shape, axis, with_bias, outputs):
    scale, bias = parameters(shape[axis:])
    # bias left out rather than given as None: ORT 1.32 crashes on LayerNormalization's trailing empty input
    inputs = {"x": normal(*shape), "scale": scale, **({"bias": bias} if with_bias else {})}
    check_node("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-3}, outputs=outputs, opset=17)


def test_layer_normalization_broadcasts_scale_and_keeps_f64():
    """f64 input with the default stash_type: ORT keeps f64 statistics, Mean and InvStdDev are f32."""
    x = normal(3, 5, 7, dtype=np.float64)
    check_node("LayerNormalization", {"x": x, "scale": normal(1, 7, dtype=np.float64)}, {"axis": 1}, outputs=3,
               opset=17)


def test_layer_normalization_style_follows_the_library():
    scale, bias = parameters((7,))
    text = check_node("LayerNormalization", {"x": normal(3, 5, 7), "scale": scale, "bias": bias}, opset=17)
    assert ("3 5 7 y[{0},{1},{2}] = (x[{0},{1},{2}] - mean[{0},{1}]) / sqrt(var[{0},{1}] + 1.0e-5) * scale[{2}] "
            "+ bias[{2}]") in text
    assert "3 5 7 var[{0},{1}] += (x[{0},{1},{2}] - mean[{0},{1}]) * (x[{0},{1},{2}] - mean[{0},{1}])" in text


def batch_inputs(shape: Sequence[int]) -> dict[str, np.ndarray]:
    c = (shape[1],)
    scale, bias = parameters(c)
    return {"x": normal(*shape), "scale": scale, "bias": bias, "mean": normal(*c, seed=5),
            "var": np.abs(normal(*c, seed=6)) + 0.1}


BATCH_SHAPES = [(3, 5, 7), (2, 3, 5, 7), (4, 8, 16), (3, 5), (2, 4, 8, 16)]


@pytest.mark.parametrize("shape", BATCH_SHAPES)
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_normalization_inference(shape, opset):
    check_node("BatchNormalization", batch_inputs(shape), {"epsilon": 1e-3}, constants=("mean", "var"),
               opset=opset)


@pytest.mark.parametrize("shape", BATCH_SHAPES)
def test_batch_normalization_training(shape):
    """The batch's own statistics, and the running ones updated with `momentum` (ONNX requires
    both running outputs in training mode)."""
    check_node("BatchNormalization", batch_inputs(shape), {"training_mode": 1, "momentum": 0.75}, outputs=3, opset=15)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 5, 7), (4, 8, 16), (2, 3, 5, 7, 3)])
def test_instance_normalization(shape):
    scale, bias = parameters(shape[1:2])
    check_node("InstanceNormalization", {"x": normal(*shape), "scale": scale, "bias": bias}, {"epsilon": 1e-3})


@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 7), 1), ((2, 6, 5, 7), 2), ((2, 6, 5, 7), 3),
                                           ((2, 6, 5, 7), 6), ((3, 4, 5), 2), ((4, 8, 16), 4), ((2, 8, 4, 4), 2)])
@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(shape, groups, opset):
    """Scale and bias are per group at opset 18, per channel from 21."""
    scale, bias = parameters((groups if opset < 21 else shape[1],))
    check_node("GroupNormalization", {"x": normal(*shape), "scale": scale, "bias": bias},
               {"num_groups": groups, "epsilon": 1e-3}, opset=opset)


@pytest.mark.parametrize("shape, axis", [((3, 5, 7), a) for a in (0, 1, 2, -1, -3)] + [((4, 8, 16), 1),
                                                                                       ((4, 8, 16), -1)])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization(p, shape, axis):
    check_node("LpNormalization", {"x": normal(*shape)}, {"p": p, "axis": axis})


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lp_normalization_of_a_zero_norm_is_zero(p, dtype):
    """ORT writes 0 where the norm is 0: a row of zeros, and for p = 2 a row whose squares underflow."""
    x = normal(4, 5, dtype=dtype)
    x[1] = 0
    x[2] = [0, np.finfo(dtype).smallest_subnormal * 3, 0, 0, 0]  # p = 1: tiny but not 0
    x[3] = np.sqrt(np.finfo(dtype).smallest_subnormal) / 4  # p = 2: the squares underflow to 0
    check_node("LpNormalization", {"x": x}, {"p": p, "axis": 1}, rtol=1e-6, atol=0)


@pytest.mark.parametrize("shape, axes", [((2, 3, 5, 7), None), ((2, 3, 5, 7), [1]), ((2, 3, 5, 7), [-1, 0]),
                                         ((2, 3, 5, 7), [0, 1, 2, 3]), ((3, 5, 7), [0, 2]), ((4, 8, 16), [2]),
                                         ((2, 4, 8, 16), [0, 2, 3])])
def test_mean_variance_normalization(shape, axes):
    attributes = {} if axes is None else {"axes": axes}
    check_node("MeanVarianceNormalization", {"x": normal(*shape)}, attributes, opset=13)


@cache
def rms_available() -> bool:
    try:
        onnx.defs.get_schema("RMSNormalization", 23)
        check_node("RMSNormalization", {"x": normal(1, 2), "scale": normal(2)}, opset=23)
    except onnx.defs.SchemaError:
        return False
    except Exception as error:  # ORT without a kernel for it
        return "RMSNormalization" not in str(error)
    return True


@pytest.mark.parametrize("shape, axis", [((3, 5, 7), -1), ((3, 5, 7), 1), ((3, 5, 7), 0), ((4, 8, 16), -1),
                                         ((2, 3, 5, 7), -2)])
def test_rms_normalization(shape, axis):
    if not rms_available():
        pytest.skip("this onnx or onnxruntime has no RMSNormalization (opset 23)")
    check_node("RMSNormalization", {"x": normal(*shape), "scale": normal(*shape[axis:], seed=1)},
               {"axis": axis, "epsilon": 1e-3}, opset=23)


def refused(op: str, inputs: dict[str, np.ndarray], attributes: dict, *, constants: Sequence[str] = (),
            outputs: int = 1, opset: int = 21) -> str:
    """The feature the kernel of the node is refused for (its outputs shaped as its first input)."""
    like = [next(iter(inputs.values()))] * outputs
    with pytest.raises(Unsupported) as caught:
        kernel_for(node_of(op, inputs, attributes, constants, like, opset))
    return caught.value.feature


NOT_APPLICABLE = [
    # axes that are not a constant cannot be read at import
    ("ReduceSum", {"x": normal(3, 5), "axes": np.array([1])}, {}, {}, "dynamic shape"),
    ("ReduceMean", {"x": normal(3, 5), "axes": np.array([0])}, {}, {"opset": 18}, "dynamic shape"),
    # sqrt, log and exp are float functions: an integer result of them would need a conversion
    ("ReduceL2", {"x": np.ones((3, 5), np.int32)}, {}, {"opset": 13}, "function"),
    ("ReduceLogSum", {"x": np.ones((3, 5), np.int64)}, {}, {"opset": 13}, "function"),
    ("ReduceLogSumExp", {"x": np.ones((3, 5), np.int32)}, {}, {"opset": 13}, "function"),
    ("LayerNormalization", {"x": normal(3, 5), "scale": normal(5)}, {"stash_type": 16}, {}, "dtype"),
    ("GroupNormalization", {"x": normal(2, 4, 5), "scale": normal(4), "bias": normal(4)},
     {"num_groups": 2, "stash_type": 10}, {}, "dtype"),
    ("LpNormalization", {"x": normal(3, 5)}, {"p": 3}, {}, "function"),
    # BatchNormalization's training outputs of opsets 9-13 (saved mean and inverse std) are not written
    ("BatchNormalization", batch_inputs((2, 3, 5)), {}, {"opset": 9, "outputs": 5}, "not written"),
]


@pytest.mark.parametrize("op, inputs, attributes, options, feature", NOT_APPLICABLE,
                         ids=[f"{case[0]}-{case[-1]}" for case in NOT_APPLICABLE])
def test_not_applicable(op, inputs, attributes, options, feature):
    assert refused(op, inputs, attributes, **options) == feature
