"""Products and sliding windows: MatMul, Gemm, Einsum, Conv, ConvTranspose and Col2Im, and the window
arithmetic (output sizes, padding) that the pools share with the convolutions.

    check_node("Conv", {"x": normal(1, 3, 7, 9), "w": normal(4, 3, 3, 2)}, {"pads": [1, 0, 1, 1]})

Every product is written as the library's conv1.dojo is: the output initialised by its own line,
then one accumulation line whose loops are the output's, outermost, and the reduction's, inside;
the tuner reorders them. A window never reads outside its input: padding goes through a temporary
filled with the padding value, into whose interior the input is copied.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import channels_last, depthwise, strided_rows, winograd
from ..nodes import (
    Array,
    Kernel,
    Nest,
    Node,
    Unsupported,
    Value,
    affine,
    border_boxes,
    broadcast,
    broadcast_shape,
    grouped_product,
    number,
)
from ..registry import operator
from .layout import expect
from .layout import strides as row_major

# ---------------------------------------------------------------------------------------------
# Sliding windows, shared with pool.py


@dataclass(frozen=True)
class Window:
    """A window sliding over the spatial dimensions (those after batch and channel): per dimension,
    the input size, the window's size, stride and dilation, the padding before and after, and the
    number of output positions."""

    inputs: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def reach(self) -> tuple[int, ...]:
        """How far into the padded input the last window reaches; with ceil_mode that may pass the
        end of the padding."""
        return tuple((o - 1) * s + (k - 1) * d + 1
                     for o, k, s, d in zip(self.outputs, self.kernel, self.strides, self.dilations, strict=True))

    @property
    def extents(self) -> tuple[int, ...]:
        """The padded temporary's spatial shape: the input after its leading padding, and every window."""
        return tuple(max(b + i, r) for b, i, r in zip(self.begins, self.inputs, self.reach, strict=True))

    def reads(self, outputs: Sequence[str], taps: Sequence[str]) -> list[str]:
        """The spatial indices of the padded input read by output position `outputs` at window tap `taps`."""
        return [affine([(o, s), (k, d)])
                for o, k, s, d in zip(outputs, taps, self.strides, self.dilations, strict=True)]

    def reads_at(self, outputs: Sequence[str], tap: Sequence[int]) -> list[str]:
        """The spatial indices of the padded input read by output position `outputs` at the
        constant window tap `tap`."""
        return [affine([(o, s)], k * d) for o, k, s, d in zip(outputs, tap, self.strides, self.dilations, strict=True)]


