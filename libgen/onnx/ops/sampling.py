"""Sampling: Resize, nearest and linear, whose output elements are weighted sums of input elements,
written as loop nests whose read indices are affine in their loops; and AffineGrid, the sampling
positions of an affine transformation (which GridSample would read: indirection).

    check_node("Resize", {"x": normal(1, 2, 5, 7), "scales": np.array([1, 1, 2, 2], np.float32)},
               {"mode": "linear"}, constants=("scales",))

Along one axis, output position o reads the input at a few positions with weights (`taps_at`:
ONNX's coordinate transformation, then the nearest position or the two around it, clamped to the
input as ONNX's edge padding does). For a scale of P/Q the pattern repeats every P outputs: the
outputs of one phase, o = P*q + p, read positions Q*q + constant with constant weights, except
near the edges. So each axis is cut into segments (`segments`): a phase's run of outputs over which
every tap's position moves by one step and keeps its weight. A loop nest per combination of the
axes' segments writes its box of the output: 4 for nearest doubling of an image, 16 for bilinear
(the edge rows and columns read one input position). The coordinates are computed in float32 as
ONNX Runtime does, so that a position that falls on a rounding tie falls the same way.

Not written: cubic, tf_crop_and_resize (a region of interest, and values outside it),
antialiased downsampling, keep_aspect_ratio_policy other than stretch, opset 10's Resize, and
linear Resize of integers (which rounds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product

import numpy as np

from ..nodes import Kernel, Nest, Node, Unsupported, Value, affine, axis, number
from ..registry import operator
from .layout import expect

MODES = ("nearest", "linear")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MOST_NESTS = 64  # loop nests of one kernel, beyond which a Resize is refused
MOST_PERIOD = 8  # the longest period of phases tried along an axis
MOST_LENGTH = 1 << 16  # outputs along one axis: each is looked at once at import
WEIGHT_TOLERANCE = 1e-6
Tap = tuple[int, float]  # an input position and its weight


@dataclass(frozen=True)
class Segment:
    """`count` output positions from `start` by `stride` along one axis; each reads the taps
    (input position at the first output, its step per output, weight)."""

    count: int
    start: int
    stride: int
    taps: tuple[tuple[int, int, float], ...]


def taps_at(o: int, length_in: int, length_out: int, scale: float, mode: str, transform: str,
            nearest: str) -> tuple[Tap, ...]:
    """What output position `o` reads along an axis of `length_in` resized to `length_out` by
    `scale`: positions in increasing order, weights not 0."""
    f32 = np.float32
    x, scale_ = f32(o), f32(scale)
    if transform == "align_corners":
        x_in = f32(0) if length_out == 1 else x * f32(length_in - 1) / f32(length_out - 1)
    elif transform == "asymmetric":
        x_in = x / scale_
    elif transform == "pytorch_half_pixel":
        x_in = (x + f32(0.5)) / scale_ - f32(0.5) if length_out > 1 else f32(-0.5)
    elif transform == "half_pixel_symmetric":
        adjustment = f32(length_out) / (scale_ * f32(length_in))
        offset = f32(length_in) / f32(2) * (f32(1) - adjustment)
        x_in = offset + (x + f32(0.5)) / scale_ - f32(0.5)
    else:
        x_in = (x + f32(0.5)) / scale_ - f32(0.5)
    floor = math.floor(x_in)
    ratio = float(x_in) - floor

    def clamped(position: int) -> int:
        return min(max(position, 0), length_in - 1)

    if mode == "nearest":
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
              "ceil": ratio > 0}[nearest]
        return ((clamped(floor + up), 1.0),)
    weights: dict[int, float] = {}
    for position, weight in ((clamped(floor), 1 - ratio), (clamped(floor + 1), ratio)):
        weights[position] = weights.get(position, 0.0) + weight
    return tuple((position, weight) for position, weight in sorted(weights.items()) if weight)


def segments(taps: Sequence[tuple[Tap, ...]]) -> list[Segment]:
    """The outputs of one axis (`taps[o]` for each o) cut into the fewest segments, over the periods
    of phases from 1 to MOST_PERIOD (the smallest period of those giving the fewest)."""
    best: list[Segment] | None = None
    for period in range(1, min(MOST_PERIOD, len(taps)) + 1):
        cut = [segment for phase in range(period) for segment in _runs(taps, phase, period)]
        if best is None or len(cut) < len(best):
            best = cut
    return best or []


def _runs(taps: Sequence[tuple[Tap, ...]], phase: int, period: int) -> list[Segment]:
    """The outputs phase, phase + period, ... cut where a tap's step or weight changes."""
    runs: list[Segment] = []
    for o in range(phase, len(taps), period):
        longer = _extended(runs[-1], taps[o]) if runs else None
        if longer is None:
            runs.append(Segment(1, o, period, tuple((position, 0, weight) for position, weight in taps[o])))
        else:
            runs[-1] = longer
    return runs


