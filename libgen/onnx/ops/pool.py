"""Pools: MaxPool, AveragePool, LpPool and their Global forms, and LRN (a sum over neighbouring
channels). The window arithmetic is linear.py's, shared with Conv.

    check_node("AveragePool", {"x": normal(1, 2, 7, 9)}, {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0],
                                                          "count_include_pad": 0})

A pool of a small window (at most MAX_UNROLLED_TAPS taps: 2x2, 3x3) is one line that combines
the window's taps in one expression, `y = max(max(x[..], x[..]), ..)`; a larger one is the output
initialised by its own line, then one reduction line over the output's loops and the window's
taps. Padding reads a temporary filled with the reduction's neutral padding (-inf for max, 0 for
sums).
"""

from __future__ import annotations

import math
from functools import reduce
from itertools import product

from ..nodes import Array, Kernel, Nest, Node, Unsupported, number
from ..registry import operator
from .linear import Window, affine, checked, embedded, padded_input, window

# p of an Lp pool -> what each element adds to the sum, and the root of the sum, both exact
LP = {1: ("abs({x})", "{s}"), 2: ("{x} * {x}", "sqrt({s})")}
# taps of a window combined in one expression, not a reduction: a row of outputs is then computed
# in registers and stored once, where a reduction updates it in memory at every tap. On an AVX-512
# Xeon (heuristic pass) Inception v1's 3x3 MaxPool at 528x13x13 took 29 us so, as ONNX Runtime
# does, against 90 us as a reduction whose row the heuristic pass accumulates in registers (its
# initial value stored, then loaded back before the store left the core) and 265 us without
MAX_UNROLLED_TAPS = 9
COMBINE = {"max=": "max({a}, {b})", "min=": "min({a}, {b})", "+=": "{a} + {b}"}


def pool_window(node: Node) -> Window:
    """The window of MaxPool, AveragePool or LpPool, from kernel_shape and the shared attributes."""
    (x,), y = node.inputs[:1], node.outputs[0]
    if node.attr("kernel_shape") is None:
        raise Unsupported("dynamic shape", "kernel_shape is required")
    return checked(window(node, x.shape[2:], node.attr("kernel_shape"), bool(node.attr("ceil_mode", 0))), y)


def global_window(node: Node) -> Window:
    """The window of a Global pool: the whole spatial extent."""
    spatial = node.inputs[0].shape[2:]
    ones, zeros = (1,) * len(spatial), (0,) * len(spatial)
    return Window(spatial, spatial, ones, ones, zeros, zeros, ones)


def reduce_window(kernel: Kernel, source: Array, target: Array, win: Window, start: str, assign: str,
                  term: str = "{x}") -> None:
    """target[n, c, o] = start, then target[n, c, o] ASSIGN term(source[n, c, o*s+k*d]) over the taps k;
    for a small window, target[n, c, o] = the taps' terms combined by ASSIGN's operation."""
    if math.prod(win.kernel) <= MAX_UNROLLED_TAPS:
        line = Nest()
        outer = line.all(target.shape[:-len(win.kernel)] if win.kernel else target.shape)
        positions = line.all(win.outputs)
        terms = [term.format(x=source.at([*outer, *win.reads_at(positions, tap)]))
                 for tap in product(*map(range, win.kernel))]
        value = reduce(lambda a, b: COMBINE[assign].format(a=a, b=b), terms)
        kernel.loop(line.sizes, target.at([*outer, *positions]), "=", value)
        return
    init = Nest()
    kernel.loop(init.sizes, target.at(init.all(target.shape)), "=", start)
    line = Nest()
    outer = line.all(target.shape[:-len(win.kernel)] if win.kernel else target.shape)
    positions = line.all(win.outputs)
    taps = line.all(win.kernel)
    read = source.at([*outer, *win.reads(positions, taps)])
    kernel.loop(line.sizes, target.at([*outer, *positions]), assign, term.format(x=read))


def rewrite(kernel: Kernel, target: Array, expression: str) -> None:
    """target = expression(target) elementwise, `{y}` standing for the element."""
    line = Nest()
    access = target.at(line.all(target.shape))
    kernel.loop(line.sizes, access, "=", expression.format(y=access))


def pool(node: Node, win: Window, fill: str, start: str, assign: str, term: str = "{x}") -> tuple[Kernel, Array]:
    """The kernel of a pool reducing each window of the padded input into the output."""
    kernel = Kernel(node.op.lower())
    xs = kernel.input(node.inputs[0], "x")
    ys = kernel.output(node.outputs[0])
    reduce_window(kernel, padded_input(kernel, xs, win, fill), ys, win, start, assign, term)
    return kernel, ys