def output_size(padded: int, span: int, stride: int, ceil_mode: bool, last_start: int) -> int:
    """Positions of a window of `span` elements along `padded` ones. With ceil_mode a last, partial
    window counts, but only if it starts before `last_start` (inside the input or its leading padding)."""
    if padded < span:
        raise Unsupported("dynamic shape", f"a window of {span} does not fit in {padded} elements")
    size = (padded - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (size - 1) * stride >= last_start:
        size -= 1
    return size


def window(node: Node, inputs: Sequence[int], kernel: Sequence[int], ceil_mode: bool = False) -> Window:
    """The window of a Conv or pool node from its attributes (strides, dilations, pads, auto_pad)."""
    rank = len(inputs)
    strides = tuple(node.attr("strides", [1] * rank))
    dilations = tuple(node.attr("dilations", [1] * rank))
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if max(dilations) > 1:
            # ONNX Runtime rejects this for Conv and, for pools, gives other shapes than ONNX's inference
            raise Unsupported("dynamic shape", f"auto_pad {auto_pad} with dilations {list(dilations)}: "
                                               "ONNX and ONNX Runtime disagree on the output shape")
        outputs = [-(-i // s) for i, s in zip(inputs, strides, strict=True)]
        totals = [max((o - 1) * s + span - i, 0) for o, s, span, i in zip(outputs, strides, spans, inputs, strict=True)]
        begins = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
        ends = [t - b for t, b in zip(totals, begins, strict=True)]
    elif auto_pad in ("NOTSET", "VALID"):
        pads = list(node.attr("pads", [0] * 2 * rank)) if auto_pad == "NOTSET" else [0] * 2 * rank
        if min(pads) < 0:
            raise Unsupported("dynamic shape", f"negative pads {pads}")
        begins, ends = pads[:rank], pads[rank:]
        outputs = [output_size(b + i + e, span, s, ceil_mode, b + i)
                   for b, i, e, span, s in zip(begins, inputs, ends, spans, strides, strict=True)]
    else:
        raise Unsupported("dynamic shape", f"auto_pad {auto_pad!r} is not an ONNX value")
    return Window(tuple(inputs), tuple(kernel), strides, dilations, tuple(begins), tuple(ends), tuple(outputs))


def checked(win: Window, y: Value) -> Window:
    """`win`, after making sure that it gives the graph's output shape."""
    if tuple(win.outputs) != tuple(y.shape[2:]):
        raise Unsupported("dynamic shape", f"the attributes give spatial shape {list(win.outputs)}, "
                                           f"the graph {list(y.shape[2:])}")
    return win


def embedded(kernel: Kernel, name: str, dtype: str, extents: Sequence[int], fill: str, begins: Sequence[int],
             sizes: Sequence[int], value: Callable[[list[str]], str]) -> Array:
    """A temporary of shape `extents` holding `fill`, except in the box of `sizes` at offset `begins`,
    whose element at index i of the box is `value(i)`. The fill is written around the box only, a
    line for each side of it that has any room: filling it all wrote every element twice, a pass
    over the array's interior more (ResNet-50's stem, a MaxPool's padded input of 3.2 MB)."""
    temporary = kernel.temporary(name, dtype, extents)
    for side in border_boxes(extents, begins, sizes):
        line = Nest()
        kernel.loop(line.sizes, temporary.at([affine([(line.over(size), 1)], start) for start, size in side]), "=",
                    fill)
    line = Nest()
    index = line.all(sizes)
    inside = [affine([(i, 1)], b) for i, b in zip(index, begins, strict=True)]
    kernel.loop(line.sizes, temporary.at(inside), "=", value(index))
    return temporary


def padded_input(kernel: Kernel, source: Array, win: Window, fill: str,
                 extents: Sequence[int] | None = None) -> Array:
    """A batch-and-channel input padded on its spatial dimensions as `win` needs, or to `extents`."""
    extents = tuple(extents or win.extents)
    if not any(win.begins) and extents == source.shape[2:]:
        return source
    return embedded(kernel, f"{source.name}_padded", source.dtype, (*source.shape[:2], *extents), fill,
                    (0, 0, *win.begins), source.shape, source.at)


# ---------------------------------------------------------------------------------------------
# Products


@operator("MatMul")
def matmul(node: Node) -> Kernel:
    """numpy's matmul: a 1-D operand is a row (A) or a column (B) whose dimension the result drops;
    the batch dimensions broadcast."""
    (a, b), (y,) = node.inputs, node.outputs
    kernel = Kernel("matmul")
    As, Bs, ys = kernel.input(a, "a"), kernel.input(b, "b"), kernel.output(y)
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    rows = a.shape[-2] if a.rank >= 2 else None
    columns = b.shape[-1] if b.rank >= 2 else None
    depth = a.shape[-1]
    init = Nest()
    kernel.loop(init.sizes, ys.at(init.all(y.shape)), "=", "0")
    line = Nest()
    outer = line.all(batch)
    m = [line.over(rows)] if rows is not None else []
    n = [line.over(columns)] if columns is not None else []
    k = line.over(depth)
    a_index = [*broadcast(a.shape[:-2], outer), *m, k]
    b_index = [*broadcast(b.shape[:-2], outer), k, *n] if b.rank >= 2 else [k]
    kernel.loop(line.sizes, ys.at([*outer, *m, *n]), "+=", f"{As.at(a_index)} * {Bs.at(b_index)}")
    return kernel


@operator("Gemm")
def gemm(node: Node) -> Kernel:
    """Y = alpha * A' B' + beta * C, with A' = A or its transpose (transA), B' likewise, C broadcast."""
    a, b, c = node.input(0), node.input(1), node.input(2)
    (y,) = node.outputs
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if y.dtype in ("i32", "i64") and not (alpha.is_integer() and beta.is_integer()):
        raise Unsupported("dtype", f"integer Gemm with alpha={alpha}, beta={beta} rounds in a way not written")
    kernel = Kernel("gemm")
    As, Bs = kernel.input(a, "a"), kernel.input(b, "b")
    Cs = kernel.input(c, "c") if c is not None and beta != 0 else None
    ys = kernel.output(y)

    def addend(index: list[str]) -> str:
        access = Cs.at(broadcast(c.shape, index))
        return access if beta == 1 else f"{number(beta, y.dtype)} * {access}"

    # with alpha 1 the product accumulates onto C, as the library's conv1 onto its bias: a line after
    # the product would be a loop nest of its own, which keeps the product's tile from staying in registers
    init = Nest()
    index = init.all(y.shape)
    kernel.loop(init.sizes, ys.at(index), "=", addend(index) if Cs is not None and alpha == 1 else "0")
    line = Nest()
    m, n = line.all(y.shape)
    k = line.over(a.shape[0] if node.attr("transA", 0) else a.shape[1])
    a_index = [k, m] if node.attr("transA", 0) else [m, k]
    b_index = [n, k] if node.attr("transB", 0) else [k, n]
    kernel.loop(line.sizes, ys.at([m, n]), "+=", f"{As.at(a_index)} * {Bs.at(b_index)}")
    if alpha != 1:
        line = Nest()
        index = line.all(y.shape)
        scaled = f"{number(alpha, y.dtype)} * {ys.at(index)}"
        kernel.loop(line.sizes, ys.at(index), "=", scaled + (f" + {addend(index)}" if Cs is not None else ""))
    return kernel


def einsum_labels(equation: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand's dimensions and of the output's; an ellipsis becomes labels
    `.0`, `.1`... aligned on the right as its broadcasting dimensions are."""
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks) or not all(re.fullmatch(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*", t) for t in [*terms, right]):
        raise Unsupported("dynamic shape", f"equation {equation!r} does not fit {len(ranks)} operands")
    ellipsis = max((rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True)
                    if "..." in term), default=0)

    def labels(term: str, rank: int) -> list[str]:
        head, dots, tail = term.partition("...")
        count = rank - len(head) - len(tail) if dots else 0
        if count < 0 or len(head) + count + len(tail) != rank:
            raise Unsupported("dynamic shape", f"subscripts {term!r} do not fit a tensor of rank {rank}")
        return [*head, *(f".{j}" for j in range(ellipsis - count, ellipsis)), *tail]

    operands = [labels(term, rank) for term, rank in zip(terms, ranks, strict=True)]
    if arrow:
        output = labels(right, ellipsis + len(right.replace("...", "")))
    else:
        letters = [label for operand in operands for label in operand if not label.startswith(".")]
        output = [f".{j}" for j in range(ellipsis)] + sorted(c for c in set(letters) if letters.count(c) == 1)
    return operands, output


@operator("Einsum")
def einsum(node: Node) -> Kernel:
    """One line over every label, output labels outermost: y[out] += a[..] * b[..] * ...; a label
    repeated within an operand reads its diagonal, and a label of size 1 in an operand broadcasts."""
    (y,) = node.outputs
    operands, output = einsum_labels(node.attr("equation"), [x.rank for x in node.inputs])
    sizes: dict[str, int] = {}
    for x, labels in zip(node.inputs, operands, strict=True):
        for label, size in zip(labels, x.shape, strict=True):
            if sizes.get(label, 1) not in (1, size) and size != 1:
                raise Unsupported("dynamic shape", f"label {label!r} has sizes {sizes[label]} and {size}")
            sizes[label] = max(sizes.get(label, 1), size)
    if len(set(output)) != len(output) or not set(output) <= set(sizes):
        raise Unsupported("dynamic shape", f"equation {node.attr('equation')!r} has an ill-formed output")
    kernel = Kernel("einsum")
    arrays = [kernel.input(x, f"x{i}") for i, x in enumerate(node.inputs)]
    ys = kernel.output(y)
    summed = [label for label in dict.fromkeys(label for labels in operands for label in labels) if label not in output]
    line = Nest()
    refs = {label: line.over(sizes[label]) for label in [*output, *summed]}
    factors = " * ".join(array.at([refs[label] if size != 1 else "0" for label, size in zip(labels, x.shape,
                                                                                          strict=True)])
                         for array, x, labels in zip(arrays, node.inputs, operands, strict=True))
    if summed:
        init = Nest()
        kernel.loop(init.sizes, ys.at(init.all(y.shape)), "=", "0")
    kernel.loop(line.sizes, ys.at([refs[label] for label in output]), "+=" if summed else "=", factors)
    return kernel


# ---------------------------------------------------------------------------------------------
# Convolutions


@operator("Conv")
def conv(node: Node) -> Kernel:
    """y[n, m, o] = B[m] + sum over c in m's group and the window taps k of xpad[n, c, o*s+k*d] * w[m, c, k]."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    (y,) = node.outputs
    group = node.attr("group", 1)
    win = checked(window(node, x.shape[2:], node.attr("kernel_shape", w.shape[2:])), y)
    kernel = Kernel("conv")
    lanes = channels_last.fits(w, group, win, node.rows_read)
    fast = winograd.fits(x, w, win, group, lanes)
    lanes = lanes and not fast
    xs = kernel.input(x, "x")
    if not fast and depthwise.fits(w, group, win):
        wb = depthwise.weights(kernel, node.name, w)
        depthwise.conv(kernel, xs, wb, kernel.input(b, "b") if b is not None else None, kernel.output(y), win)
        return kernel
    phased = not fast and not lanes and strided_rows.fits(w, win)
    ws = winograd.weights(kernel, node.name, w) if fast else channels_last.weights(kernel, node.name, w, group) \
        if lanes else strided_rows.weights(kernel, node.name, w, win) if phased else kernel.input(w, "w")
    bs = kernel.input(b, "b") if b is not None else None
    ys = kernel.output(y)
    if fast:
        winograd.conv_rows(kernel, padded_input(kernel, xs, win, "0", winograd.extents(win)), ws, bs, ys, win)
        return kernel
    source = padded_input(kernel, xs, win, "0", strided_rows.extents(win) if phased else None)
    if lanes:
        channels_last.conv(kernel, source, ws, bs, ys, win)
        return kernel
    split = strided_rows.phases(kernel, source, win) if phased else None
    init = Nest()
    out = init.all(y.shape)
    kernel.loop(init.sizes, ys.at(out), "=", bs.at([out[1]]) if bs else "0")
    if split is not None:  # the product's start next to it, where the heuristic pass can join them
        strided_rows.accumulate(kernel, split, ws, ys, win, group)
        return kernel
    line = Nest()
    n, positions, c, channel_out, channel_in = grouped_product(line, x.shape[0], group, w.shape[0] // group,
                                                               win.outputs, w.shape[1])
    taps = line.all(win.kernel)
    kernel.loop(line.sizes, ys.at([n, channel_out, *positions]), "+=",
                f"{source.at([n, channel_in, *win.reads(positions, taps)])} * {ws.at([channel_out, c, *taps])}")
    return kernel


@operator("ConvTranspose")
def conv_transpose(node: Node) -> Kernel:
    """Each input element scatters x[n, c, i] * w[c, m, k] onto full[n, m, i*s+k*d], a zero-initialised
    temporary of the uncropped output; y is full cropped by the pads (plus the bias)."""
    x, w, b = node.input(0), node.input(1), node.input(2)
    (y,) = node.outputs
    group = node.attr("group", 1)
    inputs, kernel_shape = x.shape[2:], tuple(node.attr("kernel_shape", w.shape[2:]))
    rank = len(inputs)
    strides = tuple(node.attr("strides", [1] * rank))
    dilations = tuple(node.attr("dilations", [1] * rank))
    extra = tuple(node.attr("output_padding", [0] * rank))
    full = tuple((i - 1) * s + (k - 1) * d + 1 + e
                 for i, s, k, d, e in zip(inputs, strides, kernel_shape, dilations, extra, strict=True))
    begins = conv_transpose_begins(node, full, tuple(y.shape[2:]))
    if any(b_ < 0 or b_ + o > f for b_, o, f in zip(begins, y.shape[2:], full, strict=True)):
        raise Unsupported("dynamic shape", f"output {list(y.shape)} is not a crop of the full result {list(full)}")
    kernel = Kernel("convtranspose")
    xs, ws = kernel.input(x, "x"), kernel.input(w, "w")
    bs = kernel.input(b, "b") if b is not None else None
    ys = kernel.output(y)
    direct = not any(begins) and full == tuple(y.shape[2:])
    target = ys if direct else kernel.temporary("full", y.dtype, (*y.shape[:2], *full))
    init = Nest()
    out = init.all(target.shape)
    kernel.loop(init.sizes, target.at(out), "=", bs.at([out[1]]) if bs and direct else "0")
    per_in, per_out = x.shape[1] // group, w.shape[1]
    line = Nest()
    n, g = line.over(x.shape[0]), line.over(group)
    c = line.over(per_in)
    positions = line.all(inputs)
    m = line.over(per_out)
    taps = line.all(kernel_shape)
    channel_in, channel_out = affine([(g, per_in), (c, 1)]), affine([(g, per_out), (m, 1)])
    writes = [affine([(i, s), (k, d)]) for i, k, s, d in zip(positions, taps, strides, dilations, strict=True)]
    kernel.loop(line.sizes, target.at([n, channel_out, *writes]), "+=",
                f"{xs.at([n, channel_in, *positions])} * {ws.at([channel_in, m, *taps])}")
    if not direct:
        line = Nest()
        index = line.all(y.shape)
        crop = target.at([*index[:2], *(affine([(i, 1)], b_) for i, b_ in zip(index[2:], begins, strict=True))])
        kernel.loop(line.sizes, ys.at(index), "=", f"{crop} + {bs.at([index[1]])}" if bs else crop)
    return kernel


@operator("Col2Im")
def col2im(node: Node) -> Kernel:
    """Each column of x, a block of the image, adds onto it: x[n, c*K + k, b] (K positions in a
    block, k one of them, b the block) onto full[n, c, b*s + k*d] per spatial axis, a
    zero-initialised temporary of the padded image; y is full cropped by the pads."""
    x, image, block = node.inputs[0], node.input(1), node.input(2)
    (y,) = node.outputs
    image_shape, block_shape = image.ints(), block.ints()
    rank = len(image_shape)
    strides = tuple(node.attr("strides", [1] * rank))
    dilations = tuple(node.attr("dilations", [1] * rank))
    pads = tuple(node.attr("pads", [0] * 2 * rank))
    padded = [size + before + after for size, before, after in zip(image_shape, pads[:rank], pads[rank:],
                                                                   strict=True)]
    blocks = [(p - (k - 1) * d - 1) // s + 1 if k > 0 else 0
              for p, k, s, d in zip(padded, block_shape, strides, dilations, strict=True)]
    per_block = math.prod(block_shape)
    if x.rank != 3 or len(block_shape) != rank or min(blocks, default=0) < 1 or x.shape[1] % per_block \
            or x.shape[2] != math.prod(blocks):
        raise Unsupported("invalid", f"input {list(x.shape)} is not the columns of blocks {block_shape} of an "
                                     f"image {image_shape} padded by {list(pads)}")
    channels = x.shape[1] // per_block
    expect(y, [x.shape[0], channels, *image_shape])
    kernel = Kernel("col2im")
    xs, ys = kernel.input(x), kernel.output(y)
    direct = not any(pads)
    target = ys if direct else kernel.temporary("full", y.dtype, (x.shape[0], channels, *padded))
    init = Nest()
    kernel.loop(init.sizes, target.at(init.all(target.shape)), "=", "0")
    line = Nest()
    n, c = line.over(x.shape[0]), line.over(channels)
    taps, positions = line.all(block_shape), line.all(blocks)
    column = affine([(c, per_block), *zip(taps, row_major(block_shape), strict=True)])
    writes = [affine([(b, s), (k, d)]) for b, k, s, d in zip(positions, taps, strides, dilations, strict=True)]
    kernel.loop(line.sizes, target.at([n, c, *writes]), "+=",
                xs.at([n, column, affine(zip(positions, row_major(blocks), strict=True))]))
    if not direct:
        line = Nest()
        index = line.all(y.shape)
        kernel.loop(line.sizes, ys.at(index), "=", target.at(
            [*index[:2], *(affine([(i, 1)], before) for i, before in zip(index[2:], pads[:rank], strict=True))]))
    return kernel


def conv_transpose_begins(node: Node, full: tuple[int, ...], outputs: tuple[int, ...]) -> tuple[int, ...]:
    """Where the output starts in the uncropped result: the leading pads, or with output_shape or
    auto_pad SAME_*, ONNX's split of the total padding (the odd element at the end for SAME_UPPER)."""
    rank = len(full)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if node.attr("output_shape") is None and auto_pad in ("NOTSET", "VALID"):
        pads = list(node.attr("pads", [0] * 2 * rank)) if auto_pad == "NOTSET" else [0] * 2 * rank
        return tuple(pads[:rank])
    totals = [f - o for f, o in zip(full, outputs, strict=True)]
    return tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals)
