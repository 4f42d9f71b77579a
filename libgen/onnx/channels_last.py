"""A convolution whose vector lanes are its output channels: strided, pointwise, grouped ones, the
stem, and small images.

    if channels_last.fits(w, group, win):     # the lines of y = Conv(x, w, b), x padded as `win` needs:
        wb = channels_last.weights(kernel, node.name, w, group)
        channels_last.conv(kernel, padded_input(kernel, xs, win, "0"), wb, bs, ys, win)

With G groups of M output and C input channels each, and the output channels cut into blocks of
B (`block`):

    wb[g, j, c, k, l]          = w[g*M + j*B + l, c, k]                    (at import: derived)
    t[n, g*J + j, o, l]        = b[(g*J + j)*B + l]                 (J = M / B blocks a group)
    t[n, g*J + j, o, l]       += xpad[n, g*C + c, o*s + k*d] * wb[g, j, c, k, l]
    y[n, i*B + l, o]           = t[n, i, o, l]

The direct form (ops/linear.py) makes an output row its vector: a stride-2 convolution then reads
its input with gaps along the row, and a 7x7 image's row fills 7 of AVX-512's 16 lanes. Here every
read of the input is one element, broadcast, whatever the stride and the image's size, the
weights are read contiguously, and the lanes count output channels, a multiple of the vector in
most models: the heuristic pass's register tile is output positions by vectors of channels, as in
ONNX Runtime's NCHWc convolutions (MLAS) and oneDNN's blocked ones. The output is accumulated in a
temporary with the channels innermost and written back to y's layout once, a small pass beside the
product's multiply-adds: the temporary is blocked as the weights are (ONNX Runtime's NCHWc layout),
so that the pass back reads one block of channels, which stays in cache, at a time.

The loops run over the blocks of channels, then the output positions (`_rows_outside`: the first
dimension of positions outside the blocks instead when the input is the larger operand), so that
the operand that stays in a core's cache is the smaller one.

When B does not divide a group's channels (SqueezeNet's 1000 classes in blocks of 32), zero
channels fill the weights' last block, and that block's channels are a product of their own.

The weights are blocked by B channels so that the vectors that one step of the tile reads are
adjacent and a block's are one stream through memory for the prefetcher, where with the channels
whole they are a whole row of channels apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dojo_ir.tree import DTYPE_BYTES

from .nodes import Array, Derived, Kernel, Nest, Value, affine

if TYPE_CHECKING:
    from .ops.linear import Window

MIN_CHANNELS = 16  # output channels per group: fewer make a vector narrower than AVX-512's
BLOCKS = (32, 16, 8)  # channels per block of the weights, the widest that divides a group's
PADDED_BLOCKS = (32, 16)  # blocks of whole AVX-512 vectors, to which a group's channels may be padded
PADDING = 8  # when the zero channels that fill its last block are at most 1/PADDING of the group's
LONG_ROW = 64  # output positions along a row from which the direct form's vectors are full: it keeps them
SHORT_ROW = 16  # and under which even a group of channels that no block divides does better here
IMAGE_CHANNELS = 4  # input channels of a model's stem, at most (an image's 3): this form at every row length
# for a stem whose window has at most this many taps (3x3); a larger one (7x7) only when no window along
# the channels reads its output (Node.rows_read): ResNet-50's 7x7 stem took 0.9 ms so against 1.0 ms
# direct, the model 33.0 against 34.2 ms; ZFNet-512's, whose LRN reads it in rows, 5% slower so
STEM_TAPS = 9
ROW_BYTES = 16 * 1024  # a row of the output over its channels, at most, to loop over rows outside (half an L1)
DERIVED_SUFFIX = ".channels_last"  # of the blocked weights' name: blocked.py finds such products by it


def fits(w: Value, group: int, win: Window, rows_read: bool = False) -> bool:
    """Whether the Conv by `w` in `group` groups over `win` is computed this way: constant weights
    (blocked at import), enough output channels per group to fill vectors, and either an image's
    few input channels (a stem), or output rows short enough that the direct form's vectors along
    them run part empty (7 or 14 positions, of 16 lanes) or with gaps in their reads (a stride). A
    group of channels that no block divides leaves a tail of a few lanes in every tile: then only
    rows shorter than one vector do better.

    Measured with the heuristic pass on an AVX-512 Xeon. One node at a time (bench/conv_shapes.py),
    at rows of 56 and more the two forms are even or the direct one ahead (a 7x7 stem of 3
    channels: 1.1 against 1.4 ms), at 28 or fewer this one ahead (ResNet's 1x1 at 28x28: 0.42
    against 0.51 ms). In a model its output stays in blocks of channels for the next such
    convolution and the pools between (blocked.py), where the direct form's goes back to rows:
    with rows of 55 and 56 and the stem this way as well, SqueezeNet ran 1.12x and ResNet-50 1.04x
    faster (`--fuse`, the same process, alternating rounds), SqueezeNet's 3x3 stem and its 3x3
    stride 2 MaxPool reading whole vectors of channels where the direct form's pool gathers every
    other column. Rows of 112 and 224 stay direct, and so does a 7x7 stem whose output an LRN reads
    (`rows_read`: ZFNet-512's, 6% slower this way, written back to rows for the LRN) or one whose channels
    make blocks narrower than a vector (ShuffleNet ran 6% slower with its stem of 24 in blocks of 8
    taken, even without)."""
    per_out, row = w.shape[0] // group, win.outputs[-1]
    if w.constant is None or w.rank < 3 or per_out < MIN_CHANNELS:
        return False
    return (group == 1 and w.shape[1] <= IMAGE_CHANNELS and (math.prod(win.kernel) <= STEM_TAPS or not rows_read)
            and block(per_out) in PADDED_BLOCKS) \
        or (row < LONG_ROW and (block(per_out) in BLOCKS or row < SHORT_ROW))


def block(channels: int) -> int:
    """Output channels per block of the weights: the widest of BLOCKS that divides `channels`; else
    the widest of PADDED_BLOCKS whose last block few zero channels fill (SqueezeNet's 1000 classes:
    32 blocks of 32, the last 24 of them zeros, where blocks of 8 would fill half of every vector);
    else all of them, whose last vector is then a tail of fewer lanes."""
    widest = next((b for b in BLOCKS if channels % b == 0), None)
    if widest is not None and widest >= min(PADDED_BLOCKS):
        return widest
    filled = (b for b in PADDED_BLOCKS if b <= channels and padded(channels, b) - channels <= channels // PADDING)
    return next(filled, widest or channels)


def padded(channels: int, size: int) -> int:
    """`channels` rounded up to whole blocks of `size`."""
    return -(-channels // size) * size


def blocked_weights(w: np.ndarray, group: int) -> np.ndarray:
    """wb[g, j, c, k..., l] = w[g*M + j*B + l, c, k...] for M = w's channels per group, B = block(M),
    and 0 for the channels j*B + l >= M that fill the last block."""
    channels_out, channels_in, *taps = w.shape
    per_out = channels_out // group
    size = block(per_out)
    grouped = w.reshape(group, per_out, channels_in, *taps)
    grouped = np.pad(grouped, [(0, 0), (0, padded(per_out, size) - per_out)] + [(0, 0)] * (grouped.ndim - 2))
    grouped = grouped.reshape(group, -1, size, channels_in, *taps)
    return np.ascontiguousarray(np.moveaxis(grouped, 2, -1))


def weights(kernel: Kernel, node_name: str, w: Value, group: int) -> Array:
    """Declare the blocked weights of the constant `w` as a derived input of `kernel`."""
    value = blocked_weights(w.constant, group)
    kernel.notes.append("Output channels as the vector lanes: `wb` is the weights blocked by output channels at "
                        "import (model.json's `constants`).")
    return kernel.derived_input(Value(f"{w.name}{DERIVED_SUFFIX}", w.dtype, value.shape), Derived(
        value, (w.name,), f"{node_name}'s weights blocked by {value.shape[-1]} output channels"), "wb")


def conv(kernel: Kernel, source: Array, wb: Array, bs: Array | None, ys: Array, win: Window) -> None:
    """The lines of `ys` = Conv(x, w, `bs`) over `win`: `source` is x padded as `win` needs, `wb`
    w's blocked weights (`weights`). When zero channels fill each group's last block, the channels
    of that block are a product of their own, with vectors of as many lanes: no multiply-add
    computes a zero channel, and each product's lines stay one nest the heuristic pass can fuse."""
    per_out, size = ys.shape[1] // wb.shape[0], wb.shape[-1]
    whole, tail = divmod(per_out, size)
    for blocks, first, lanes in ((whole, 0, size), (1, whole, tail)):
        if blocks and lanes:
            _product(kernel, source, wb, bs, ys, win, _Blocks(wb.shape[0], per_out, size, first, blocks, lanes))


def _rows_outside(source: Array, wb: Array, win: Window, channels: int) -> int:
    """How many of the outermost output dimensions to loop over outside the blocks of `channels`
    output channels: the first, when the input is larger than the weights and a row of the output
    over all its channels fits ROW_BYTES, so that each core reads its rows of the input once for
    every block of channels and the weights (the smaller) from its cache again; otherwise none, and
    each block's weights stay in cache while the input streams past them. A row of the output is
    what the temporaries of the kernel (the product's, a fused shortcut's) then hold at a time:
    ResNet-50's 1x1 to 256 channels at 56x56 with its shortcut, 57 KiB a row, ran 1.2x slower.
    Twice ROW_BYTES does not pay either (Zen 4, the heuristic pass's programs alone): ResNet-50's
    1x1s of 28 KiB rows (256 to 128 channels at 56x56, 512 to 256 at 28x28) ran 1.04x and 1.03x, the
    stems of ResNet-50 and SqueezeNet 1.01x and 1.00x. (Its 1x1s had run 0.80x and 0.90x while the C
    backend inlined a parallel loop's body and gcc spilled a register tile's accumulator beside a
    ReLU, codegen/c.py: the rows outside had only escaped the spill.)"""
    row = math.prod(win.outputs[1:]) * channels * DTYPE_BYTES[source.dtype]
    return int(len(win.outputs) > 1 and math.prod(source.shape) > math.prod(wb.shape) and row <= ROW_BYTES)


@dataclass(frozen=True)
class _Blocks:
    """Blocks `first`.. of each group's blocks of `size` channels of the weights, `blocks` of
    them, and `lanes` channels of each."""

    group: int
    per_out: int  # output channels a group
    size: int
    first: int
    blocks: int
    lanes: int

    def loops(self, nest: Nest) -> tuple[str, Callable[[str], str]]:
        """Open the groups' and the blocks' loops on `nest`: the temporary's block index, and the
        output channel of a lane's index."""
        if self.first == 0 and self.per_out == self.blocks * self.lanes:  # the groups' blocks are one loop
            index = nest.over(self.group * self.blocks)
            return index, lambda lane: affine([(index, self.lanes), (lane, 1)])
        g, j = nest.over(self.group), nest.over(self.blocks)
        return affine([(g, self.blocks), (j, 1)]), \
            lambda lane: affine([(g, self.per_out), (j, self.size), (lane, 1)], self.first * self.size)


def _product(kernel: Kernel, source: Array, wb: Array, bs: Array | None, ys: Array, win: Window,
             part: _Blocks) -> None:
    batch, per_in = ys.shape[0], wb.shape[2]
    # a block's positions and lanes in one dimension, so that the pass back reads a row of positions
    # as a vector (strided: one lane of each); the format vectorises along the last dimension only
    t = kernel.temporary("t", ys.dtype, (batch, part.group * part.blocks, math.prod(win.outputs) * part.lanes))
    steps = [math.prod(win.outputs[d + 1:]) * part.lanes for d in range(len(win.outputs))]

    def at(n: str, block_index: str, positions: list[str], lane: str) -> str:
        return t.at([n, block_index, affine([*zip(positions, steps, strict=True), (lane, 1)])])

    outer = _rows_outside(source, wb, win, part.group * part.blocks * part.lanes)
    init = Nest()
    n = init.over(batch)
    first = init.all(win.outputs[:outer])
    block_index, channel = part.loops(init)
    positions, lane = [*first, *init.all(win.outputs[outer:])], init.over(part.lanes)
    kernel.loop(init.sizes, at(n, block_index, positions, lane), "=", bs.at([channel(lane)]) if bs else "0")
    line = Nest()
    n = line.over(batch)
    first = line.all(win.outputs[:outer])
    g, j = line.over(part.group), line.over(part.blocks)
    positions, lane = [*first, *line.all(win.outputs[outer:])], line.over(part.lanes)
    c = line.over(per_in)
    taps = line.all(win.kernel)
    kernel.loop(line.sizes, at(n, affine([(g, part.blocks), (j, 1)]), positions, lane), "+=",
                f"{source.at([n, affine([(g, per_in), (c, 1)]), *win.reads(positions, taps)])} * "
                f"{wb.at([g, affine([(j, 1)], part.first), c, *taps, lane])}")
    # back along the output's rows, each row's block of channels (in the first-level cache) read whole
    line = Nest()
    n = line.over(batch)
    first = line.all(win.outputs[:outer])
    block_index, channel = part.loops(line)
    rows = [*first, *line.all(win.outputs[outer:-1])]
    lane = line.over(part.lanes)
    positions = [*rows, line.over(win.outputs[-1])]
    kernel.loop(line.sizes, ys.at([n, channel(lane), *positions]), "=", at(n, block_index, positions, lane))
