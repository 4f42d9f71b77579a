"""A convolution whose vector lanes are its output channels: strided, pointwise, grouped ones, the
stem, and small images.

    if channels_last.fits(w, group):          # the lines of y = Conv(x, w, b), x padded as `win` needs:
        wb = channels_last.weights(kernel, node.name, w, group)
        channels_last.conv(kernel, padded_input(kernel, xs, win, "0"), wb, bs, ys, win)

With G groups of M output and C input channels each, and the output channels cut into blocks of
B (`block`):

    wb[g, j, c, k, l]          = w[g*M + j*B + l, c, k]                    (at import: derived)
    t[n, o, g*M + j*B + l]     = b[g*M + j*B + l]
    t[n, o, g*M + j*B + l]    += xpad[n, g*C + c, o*s + k*d] * wb[g, j, c, k, l]
    y[n, m, o]                 = t[n, o, m]

The direct form (ops/linear.py) makes an output row its vector: a stride-2 convolution then reads
its input with gaps along the row, and a 7x7 image's row fills 7 of AVX-512's 16 lanes. Here every
read of the input is one element, broadcast, whatever the stride and the image's size, the
weights are read contiguously, and the lanes count output channels, a multiple of the vector in
most models: the heuristic pass's register tile is output positions by vectors of channels, as in
ONNX Runtime's NCHWc convolutions (MLAS) and oneDNN's blocked ones. The output is accumulated in a
temporary with the channels innermost and written back to y's layout once, a small pass beside the
product's multiply-adds.

The weights are blocked by B channels so that the vectors that one step of the tile reads are
adjacent and a block's are one stream through memory for the prefetcher, where with the channels
whole they are a whole row of channels apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .nodes import Array, Derived, Kernel, Nest, Value, affine

if TYPE_CHECKING:
    from .ops.linear import Window

MIN_CHANNELS = 16  # output channels per group: fewer make a vector narrower than AVX-512's
BLOCKS = (32, 16, 8)  # channels per block of the weights, the widest that divides a group's


def fits(w: Value, group: int) -> bool:
    """Whether the Conv by `w` in `group` groups is computed this way: constant weights (blocked at
    import) and enough output channels per group to fill vectors."""
    return w.constant is not None and w.rank >= 3 and w.shape[0] // group >= MIN_CHANNELS


def block(channels: int) -> int:
    """Output channels per block of the weights: the widest of BLOCKS that divides `channels`, or
    all of them, whose last vector is then a tail of fewer lanes."""
    return next((b for b in BLOCKS if channels % b == 0), channels)


def blocked_weights(w: np.ndarray, group: int) -> np.ndarray:
    """wb[g, j, c, k..., l] = w[g*M + j*B + l, c, k...] for M = w's channels per group, B = block(M)."""
    channels_out, channels_in, *taps = w.shape
    per_out = channels_out // group
    size = block(per_out)
    grouped = w.reshape(group, per_out // size, size, channels_in, *taps)
    return np.ascontiguousarray(np.moveaxis(grouped, 2, -1))


def weights(kernel: Kernel, node_name: str, w: Value, group: int) -> Array:
    """Declare the blocked weights of the constant `w` as a derived input of `kernel`."""
    value = blocked_weights(w.constant, group)
    kernel.notes.append("Output channels as the vector lanes: `wb` is the weights blocked by output channels at "
                        "import (model.json's `constants`).")
    return kernel.derived_input(Value(f"{w.name}.channels_last", w.dtype, value.shape), Derived(
        value, (w.name,), f"{node_name}'s weights blocked by {value.shape[-1]} output channels"), "wb")


def conv(kernel: Kernel, source: Array, wb: Array, bs: Array | None, ys: Array, win: Window) -> None:
    """The lines of `ys` = Conv(x, w, `bs`) over `win`: `source` is x padded as `win` needs, `wb`
    w's blocked weights (`weights`)."""
    batch, channels = ys.shape[:2]
    group, blocks, per_in = wb.shape[:3]
    size = wb.shape[-1]
    per_out = blocks * size
    t = kernel.temporary("t", ys.dtype, (batch, *win.outputs, channels))
    init = Nest()
    everywhere = init.all(t.shape)
    kernel.loop(init.sizes, t.at(everywhere), "=", bs.at([everywhere[-1]]) if bs else "0")
    line = Nest()
    n, g, j = line.over(batch), line.over(group), line.over(blocks)
    positions = line.all(win.outputs)
    lane = line.over(size)
    c = line.over(per_in)
    taps = line.all(win.kernel)
    channel = affine([(g, per_out), (j, size), (lane, 1)])
    kernel.loop(line.sizes, t.at([n, *positions, channel]), "+=",
                f"{source.at([n, affine([(g, per_in), (c, 1)]), *win.reads(positions, taps)])} * "
                f"{wb.at([g, j, c, *taps, lane])}")
    line = Nest()
    n, m = line.over(batch), line.over(channels)
    positions = line.all(win.outputs)
    kernel.loop(line.sizes, ys.at([n, m, *positions]), "=", t.at([n, *positions, m]))
