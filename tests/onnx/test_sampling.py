"""Resize agrees with ONNX Runtime across modes, coordinate transformations, rounding modes, scales,
sizes and opsets, and AffineGrid in 2-D and 3-D; what the catalogue does not write is refused with
the reason."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Node, Unsupported, Value
from libgen.onnx.ops.sampling import MOST_NESTS, NEAREST, TRANSFORMS, Segment, segments, taps_at
from tests.onnx.single_node import check_node, normal

CASES = [
    # attributes, x's shape, scales (or sizes when the list holds ints of the output's rank), opset
    ({"mode": "nearest"}, (1, 2, 5, 7), [1, 1, 2, 2], 21),  # doubling: 4 loop nests
    ({"mode": "linear"}, (1, 2, 5, 7), [1, 1, 2, 2], 21),  # bilinear: 16, the edges reading one row
    ({"mode": "nearest"}, (1, 2, 5, 7), [1, 1, 3, 2], 21),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, (1, 2, 5, 7), [1, 1, 0.5, 3], 21),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"}, (1, 2, 5, 7),
     [1, 1, 1.5, 0.5], 21),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "asymmetric"}, (1, 2, 5, 7),
     [1, 1, 2, 1.5], 21),
    ({"mode": "linear"}, (1, 2, 8, 6), [1, 1, 0.5, 0.5], 21),  # halving: every output reads two inputs
    ({"mode": "linear"}, (1, 2, 5, 7), [1, 1, 1.5, 1.5], 21),  # weights that float32 rounds differently
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, (1, 2, 5, 7), [1, 1, 2, 1], 21),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, (1, 2, 5, 7), [1, 1, 2, 2], 21),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, (1, 2, 5, 7), [1, 1, 1.5, 2], 21),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, (1, 2, 5, 7), [1, 2, 9, 13], 21),
    ({"mode": "linear"}, (1, 2, 5, 7), [1, 2, 10, 14], 21),  # sizes
    ({"mode": "nearest"}, (1, 2, 5, 7), [1, 2, 8, 21], 21),
    ({"mode": "linear"}, (1, 2, 9), [1, 1, 2], 21),  # 1-D
    ({"mode": "linear"}, (2, 3, 4, 5, 6), [1, 1, 2, 2, 2], 21),  # trilinear: 64 loop nests
    ({"mode": "nearest"}, (1, 2, 5, 7), [1, 1, 2, 2], 11),  # an empty roi input
    ({"mode": "linear"}, (1, 2, 5, 7), [1, 1, 2, 2], 13),
    ({"mode": "nearest", "axes": [2, 3]}, (1, 2, 5, 7), [2, 3], 19),
    ({"mode": "linear", "antialias": 1}, (1, 2, 5, 7), [1, 1, 2, 2], 19),  # upsampling: antialias changes nothing
]


def inputs_of(shape: tuple[int, ...], numbers: list, opset: int, dtype=np.float32) -> dict:
    sizes = all(isinstance(n, int) for n in numbers) and len(numbers) == len(shape) and numbers[0] == shape[0] \
        and any(n not in (1, 2, 3) for n in numbers)
    inputs = {"x": normal(*shape).astype(dtype), "roi": np.array([], np.float32) if opset < 13 else None,
              "scales": None if sizes else np.array(numbers, np.float32)}
    if sizes:
        inputs["sizes"] = np.array(numbers, np.int64)
    return inputs


@pytest.mark.parametrize("attributes, shape, numbers, opset", CASES)
def test_resize(attributes: dict, shape: tuple[int, ...], numbers: list, opset: int) -> None:
    check_node("Resize", inputs_of(shape, numbers, opset), attributes, constants=("roi", "scales", "sizes"),
               opset=opset)


def test_nearest_resize_of_integers_copies() -> None:
    x = np.random.default_rng(0).integers(-50, 50, (1, 2, 5, 7)).astype(np.int32)
    text = check_node("Resize", {"x": x, "roi": None, "scales": np.array([1, 1, 2, 2], np.float32)},
                      {"mode": "nearest"}, constants=("scales",))
    assert len(text.split("\n\n")[-1].splitlines()) == 4 and " * " not in text


def test_doubling_reads_each_input_row_twice_along_two_phases() -> None:
    taps = [taps_at(o, 5, 10, 2.0, "nearest", "half_pixel", "round_prefer_floor") for o in range(10)]
    assert segments(taps) == [Segment(5, 0, 2, ((0, 1, 1.0),)), Segment(5, 1, 2, ((0, 1, 1.0),))]
    taps = [taps_at(o, 5, 10, 2.0, "linear", "half_pixel", "") for o in range(10)]
    assert segments(taps) == [Segment(1, 0, 2, ((0, 0, 1.0),)), Segment(4, 2, 2, ((0, 1, 0.25), (1, 1, 0.75))),
                              Segment(4, 1, 2, ((0, 1, 0.75), (1, 1, 0.25))), Segment(1, 9, 2, ((4, 0, 1.0),))]


@pytest.mark.parametrize("attributes, numbers, opset, detail", [
    ({"mode": "cubic"}, [1, 1, 2, 2], 19, "mode 'cubic'"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, [1, 1, 2, 2], 19, "tf_crop_and_resize"),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.5], 19, "antialiased downsampling"),
    ({"keep_aspect_ratio_policy": "not_larger"}, [1, 2, 8, 8], 19, "keep_aspect_ratio_policy"),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1, 1, 2, 2], 19, "loop nests"),
    ({}, [1, 1, 2, 2], 10, "opset 10"),
])
def test_what_is_not_written_is_refused_with_the_reason(attributes: dict, numbers: list, opset: int,
                                                        detail: str) -> None:
    shape = (1, 2, 8, 8)
    sizes = all(isinstance(n, int) for n in numbers) and numbers[1] == 2
    scales = Value("scales", "f32", (4,), None if sizes else np.array(numbers, np.float32))
    given = Value("sizes", "i64", (4,), np.array(numbers, np.int64)) if sizes else None
    out = numbers if sizes else [int(n * s) for n, s in zip(shape, numbers, strict=True)]
    node = Node("r", "Resize", (Value("x", "f32", shape), None, None if sizes else scales, given),
                (Value("y", "f32", tuple(out)),), attributes, opset)
    with pytest.raises(Unsupported) as caught:
        kernel_for(node)
    assert caught.value.feature == "not written" and detail in caught.value.detail


@pytest.mark.parametrize("scale", [0.0, -2.0, float("nan"), float("inf")])
def test_a_scale_that_is_not_a_positive_number_is_invalid(scale: float) -> None:
    scales = Value("scales", "f32", (4,), np.array([1, 1, scale, 2], np.float32))
    node = Node("r", "Resize", (Value("x", "f32", (1, 2, 4, 4)), None, scales), (Value("y", "f32", (1, 2, 8, 8)),),
                {}, 19)
    with pytest.raises(Unsupported) as caught:
        kernel_for(node)
    assert caught.value.feature == "invalid" and "scales" in caught.value.detail


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["nearest", "linear"]), st.sampled_from(TRANSFORMS), st.sampled_from(NEAREST),
       st.integers(1, 9), st.integers(1, 9), st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, 0.75]),
       st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, 0.75]))
def test_any_scales_and_modes_agree_or_are_refused(mode, transform, nearest, rows, columns, scale_rows,
                                                   scale_columns) -> None:
    """Either the kernel gives ONNX Runtime's result, or the Resize needs more than MOST_NESTS loop
    nests at those sizes and is refused."""
    if int(rows * scale_rows) < 1 or int(columns * scale_columns) < 1:
        return
    attributes = {"mode": mode, "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    try:
        check_node("Resize", inputs_of((1, 2, rows, columns), [1, 1, scale_rows, scale_columns], 21), attributes,
                   constants=("scales",))
    except Unsupported as refused:
        assert refused.feature == "not written" and f"(at most {MOST_NESTS})" in refused.detail


@pytest.mark.parametrize("theta, size, align_corners", [
    ((2, 2, 3), (2, 3, 5, 7), 0), ((2, 2, 3), (2, 3, 5, 7), 1),
    ((1, 2, 3), (1, 1, 1, 4), 0),  # one row: at 0
    ((2, 3, 4), (2, 1, 3, 4, 5), 0), ((2, 3, 4), (2, 1, 3, 4, 5), 1),  # 3-D
])
def test_affine_grid(theta: tuple[int, ...], size: tuple[int, ...], align_corners: int) -> None:
    check_node("AffineGrid", {"theta": normal(*theta), "size": np.array(size, np.int64)},
               {"align_corners": align_corners}, constants=("size",), opset=20)


def test_an_affine_grid_with_corners_aligned_on_one_position_is_refused() -> None:
    """ONNX's reference puts the single position at -1, ONNX Runtime at 1: no answer to match."""
    size = Value("size", "i64", (4,), np.array([1, 1, 1, 4], np.int64))
    node = Node("g", "AffineGrid", (Value("theta", "f32", (1, 2, 3)), size), (Value("y", "f32", (1, 1, 4, 2)),),
                {"align_corners": 1}, 20)
    with pytest.raises(Unsupported) as caught:
        kernel_for(node)
    assert caught.value.feature == "not written" and "ONNX Runtime at 1" in caught.value.detail


def test_an_affine_grid_of_a_size_known_only_when_the_model_runs_is_refused() -> None:
    node = Node("g", "AffineGrid", (Value("theta", "f32", (2, 2, 3)), Value("size", "i64", (4,))),
                (Value("y", "f32", (2, 5, 7, 2)),), {}, 20)
    with pytest.raises(Unsupported) as caught:
        kernel_for(node)
    assert caught.value.feature == "dynamic shape"
