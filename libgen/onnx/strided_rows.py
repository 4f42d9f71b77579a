"""A convolution strided along its rows, in the direct form, reading its input split into phases.

    if strided_rows.fits(w, win):             # the direct form of y = Conv(x, w, b), y holding b:
        wp = strided_rows.weights(kernel, node.name, w, win)
        source = padded_input(kernel, xs, win, "0", strided_rows.extents(win))
        strided_rows.accumulate(kernel, strided_rows.phases(kernel, source, win), wp, ys, win, group)

The direct form makes a row of output positions its vector. With a stride s along the row, the
positions o of one vector read the input at o*s + k for tap k: every s-th element, a gather of
scalar loads. Split into phases, xp[.., p, j] = xpad[.., j*s + p], the same reads are
xp[.., k mod s, o + k div s]: one contiguous vector for each tap. With the row's taps k = i*s + p
(zero weights filling them to whole strides, at import), phases and taps are two loops of one
accumulation line, whose tile the heuristic pass keeps in registers over all of them:

    wp[m, c, .., i*s + p] = w[m, c, .., i*s + p], 0 past w's taps         (at import: derived)
    xp[n, c, .., p, j]    = xpad[n, c, .., j*s + p]                       (one pass over the input)
    y[n, m, .., o]       += xp[n, c, .., p, o + i] * wp[m, c, .., i*s + p]

The stems of ResNet-50 (7x7 stride 2: 8 taps for 7), SqueezeNet and ShuffleNet (3x3 stride 2: 4
for 3) have rows too long and channels too few for channels as lanes (channels_last.py): this is
their form. A line per phase would need no zero taps, but each would pass over y again, and a
stem's y is larger than the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .nodes import Array, Derived, Kernel, Nest, Value, affine, grouped_product

if TYPE_CHECKING:
    from .ops.linear import Window


def fits(w: Value, win: Window) -> bool:
    """Whether the direct form of a convolution by `w` over `win` reads by phases: constant weights
    (filled at import), a stride along its rows (the last spatial dimension), undilated there."""
    return w.constant is not None and bool(win.strides) and win.strides[-1] > 1 and win.dilations[-1] == 1


def _steps(win: Window) -> int:
    """Taps of the row per phase: its taps rounded up to whole strides."""
    return -(-win.kernel[-1] // win.strides[-1])


def extents(win: Window) -> tuple[int, ...]:
    """The padded input's spatial shape: the window's, its rows filled with zeros to whole strides
    and to the last window's zero taps."""
    stride = win.strides[-1]
    reach = (win.outputs[-1] - 1 + _steps(win)) * stride
    return (*win.extents[:-1], -(-max(win.extents[-1], reach) // stride) * stride)


def padded_weights(w: np.ndarray, stride: int) -> np.ndarray:
    """`w` with zero taps after its row's last, to whole strides."""
    taps = w.shape[-1]
    return np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, -(-taps // stride) * stride - taps)])


def weights(kernel: Kernel, node_name: str, w: Value, win: Window) -> Array:
    """Declare the constant `w`, its rows' taps filled to whole strides, as a derived input of `kernel`."""
    value = padded_weights(w.constant, win.strides[-1])
    kernel.notes.append("Strided rows read by phases: `wp` is the weights with zero taps to whole strides "
                        "(model.json's `constants`).")
    return kernel.derived_input(Value(f"{w.name}.phases", w.dtype, value.shape), Derived(
        value, (w.name,), f"{node_name}'s weights with zero taps to {value.shape[-1]} along the rows"), "wp")


def phases(kernel: Kernel, source: Array, win: Window) -> Array:
    """The temporary xp[.., p, j] = `source`[.., j*s + p] of `source`, the padded input, whose rows
    are whole strides long (`extents`)."""
    stride = win.strides[-1]
    *outer, row = source.shape
    split = kernel.temporary(f"{source.name}_phases", source.dtype, (*outer, stride, row // stride))
    line = Nest()
    index = line.all(split.shape)
    *leading, phase, position = index
    kernel.loop(line.sizes, split.at(index), "=", source.at([*leading, affine([(position, stride), (phase, 1)])]))
    return split


def accumulate(kernel: Kernel, split: Array, wp: Array, ys: Array, win: Window, group: int) -> None:
    """The accumulation line of y = conv(x, w) over `win` in `group` groups, reading `split`
    (`phases`) and `wp` (`weights`); y already holds its start (the bias, or zeros)."""
    stride = win.strides[-1]
    line = Nest()
    n, positions, c, channel_out, channel_in = grouped_product(line, ys.shape[0], group, wp.shape[0] // group,
                                                               win.outputs, wp.shape[1])
    outer_taps = line.all(win.kernel[:-1])
    phase, step = line.over(stride), line.over(_steps(win))
    rows = [affine([(o, s), (k, d)]) for o, k, s, d in zip(positions[:-1], outer_taps, win.strides[:-1],
                                                            win.dilations[:-1], strict=True)]
    read = split.at([n, channel_in, *rows, phase, affine([(positions[-1], 1), (step, 1)])])
    weight = wp.at([channel_out, c, *outer_taps, affine([(step, stride), (phase, 1)])])
    kernel.loop(line.sizes, ys.at([n, channel_out, *positions]), "+=", f"{read} * {weight}")
