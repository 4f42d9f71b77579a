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
When B does not divide C (ShuffleNet's 136 channels), the weights' last block is padded with
zero channels and its channels are a product of their own, with vectors of as many lanes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .nodes import Array, Derived, Kernel, Nest, Value, affine, border_boxes

if TYPE_CHECKING:
    from .ops.linear import Window

BLOCK = 16  # channels a block: AVX-512's vector of f32
LANES = 8  # channels whose multiple a depthwise Conv has: the last block's, AVX2's vector
SHORT_ROW = 16  # output rows under one vector of AVX-512, which the direct form fills in part


def fits(w: Value, group: int, win: Window) -> bool:
    """Whether the Conv by `w` in `group` groups over `win` is computed this way: one input and one
    output channel a group, constant weights (blocked at import), channels a multiple of LANES,
    and output rows shorter than a vector. Measured with the heuristic pass on an AVX-512 Xeon
    (bench/conv_shapes.py): at rows of 28 the direct form is ahead (ShuffleNet's at 28x28: 0.108
    against 0.117 ms; its stride 2 from 56x56: 0.230 against 0.287 ms), the pass that blocks the
    input costing more than the product saves; at 14 and 7 this one (0.041 against 0.092 ms)."""
    channels = w.shape[0]
    return w.constant is not None and w.rank >= 3 and group == channels and w.shape[1] == 1 \
        and channels >= BLOCK and channels % LANES == 0 and win.outputs[-1] < SHORT_ROW


def blocked_weights(w: np.ndarray) -> np.ndarray:
    """wb[j, k..., l] = w[j*B + l, 0, k...] for B = BLOCK, and 0 for the channels j*B + l >= C that
    fill the last block."""
    channels, _, *taps = w.shape
    filled = np.pad(w[:, 0], [(0, -channels % BLOCK)] + [(0, 0)] * len(taps))
    return np.ascontiguousarray(np.moveaxis(filled.reshape(-1, BLOCK, *taps), 1, -1))


def weights(kernel: Kernel, node_name: str, w: Value) -> Array:
    """Declare the blocked weights of the constant `w` as a derived input of `kernel`."""
    value = blocked_weights(w.constant)
    kernel.notes.append("Channels as the vector lanes: `wb` is the depthwise weights blocked by channels at import "
                        "(model.json's `constants`).")
    return kernel.derived_input(Value(f"{w.name}.depthwise", w.dtype, value.shape), Derived(
        value, (w.name,), f"{node_name}'s depthwise weights blocked by {BLOCK} channels"), "wb")


def conv(kernel: Kernel, x: Array, wb: Array, bs: Array | None, ys: Array, win: Window) -> None:
    """The lines of `ys` = Conv(`x`, w, `bs`) over `win`, `wb` w's blocked weights (`weights`): the
    whole blocks, then the channels of a last block that zero channels fill."""
    whole, tail = divmod(ys.shape[1], BLOCK)
    for first, blocks, lanes in ((0, whole, BLOCK), (whole, 1, tail)):
        if blocks and lanes:
            _product(kernel, x, wb, bs, ys, win, _Part(first, blocks, lanes))


@dataclass(frozen=True)
class _Part:
    """Blocks `first`.. of the weights, `blocks` of them, and `lanes` channels of each."""

    first: int
    blocks: int
    lanes: int

    def channel(self, j: str, lane: str) -> str:
        return affine([(j, BLOCK), (lane, 1)], self.first * BLOCK)

    def flat(self, array: Array, shape: tuple[int, ...], n: str, j: str, spatial: list[list[tuple[str, int]]],
             lane: str, begins: tuple[int, ...] | None = None) -> str:
        """array[n, j, the flat index of a spatial position (each a sum of terms) and a lane]."""
        steps = [math.prod(shape[d + 1:]) * self.lanes for d in range(len(shape))]
        terms = [(ref, coef * step) for dim, step in zip(spatial, steps, strict=True) for ref, coef in dim]
        constant = sum(b * step for b, step in zip(begins or (0,) * len(shape), steps, strict=True))
        return array.at([n, j, affine([*terms, (lane, 1)], constant)])


def _product(kernel: Kernel, x: Array, wb: Array, bs: Array | None, ys: Array, win: Window, part: _Part) -> None:
    batch, extents, outputs = ys.shape[0], tuple(win.extents), tuple(win.outputs)
    xb = kernel.temporary("xb", x.dtype, (batch, part.blocks, math.prod(extents) * part.lanes))
    t = kernel.temporary("t", ys.dtype, (batch, part.blocks, math.prod(outputs) * part.lanes))
    # the padding's zeros, around the input only: zeroing it all wrote the interior twice (ShuffleNet's
    # stride-2 3x3 over 136 channels at 28x28, the heuristic pass's program: 16.4 us so, 14.0 us not; Zen 4)
    for side in border_boxes(extents, tuple(win.begins), x.shape[2:]):
        line = Nest()
        n, j = line.over(batch), line.over(part.blocks)
        box = [line.over(size) for _, size in side]
        kernel.loop(line.sizes, part.flat(xb, extents, n, j, [[(i, 1)] for i in box], line.over(part.lanes),
                                          tuple(start for start, _ in side)), "=", "0")
    line = Nest()
    n, j = line.over(batch), line.over(part.blocks)
    inputs, lane = line.all(x.shape[2:]), line.over(part.lanes)
    kernel.loop(line.sizes, part.flat(xb, extents, n, j, [[(i, 1)] for i in inputs], lane, tuple(win.begins)), "=",
                x.at([n, part.channel(j, lane), *inputs]))
    line = Nest()
    n, j = line.over(batch), line.over(part.blocks)
    positions, lane = line.all(outputs), line.over(part.lanes)
    kernel.loop(line.sizes, part.flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane), "=",
                bs.at([part.channel(j, lane)]) if bs else "0")
    line = Nest()
    n, j = line.over(batch), line.over(part.blocks)
    positions, lane = line.all(outputs), line.over(part.lanes)
    taps = line.all(win.kernel)
    reads = [[(o, s), (k, d)] for o, k, s, d in zip(positions, taps, win.strides, win.dilations, strict=True)]
    kernel.loop(line.sizes, part.flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane), "+=",
                f"{part.flat(xb, extents, n, j, reads, lane)} * {wb.at([affine([(j, 1)], part.first), *taps, lane])}")
    # back along the output's rows, each row's block of channels read whole, as channels_last.py's
    line = Nest()
    n, j = line.over(batch), line.over(part.blocks)
    rows, lane = line.all(outputs[:-1]), line.over(part.lanes)
    positions = [*rows, line.over(outputs[-1])]
    kernel.loop(line.sizes, ys.at([n, part.channel(j, lane), *positions]), "=",
                part.flat(t, outputs, n, j, [[(o, 1)] for o in positions], lane))
