"""A 3-row convolution as Winograd's minimal filtering F(4, 3) along its rows.

    if winograd.fits(x, w, win, group):       # the lines of y = Conv(x, w, b):
        us = winograd.weights(kernel, node.name, w)
        winograd.conv_rows(kernel, padded_input(kernel, xs, win, "0", winograd.extents(win)), us, bs, ys, win)

Three filter rows g over six input rows d give four output rows as AT ((G g) * (BT d)): six
products where the direct form has twelve. Along a convolution's rows, for each output channel k,
input channel c and column tap j, the products of the six transformed rows a are a matrix product
over (c, j), as the direct convolution's are over (c, row tap, j):

    v[n, t, a, c, col]  = sum over i of BT[a][i] * x[n, c, 4t + i, col]       (in the kernel)
    u[a, k, c, j]       = sum over r of G[a][r] * w[k, c, r, j]                (at import: derived)
    m[n, t, a, k, o]   += u[a, k, c, j] * v[n, t, a, c, o * stride + j * dilation]
    y[n, k, 4t + i, o]  = sum over a of AT[i][a] * m[n, t, a, k, o] + b[k]

Half the direct form's multiply-adds; the transforms are sums with small integer factors, each
element of x and y touched by a few. The columns stay direct, so every line reads and writes
along a row: each vectorises, and a tile of m accumulates in registers as a direct convolution's
does. The temporaries are laid out tile by tile, so that the loops over images and tiles fuse:
one tile's v and m are small whatever the image's size, and stay on the stack.

The weights' transform is exact in float64 and rounded once. The result differs from the direct
sum's by a few roundings of the transformed values (the points 0, +-1, +-2 keep the factors
small): a few times the direct sum's error, within float32's tolerance of ONNX Runtime's.

Worth it when the matrix product dominates: its reductions long enough that the transforms cost
little beside them (`MIN_REDUCTION`), and the 4-row tiles wasting few rows (`MAX_WORK`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from .nodes import Array, Derived, Kernel, Nest, Value, affine

if TYPE_CHECKING:
    from .ops.linear import Window

ROWS = 4  # output rows per tile: F(4, 3)
TAPS = 3
POINTS = ROWS + TAPS - 1
# Lavin and Gray's F(4, 3) at the points 0, 1, -1, 2, -2 and infinity
BT = ((4, 0, -5, 0, 1, 0),
      (0, -4, -4, 1, 1, 0),
      (0, 4, -4, -1, 1, 0),
      (0, -2, -1, 2, 1, 0),
      (0, 2, -1, -2, 1, 0),
      (0, 4, 0, -5, 0, 1))
G = tuple(tuple(Fraction(v) for v in row) for row in (
    (Fraction(1, 4), 0, 0),
    (Fraction(-1, 6), Fraction(-1, 6), Fraction(-1, 6)),
    (Fraction(-1, 6), Fraction(1, 6), Fraction(-1, 6)),
    (Fraction(1, 24), Fraction(1, 12), Fraction(1, 6)),
    (Fraction(1, 24), Fraction(-1, 12), Fraction(1, 6)),
    (0, 0, 1)))
AT = ((1, 1, 1, 1, 1, 0),
      (0, 1, -1, 2, -2, 0),
      (0, 1, 1, 4, 4, 0),
      (0, 1, -1, 8, -8, 1))
MIN_REDUCTION = 16  # input channels x column taps, and output channels x column taps
MAX_WORK = 0.75  # the matrix product's multiply-adds over the direct form's, at most
# input channels from which it beats channels as lanes (channels_last.py) where that form fits too:
# its product tiles one row of positions, a weaker tile than the lanes' that its halved
# multiply-adds repay only over long reductions. Heuristic pass, AVX-512 Xeon, one node each
# (bench/conv_shapes.py): at 32-64 channels the lanes' form took 0.50-0.87 of its time
# (SqueezeNet's 3x3 expands at 27x27 and 13x13), at 128 it took 1.2x (ResNet-50's at 28x28)
MIN_CHANNELS_BESIDE_LANES = 128
# output positions along a row from which it beats channels as lanes when its transforms are repaid:
# the product's multiply-adds per element that they touch, channels in x out / (in + out), at least
# LANES_ROW_PRODUCTS. Inception v1's 3x3 64->192 at 56x56 (48) took 3.7 ms so, 6.6 ms as lanes
# (`--fuse`, the model's own run). Fewer, and its rows in NCHW cost the convolutions around it
# their blocks (blocked.py) more than it saves: ResNet-50's 64->64 (32) at 56x56 as lanes took the
# model from 34.3 to 32.6 ms (median of 3 alternating profiles), SqueezeNet's 16->64 (13) at 55x55
# from 3.12 to 2.63 ms, its first two fire modules then in blocks through their Concats
LANES_ROW = 32
LANES_ROW_PRODUCTS = 40
# multiply-adds per transformed weight (tiles x output columns), at least, when the transformed
# weights are more than a private cache holds (STREAMED_BYTES): they are twice the direct form's,
# read from memory at every call (a model's other weights evict them), and a small image uses each
# too few times to repay reading them. In ResNet-50 (AVX-512 Xeon, heuristic pass, `--fuse`): at
# 7x7 (2 tiles of 7 columns: 14 uses) its 512-channel 3x3 read 18.9 MB of them a call and ran at
# 81 GFLOP/s; at 14x14 (56 uses) its 256-channel 3x3 took 1.43 ms a call, 1.06 ms as channels as
# lanes; at 28x28 (196 uses) its 128-channel one 0.87 ms, 0.91 ms as lanes
MIN_REUSE = 64
STREAMED_BYTES = 1 << 20
FLOATS = ("f32", "f64")


def fits(x: Value, w: Value, win: Window, group: int, lanes: bool = False) -> bool:
    """Whether the Conv of `x` by the constant `w` over `win` is computed this way: 2-D, one group,
    three rows of taps at stride and dilation 1, a float dtype, long reductions, few wasted rows,
    each transformed weight used often enough unless they stay in cache; and, where channels as
    lanes would compute it too (`lanes`), enough input channels, or long rows and enough channels in and out."""
    if w.constant is None or x.rank != 4 or group != 1 or x.dtype not in FLOATS or win.kernel[0] != TAPS \
            or win.strides[0] != 1 or win.dilations[0] != 1:
        return False
    channels_out, channels_in, _, columns = w.shape
    rows = win.outputs[0]
    tiles = -(-rows // ROWS)
    return channels_in * columns >= MIN_REDUCTION and channels_out * columns >= MIN_REDUCTION \
        and POINTS * tiles <= MAX_WORK * TAPS * rows \
        and (tiles * win.outputs[1] >= MIN_REUSE or POINTS * w.constant.nbytes // TAPS <= STREAMED_BYTES) \
        and (not lanes or channels_in >= MIN_CHANNELS_BESIDE_LANES
             or win.outputs[-1] >= LANES_ROW
             and channels_in * channels_out >= LANES_ROW_PRODUCTS * (channels_in + channels_out))


def transformed_weights(w: np.ndarray) -> np.ndarray:
    """u[a, k, c, j] = sum over r of G[a][r] w[k, c, r, j], in float64, rounded once to w's dtype."""
    g = np.array(G, dtype=np.float64)
    return np.einsum("ar,kcrj->akcj", g, w.astype(np.float64)).astype(w.dtype)


