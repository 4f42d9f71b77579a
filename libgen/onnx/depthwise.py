"""A depthwise convolution whose vector lanes are blocks of its channels.

    if depthwise.fits(w, group, win):         # the lines of y = Conv(x, w, b), one channel a group
        wb = depthwise.weights(kernel, node.name, w)
        depthwise.conv(kernel, xs, wb, bs, ys, win)

With C channels in blocks of B (`BLOCK`), J = C / B of them, and x padded as `win` needs:

    wb[j, k, l]                = w[j*B + l, 0, k]                           (at import: derived)
    xb[n, j, i + begin, l]     = x[n, j*B + l, i]                 (0 where the padding is)
    t[n, j, o, l]              = b[j*B + l]
    t[n, j, o, l]             += xb[n, j, o*s + k*d, l] * wb[j, k, l]
    y[n, j*B + l, o]           = t[n, j, o, l]

The direct form (ops/linear.py) makes an output row its vector: 7 positions of AVX-512's 16 lanes
at 7x7, and at stride 2 each vector gathered from a row read with gaps. Here every read of the
input and the weights is a whole vector of channels, whatever the stride, as in ONNX Runtime's
NCHWc depthwise kernels (MLAS): the price is a pass that blocks the input (which the direct form
spends padding it) and one that writes the result back, both over as many elements as the
product's outputs and inputs, where the product makes 9 multiply-adds per output of a 3x3 window.
The temporaries keep a block's positions and lanes in one dimension, as channels_last.py's do.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .nodes import Array, Derived, Kernel, Nest, Value, affine

if TYPE_CHECKING:
    from .ops.linear import Window

BLOCK = 16  # channels a block: AVX-512's vector of f32
SHORT_ROW = 16  # output rows under one vector of AVX-512, which the direct form fills in part


def fits(w: Value, group: int, win: Window) -> bool:
    """Whether the Conv by `w` in `group` groups over `win` is computed this way: one input and one
    output channel a group, constant weights (blocked at import), channels in whole blocks, and
    output rows shorter than a vector. Measured with the heuristic pass on an AVX-512 Xeon
    (bench/conv_shapes.py): at rows of 28 the direct form is even with ONNX Runtime."""
    channels = w.shape[0]
    return w.constant is not None and w.rank >= 3 and group == channels and w.shape[1] == 1 \
        and channels % BLOCK == 0 and win.outputs[-1] < SHORT_ROW


def blocked_weights(w: np.ndarray) -> np.ndarray:
    """wb[j, k..., l] = w[j*B + l, 0, k...] for B = BLOCK."""
    channels, _, *taps = w.shape
    return np.ascontiguousarray(np.moveaxis(w.reshape(channels // BLOCK, BLOCK, *taps), 1, -1))


def weights(kernel: Kernel, node_name: str, w: Value) -> Array:
    """Declare the blocked weights of the constant `w` as a derived input of `kernel`."""
    value = blocked_weights(w.constant)
    kernel.notes.append("Channels as the vector lanes: `wb` is the depthwise weights blocked by channels at import "
                        "(model.json's `constants`).")
    return kernel.derived_input(Value(f"{w.name}.depthwise", w.dtype, value.shape), Derived(
        value, (w.name,), f"{node_name}'s depthwise weights blocked by {BLOCK} channels"), "wb")


def conv(kernel: Kernel, x: Array, wb: Array, bs: Array | None, ys: Array, win: Window) -> None:
    """The lines of `ys` = Conv(`x`, w, `bs`) over `win`, `wb` w's blocked weights (`weights`)."""
    batch, blocks = ys.shape[0], wb.shape[0]
    extents, outputs = tuple(win.extents), tuple(win.outputs)
    xb = kernel.temporary("xb", x.dtype, (batch, blocks, math.prod(extents) * BLOCK))
    t = kernel.temporary("t", ys.dtype, (batch, blocks, math.prod(outputs) * BLOCK))

    def flat(array: Array, shape: tuple[int, ...], n: str, j: str, spatial: list[list[tuple[str, int]]],
             lane: str, begins: tuple[int, ...] | None = None) -> str:
        """array[n, j, the flat index of the spatial position (each a sum of terms) and the lane]."""
        steps = [math.prod(shape[d + 1:]) * BLOCK for d in range(len(shape))]
        terms = [(ref, coef * step) for dim, step in zip(spatial, steps, strict=True) for ref, coef in dim]
        constant = sum(b * step for b, step in zip(begins or (0,) * len(shape), steps, strict=True))
        return array.at([n, j, affine([*terms, (lane, 1)], constant)])

    if any(win.begins) or extents != x.shape[2:]:  # the padding's zeros
        line = Nest()
        kernel.loop(line.sizes, xb.at(line.all(xb.shape)), "=", "0")
    line = Nest()
    n, j = line.over(batch), line.over(blocks)
    inputs, lane = line.all(x.shape[2:]), line.over(BLOCK)
    kernel.loop(line.sizes, flat(xb, extents, n, j, [[(i, 1)] for i in inputs], lane, tuple(win.begins)), "=",
                x.at([n, affine([(j, BLOCK), (lane, 1)]), *inputs]))
    line = Nest()
    n, j = line.over(batch), line.over(blocks)
    positions, lane = line.all(outputs), line.over(BLOCK)
    kernel.loop(line.sizes, flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane), "=",
                bs.at([affine([(j, BLOCK), (lane, 1)])]) if bs else "0")
    line = Nest()
    n, j = line.over(batch), line.over(blocks)
    positions, lane = line.all(outputs), line.over(BLOCK)
    taps = line.all(win.kernel)
    reads = [[(o, s), (k, d)] for o, k, s, d in zip(positions, taps, win.strides, win.dilations, strict=True)]
    kernel.loop(line.sizes, flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane), "+=",
                f"{flat(xb, extents, n, j, reads, lane)} * {wb.at([j, *taps, lane])}")
    # back along the output's rows, each row's block of channels read whole, as channels_last.py's
    line = Nest()
    n, j = line.over(batch), line.over(blocks)
    rows, lane = line.all(outputs[:-1]), line.over(BLOCK)
    positions = [*rows, line.over(outputs[-1])]
    kernel.loop(line.sizes, ys.at([n, affine([(j, BLOCK), (lane, 1)]), *positions]), "=",
                flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane))