def only_first_output(node: Node) -> None:
    if len(node.outputs) > 1:
        raise Unsupported("control flow", "MaxPool's Indices output is an argmax")


@operator("MaxPool")
def max_pool(node: Node) -> Kernel:
    only_first_output(node)
    return pool(node, pool_window(node), "-inf", "-inf", "max=")[0]


@operator("GlobalMaxPool")
def global_max_pool(node: Node) -> Kernel:
    return pool(node, global_window(node), "-inf", "-inf", "max=")[0]


@operator("AveragePool")
def average_pool(node: Node) -> Kernel:
    """The sum of each window over the number of elements it covers: the whole window, or with
    count_include_pad=0 only those inside the input, and never those that ceil_mode adds past the
    padding. A varying count is itself a window sum, over a mask of ones where elements count."""
    win = pool_window(node)
    kernel, ys = pool(node, win, "0", "0", "+=")
    include = bool(node.attr("count_include_pad", 0))
    counted = [(0, min(b + i + e, x)) if include else (b, b + i)
               for b, i, e, x in zip(win.begins, win.inputs, win.ends, win.extents, strict=True)]
    if all(hi - lo == x for (lo, hi), x in zip(counted, win.extents, strict=True)):
        rewrite(kernel, ys, f"{{y}} / {number(math.prod(win.kernel), ys.dtype)}")
        return kernel
    mask = embedded(kernel, "mask", ys.dtype, win.extents, "0", [lo for lo, _ in counted],
                    [hi - lo for lo, hi in counted], lambda _: "1")
    count = kernel.temporary("count", ys.dtype, win.outputs)
    reduce_window(kernel, mask, count, win, "0", "+=")
    line = Nest()
    index = line.all(ys.shape)
    kernel.loop(line.sizes, ys.at(index), "=", f"{ys.at(index)} / {count.at(index[2:])}")
    return kernel


def lp(node: Node, win: Window) -> Kernel:
    p = node.attr("p", 2)
    if p not in LP:
        raise Unsupported("function", f"an Lp pool with p={p} needs a power the format does not have")
    term, root = LP[p]
    kernel, ys = pool(node, win, "0", "0", "+=", term)
    if root != "{s}":
        rewrite(kernel, ys, root.format(s="{y}"))
    return kernel


@operator("LpPool")
def lp_pool(node: Node) -> Kernel:
    return lp(node, pool_window(node))


@operator("GlobalLpPool")
def global_lp_pool(node: Node) -> Kernel:
    return lp(node, global_window(node))


@operator("GlobalAveragePool")
def global_average_pool(node: Node) -> Kernel:
    win = global_window(node)
    kernel, ys = pool(node, win, "0", "0", "+=")
    rewrite(kernel, ys, f"{{y}} / {number(math.prod(win.kernel), ys.dtype)}")
    return kernel


@operator("LRN")
def lrn(node: Node) -> Kernel:
    """y = x / (bias + alpha/size * sum of x^2 over the channels c-(size-1)//2 .. c+size//2)^beta,
    the sum read from a channel-padded temporary of squares; the power is exp(beta * log(z)),
    exact for the positive z that a positive bias gives."""
    (x,), (y,) = node.inputs, node.outputs
    size = node.attr("size")
    alpha, beta, bias = (float(node.attr(name, default)) for name, default in
                         (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    kernel = Kernel("lrn")
    xs, ys = kernel.input(x, "x"), kernel.output(y)
    below = (size - 1) // 2
    squares = embedded(kernel, "squares", x.dtype, (x.shape[0], x.shape[1] + size - 1, *x.shape[2:]), "0",
                       (0, below, *[0] * (x.rank - 2)), x.shape, lambda i: f"{xs.at(i)} * {xs.at(i)}")
    sums = kernel.temporary("sums", y.dtype, y.shape)
    init = Nest()
    kernel.loop(init.sizes, sums.at(init.all(y.shape)), "=", "0")
    line = Nest()
    n, c, *rest = line.all(y.shape)
    j = line.over(size)
    kernel.loop(line.sizes, sums.at([n, c, *rest]), "+=", squares.at([n, affine([(c, 1), (j, 1)]), *rest]))
    line = Nest()
    index = line.all(y.shape)
    base = f"{number(bias, y.dtype)} + {number(alpha / size, y.dtype)} * {sums.at(index)}"
    power = {1.0: f"({base})", 0.5: f"sqrt({base})"}.get(beta, f"exp({number(beta, y.dtype)} * log({base}))")
    kernel.loop(line.sizes, ys.at(index), "=", f"{xs.at(index)} / {power}")
    return kernel