def extents(win: Window) -> tuple[int, int]:
    """The spatial shape of the padded input: every tile reads six rows, zeros past the input and
    its padding."""
    return ROWS * _tiles(win) + TAPS - 1, win.extents[1]


def _tiles(win: Window) -> int:
    return -(-win.outputs[0] // ROWS)


def weights(kernel: Kernel, node_name: str, w: Value) -> Array:
    """Declare the transformed weights of the constant `w` as a derived input of `kernel`."""
    channels_out, channels_in, _, columns = w.shape
    value = Value(f"{w.name}.winograd", w.dtype, (POINTS, channels_out, channels_in, columns))
    kernel.notes.append("Winograd F(4, 3) along the rows: `u` is the weights transformed at import "
                        "(model.json's `constants`).")
    return kernel.derived_input(value, Derived(transformed_weights(w.constant), (w.name,), f"{node_name}'s weights "
                                               "transformed for Winograd F(4, 3) along the rows"), "u")


def conv_rows(kernel: Kernel, source: Array, u: Array, bs: Array | None, ys: Array, win: Window) -> None:
    """The lines of `ys` = Conv(x, w, `bs`) over `win` (one that `fits`): `source` is x padded to
    `extents(win)`, `u` w's transformed weights (`weights`)."""
    batch, channels_in, _, columns_in = source.shape
    _, channels_out, _, columns = u.shape
    rows_out, columns_out = win.outputs
    tiles = _tiles(win)
    v = kernel.temporary("v", source.dtype, (batch, tiles, POINTS, channels_in, columns_in))
    m = kernel.temporary("m", ys.dtype, (batch, tiles, POINTS, channels_out, columns_out))
    for a in range(POINTS):
        line = Nest()
        n, t, c, col = line.all((batch, tiles, channels_in, columns_in))
        rows = [source.at([n, c, affine([(t, ROWS)], i), col]) for i in range(POINTS)]
        kernel.loop(line.sizes, v.at([n, t, a, c, col]), "=", _combination(BT[a], rows))
    init = Nest()
    everywhere = m.at(init.all(m.shape))
    kernel.loop(init.sizes, everywhere, "=", "0")
    line = Nest()
    n, t, a, k, o = line.all(m.shape)
    c, j = line.over(channels_in), line.over(columns)
    column = affine([(o, win.strides[1]), (j, win.dilations[1])])
    kernel.loop(line.sizes, m.at([n, t, a, k, o]), "+=", f"{u.at([a, k, c, j])} * {v.at([n, t, a, c, column])}")
    for i in range(min(ROWS, rows_out)):  # fewer than 4 rows: one tile, partly used
        line = Nest()
        n, t, k, o = line.all((batch, -(-(rows_out - i) // ROWS), channels_out, columns_out))
        value = _combination(AT[i], [m.at([n, t, a, k, o]) for a in range(POINTS)])
        kernel.loop(line.sizes, ys.at([n, k, affine([(t, ROWS)], i), o]), "=",
                    f"{value} + {bs.at([k])}" if bs else value)


def _combination(factors: Sequence[int], terms: Sequence[str]) -> str:
    """The sum of factors[i] * terms[i] over the factors that are not 0, as `.dojo` text."""
    text = ""
    for i, factor in enumerate(factors):
        if not factor:
            continue
        operand = terms[i] if abs(factor) == 1 else f"{abs(factor)} * {terms[i]}"
        text += f" {'-' if factor < 0 else '+'} {operand}" if text else f"{'-' if factor < 0 else ''}{operand}"
    return text