def _extended(run: Segment, taps: tuple[Tap, ...]) -> Segment | None:
    """`run` one output longer, reading `taps` there, or None if they break its pattern. Weights
    that differ by float32 rounding of the coordinates only (a scale of 3/2) count as the same."""
    if len(taps) != len(run.taps) or any(not math.isclose(weight, tap[2], abs_tol=WEIGHT_TOLERANCE)
                                         for (_, weight), tap in zip(taps, run.taps, strict=True)):
        return None
    if run.count == 1:
        steps = [position - tap[0] for (position, _), tap in zip(taps, run.taps, strict=True)]
        return replace(run, count=2, taps=tuple((tap[0], step, tap[2]) for tap, step in zip(run.taps, steps,
                                                                                            strict=True)))
    if all(position == tap[0] + run.count * tap[1] for (position, _), tap in zip(taps, run.taps, strict=True)):
        return replace(run, count=run.count + 1)
    return None


@operator("Resize")
def resize(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    mode = node.attr("mode", "nearest")
    transform = node.attr("coordinate_transformation_mode", "half_pixel")
    nearest = node.attr("nearest_mode", "round_prefer_floor")
    if node.opset < 11:
        raise Unsupported("not written", "opset 10's Resize, whose coordinates later opsets changed")
    if mode not in MODES:
        raise Unsupported("not written", f"Resize mode {mode!r}")
    if transform not in TRANSFORMS:
        raise Unsupported("not written", f"coordinate_transformation_mode {transform!r}")
    if nearest not in NEAREST:
        raise Unsupported("invalid", f"nearest_mode {nearest!r} is not an ONNX value")
    if mode == "linear" and x.dtype not in ("f32", "f64"):
        raise Unsupported("not written", "linear Resize of integers, which rounds")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise Unsupported("not written", f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy')!r}")
    scales, lengths = _scales_and_lengths(node, x)
    expect(y, lengths)
    if max(lengths) > MOST_LENGTH:
        raise Unsupported("not written", f"Resize to {max(lengths)} positions along an axis (at most {MOST_LENGTH})")
    if node.attr("antialias", 0) and min(scales) < 1:
        raise Unsupported("not written", "antialiased downsampling")
    per_axis = [segments([taps_at(o, n, length, scale, mode, transform, nearest) for o in range(length)])
                for n, length, scale in zip(x.shape, lengths, scales, strict=True)]
    nests = math.prod(len(cut) for cut in per_axis)
    if nests > MOST_NESTS:
        raise Unsupported("not written", f"Resize to these sizes needs {nests} loop nests (at most {MOST_NESTS})")
    kernel = Kernel("resize")
    xs, ys = kernel.input(x), kernel.output(y)
    for box in product(*per_axis):
        line = Nest()
        loops = [line.over(segment.count) for segment in box]
        terms = []
        for taps in product(*(segment.taps for segment in box)):
            read = xs.at([affine([(loop, step)], first) for loop, (first, step, _) in zip(loops, taps, strict=True)])
            weight = math.prod(tap[2] for tap in taps)
            terms.append(read if weight == 1 else f"{number(weight, y.dtype)} * {read}")
        target = [affine([(loop, segment.stride)], segment.start) for loop, segment in zip(loops, box, strict=True)]
        kernel.loop(line.sizes, ys.at(target), "=", " + ".join(terms))
    return kernel


def _scales_and_lengths(node: Node, x: Value) -> tuple[list[float], list[int]]:
    """Each axis's scale and output length, from the scales or the sizes input on the `axes`."""
    axes = [axis(a, x.rank) for a in node.attr("axes", range(x.rank))]
    given = [value for value in (node.input(2), node.input(3)) if value is not None and math.prod(value.shape)]
    if len(given) != 1:
        raise Unsupported("invalid", "Resize takes one of scales and sizes, not empty")
    (value,) = given
    from_scales = value is node.input(2)
    numbers = value.floats() if from_scales else value.ints()
    if len(numbers) != len(axes) or len(set(axes)) != len(axes) or not all(0 < n < math.inf for n in numbers):
        raise Unsupported("invalid", f"{len(numbers)} {'scales' if from_scales else 'sizes'} {numbers} for axes {axes}")
    scales, lengths = [1.0] * x.rank, list(x.shape)
    for d, given_number in zip(axes, numbers, strict=True):
        # in float32, as ONNX Runtime computes them
        if from_scales:
            scales[d] = float(np.float32(given_number))
            lengths[d] = math.floor(x.shape[d] * scales[d])
        else:
            scales[d], lengths[d] = float(np.float32(given_number) / np.float32(x.shape[d])), int(given_number)
    return scales, lengths


@operator("AffineGrid")
def affine_grid(node: Node) -> Kernel:
    """grid[n, ..., j] = sum over k of theta[n, j, k] * base[..., k], base the output positions'
    coordinates in [-1, 1] (x along the last axis, then y, then z) and 1."""
    theta, size = node.inputs[0], node.input(1)
    (grid,) = node.outputs
    spatial = size.ints()[2:] if size is not None else []
    if theta.rank != 3 or len(spatial) not in (2, 3) or theta.shape[1:] != (len(spatial), len(spatial) + 1):
        raise Unsupported("invalid", f"theta {list(theta.shape)} for an output of size {size.ints() if size else []}")
    expect(grid, [theta.shape[0], *spatial, len(spatial)])
    corners = node.attr("align_corners", 0)
    if corners and 1 in spatial:
        raise Unsupported("not written", "align_corners with an axis of one position, which ONNX's reference "
                                         "places at -1 and ONNX Runtime at 1")
    kernel = Kernel("affinegrid")
    thetas, grids = kernel.input(theta, "theta"), kernel.output(grid)
    for j in range(len(spatial)):
        line = Nest()
        n, *positions = line.all([theta.shape[0], *spatial])
        # the coordinate along each axis, x (the last) first, as ONNX's base grid orders them
        coordinates = [_coordinate(position, length, corners)
                       for position, length in reversed(list(zip(positions, spatial, strict=True)))]
        terms = [f"{thetas.at([n, j, k])} * {coordinate}" for k, coordinate in enumerate(coordinates)]
        kernel.loop(line.sizes, grids.at([n, *positions, j]), "=",
                    " + ".join([*terms, thetas.at([n, j, len(spatial)])]))
    return kernel


def _coordinate(position: str, length: int, corners: int) -> str:
    """Position `position` of `length` in [-1, 1]: the pixels' centres, or with align_corners
    their corners (of two pixels at least)."""
    if corners:
        return f"({position} * 2 / {length - 1} - 1)"
    return f"(({position} * 2 + 1) / {length} - 1)"
