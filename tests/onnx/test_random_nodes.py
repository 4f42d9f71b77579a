"""Operators at shapes and attributes drawn at random, against ONNX Runtime: broadcasting of any
two shapes that ONNX broadcasts, reductions over any set of axes, any permutation, any slice.
The per-operator tests pin the cases their authors thought of; these look for the others."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.onnx.single_node import check_node

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
dims = st.integers(1, 6)
shapes = st.lists(dims, min_size=1, max_size=4).map(tuple)


def array(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@st.composite
def broadcastable(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: the second a suffix of the first, some of its dims (or the
    first's) made 1, and the longer one either."""
    full = draw(shapes)
    other = list(full[len(full) - draw(st.integers(0, len(full))):])
    other = [1 if draw(st.booleans()) else size for size in other]
    first = tuple(1 if draw(st.booleans()) and size != 1 else size for size in full)
    return (first, tuple(other)) if draw(st.booleans()) else (tuple(other), first)


@SETTINGS
@given(st.sampled_from(["Add", "Sub", "Mul", "Max", "Min", "PRelu"]), broadcastable(), st.integers(0, 99))
def test_binary_operators_broadcast_any_two_shapes(op: str, pair, seed: int) -> None:
    a, b = pair
    if op == "PRelu":  # the slope broadcasts to x, not the other way
        a = tuple(np.broadcast_shapes(a, b))
    check_node(op, {"a": array(a, seed), "b": array(b, seed + 1)})


@st.composite
def reductions(draw: st.DrawFn) -> tuple[tuple[int, ...], list[int], int]:
    shape = draw(shapes)
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), max_size=len(shape),
                         unique_by=lambda axis: axis % len(shape)))
    return shape, axes, draw(st.integers(0, 1))


@SETTINGS
@given(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp"]),
       reductions(), st.integers(0, 99))
def test_reductions_over_any_axes(op: str, reduction, seed: int) -> None:
    shape, axes, keepdims = reduction
    inputs = {"x": array(shape, seed)}
    if axes:
        inputs["axes"] = np.array(axes, np.int64)
    check_node(op, inputs, {"keepdims": keepdims}, constants=("axes",), opset=18)


@SETTINGS
@given(shapes.flatmap(lambda s: st.tuples(st.just(s), st.permutations(range(len(s))))), st.integers(0, 99))
def test_any_transpose(case, seed: int) -> None:
    shape, perm = case
    check_node("Transpose", {"x": array(shape, seed)}, {"perm": list(perm)})


@st.composite
def slices(draw: st.DrawFn) -> tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]:
    shape = draw(shapes)
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    starts, ends, steps = [], [], []
    for axis in axes:
        size = shape[axis]
        steps.append(draw(st.sampled_from([-3, -2, -1, 1, 2, 3])))
        starts.append(draw(st.integers(-size - 2, size + 2)))
        ends.append(draw(st.integers(-size - 2, size + 2)))
    return shape, starts, ends, axes, steps


@SETTINGS
@given(slices(), st.integers(0, 99))
def test_any_slice(case, seed: int) -> None:
    shape, starts, ends, axes, steps = case
    x = array(shape, seed)
    want = x[tuple(slice(None) if a not in axes else slice(starts[axes.index(a)], ends[axes.index(a)],
                                                           steps[axes.index(a)]) for a in range(len(shape)))]
    if want.size == 0:  # the format has no empty arrays; the importer reports such a node
        return
    check_node("Slice", {"x": x, **{name: np.array(v, np.int64) for name, v in
                                    (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))}},
               constants=("starts", "ends", "axes", "steps"))


@SETTINGS
@given(shapes.flatmap(lambda s: st.tuples(st.just(s), st.integers(-len(s), len(s) - 1))), st.integers(0, 99))
def test_softmax_along_any_axis(case, seed: int) -> None:
    shape, axis = case
    check_node("Softmax", {"x": array(shape, seed) * 4}, {"axis": axis})


@st.composite
def three_row_convs(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], dict]:
    """A Conv with three rows of taps at row stride and dilation 1, any columns, pads and column
    stride and dilation, and channels whose reductions are long enough for Winograd's algorithm
    (or not: the rule decides, and both forms must agree with ONNX Runtime)."""
    channels_in, channels_out, columns = draw(st.integers(3, 12)), draw(st.integers(3, 12)), draw(st.integers(1, 4))
    stride, dilation = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    rows = draw(st.integers(max(1, 3 - pads[0] - pads[2]), 13))
    width = draw(st.integers(max(1, (columns - 1) * dilation + 1 - pads[1] - pads[3]), 12))
    attributes = {"pads": pads, "strides": [1, stride], "dilations": [1, dilation]}
    return (draw(st.integers(1, 2)), channels_in, rows, width), (channels_out, channels_in, 3, columns), attributes


@SETTINGS
@given(three_row_convs(), st.integers(0, 99))
def test_three_row_convolutions_of_constant_weights(conv, seed: int) -> None:
    x, w, attributes = conv
    inputs = {"x": array(x, seed), "w": array(w, seed + 1) / np.float32(np.sqrt(w[1] * w[3] * 3))}  # unit outputs
    check_node("Conv", inputs, attributes, constants=("w",), atol=2e-5)
