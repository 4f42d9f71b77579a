"""Data-movement operators: each is a copy (or a fill) whose indices are affine in its loops.

    x, y = Value("x", "f32", (3, 5)), Value("y", "f32", (5, 3))
    kernel_for(Node("t", "Transpose", (x,), (y,), {"perm": [1, 0]})).lines  # ['5 3 y[{0},{1}] = x[{1},{0}]']

Two shapes of copy cover them all. A *factored copy* loops over a list of factors and indexes each
side's dimensions as mixed-radix numbers of some of those loops: Transpose, Reshape and its kin
(Flatten, Squeeze, Unsqueeze, Identity, Dropout), Tile, Expand, DepthToSpace and SpaceToDepth. A
*box copy* writes a box of the output from a box of the input read with a start and a step per axis
(or fills it with one value): Concat, Split, Slice, Pad, CenterCropPad, EyeLike, ConstantOfShape.
Range writes its index as a value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise, product

from ..nodes import Array, Kernel, Node, Unsupported, Value, affine, axis, broadcast_shape, number
from ..registry import operator


def mixed_radix(positions: Sequence[int], sizes: Sequence[int]) -> str:
    """The index that the loops at `positions` (most significant first) of `sizes` count through."""
    terms, stride = [], 1
    for p in reversed(positions):
        terms.append((f"{{{p}}}", stride))
        stride *= sizes[p]
    return affine(reversed(terms))


def factored_copy(kernel: Kernel, source: Array, target: Array, factors: Sequence[int],
                  source_dims: Sequence[Sequence[int]], target_dims: Sequence[Sequence[int]]) -> None:
    """One line looping over `factors`; dimension i of each side is the mixed-radix number of the
    factors listed at its position i (no factor: index 0). Factors of 1 get no loop."""
    kept = [f for f, size in enumerate(factors) if size > 1]
    loop_of = {f: d for d, f in enumerate(kept)}
    sizes = [factors[f] for f in kept]

    def indices(dims: Sequence[Sequence[int]]) -> list[str]:
        return [mixed_radix([loop_of[f] for f in dim if f in loop_of], sizes) for dim in dims]

    kernel.loop(sizes, target.at(indices(target_dims)), "=", source.at(indices(source_dims)))


MAX_BORDER = 65_536  # positions of a Pad border that repeats the input, each looked at by the import


@dataclass(frozen=True)
class Run:
    """One axis of a box: `size` positions of the target from `start`, reading the source from
    index `source` on by `step` (0 repeats one element, -1 reflects); `source` None: a fill."""

    size: int
    start: int = 0
    source: int | None = 0
    step: int = 1


def whole(shape: Sequence[int]) -> list[Run]:
    return [Run(n) for n in shape]


def copy_box(kernel: Kernel, target: Array, runs: Sequence[Run], source: Array | str) -> None:
    """Write the box `runs` of `target` from `source` read along the runs, or with the expression
    `source` when it is text (a fill). An empty box writes nothing."""
    if any(run.size < 1 for run in runs):
        return
    # a run of one position needs no loop: its indices are its starts
    loop_of = list(accumulate((run.size > 1 for run in runs), initial=0))

    def index(d: int, start: int, step: int) -> str:
        return affine([(f"{{{loop_of[d]}}}", step)] if runs[d].size > 1 else [], start)

    if isinstance(source, Array):
        source = source.at([index(d, run.source, run.step) for d, run in enumerate(runs)])
    target_index = [index(d, run.start, 1) for d, run in enumerate(runs)]
    kernel.loop([run.size for run in runs if run.size > 1], target.at(target_index), "=", source)


def expect(value: Value, shape: Sequence[int]) -> None:
    """The shape ONNX's rules give must be the graph's: a kernel is written for one shape."""
    if tuple(shape) != value.shape:
        raise Unsupported("dynamic shape", f"`{value.name}` has shape {list(value.shape)} in the graph but "
                                           f"{list(shape)} by the node's inputs and attributes")


def copy_kernel(node: Node, outputs: int = 1) -> tuple[Kernel, Array, list[Array]]:
    """A kernel of the node reading its first input and writing its first `outputs` outputs."""
    kernel = Kernel(node.op.lower())
    xs = kernel.input(node.inputs[0])
    return kernel, xs, [kernel.output(y) for y in node.outputs[:outputs]]


# --- factored copies ---------------------------------------------------------------------------


@operator("Transpose")
def transpose(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    perm = node.attr("perm") or list(reversed(range(x.rank)))
    expect(y, [x.shape[p] for p in perm])
    kernel, xs, (ys,) = copy_kernel(node)
    source_dims: list[list[int]] = [[] for _ in perm]
    for d, p in enumerate(perm):
        source_dims[p] = [d]
    factored_copy(kernel, xs, ys, y.shape, source_dims, [[d] for d in range(y.rank)])
    return kernel


def refinement(a: Sequence[int], b: Sequence[int]) -> list[int] | None:
    """The coarsest factors whose consecutive groups multiply to each dim of `a` and of `b`, or None:
    the cuts (prefix products) of both shapes must form one chain in which each divides the next."""
    cuts = sorted({1, *accumulate(a, lambda p, n: p * n), *accumulate(b, lambda p, n: p * n)})
    if any(high % low for low, high in pairwise(cuts)):
        return None
    return [high // low for low, high in pairwise(cuts)]


def groups(shape: Sequence[int], factors: Sequence[int]) -> list[list[int]]:
    """The consecutive factors that make up each dim of `shape` (none for a dim of 1)."""
    result, f = [], 0
    for size in shape:
        group, covered = [], 1
        while covered < size:
            covered *= factors[f]
            group.append(f)
            f += 1
        result.append(group)
    return result


def unrefinable(op: str, a: Sequence[int], b: Sequence[int]) -> str:
    """Why a reshape without a common refinement needs division: two dims whose steps (the elements
    a step along them moves over) do not divide one another."""
    (i, p), (j, q) = next(((i, p), (j, q)) for (i, p), (j, q) in product(enumerate(strides(a)), enumerate(strides(b)))
                          if max(p, q) % min(p, q))
    return (f"{op} {list(a)} -> {list(b)}: a step along dim {i} of the input moves over {p} elements and one along "
            f"dim {j} of the output over {q}; neither divides the other, so the shapes have no common refinement "
            f"into loop factors: an input index is an output element's flat position divided by {p}, and the dims "
            f"after it take the remainder. Integer division and modulo are not affine (indices have +, -, * by a "
            f"literal only)")


def strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def reshaped(node: Node, shape: Sequence[int]) -> Kernel:
    """The copy of the node's input into its output of `shape`, the same elements in row-major order."""
    x, y = node.inputs[0], node.outputs[0]
    expect(y, shape)
    factors = refinement(x.shape, y.shape)
    if factors is None:
        raise Unsupported("function", unrefinable(node.op, x.shape, y.shape))
    kernel, xs, (ys,) = copy_kernel(node)
    factored_copy(kernel, xs, ys, factors, groups(x.shape, factors), groups(y.shape, factors))
    return kernel


@operator("Reshape")
def reshape(node: Node) -> Kernel:
    x = node.inputs[0]
    requested = node.input(1).ints() if node.opset >= 5 else list(node.attr("shape"))
    # 0 copies the input's dim unless allowzero asks for a literal 0; -1 takes what is left
    shape = [x.shape[d] if n == 0 and not node.attr("allowzero", 0) else n for d, n in enumerate(requested)]
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        shape[shape.index(-1)] = math.prod(x.shape) // known if known else 0
    return reshaped(node, shape)


@operator("Flatten")
def flatten(node: Node) -> Kernel:
    x = node.inputs[0]
    at = node.attr("axis", 1)
    at = at + x.rank if at < 0 else at
    return reshaped(node, [math.prod(x.shape[:at]), math.prod(x.shape[at:])])


def axes_of(node: Node, rank: int) -> list[int] | None:
    """Squeeze's and Unsqueeze's axes: an attribute before opset 13, an optional input from it."""
    if node.opset < 13:
        axes = node.attr("axes")
    else:
        axes = node.input(1).ints() if node.input(1) is not None else None
    return None if axes is None else sorted(axis(a, rank) for a in axes)


@operator("Squeeze")
def squeeze(node: Node) -> Kernel:
    x = node.inputs[0]
    axes = axes_of(node, x.rank)
    return reshaped(node, [n for d, n in enumerate(x.shape) if (n != 1 if axes is None else d not in axes)])


@operator("Unsqueeze")
def unsqueeze(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    axes = axes_of(node, y.rank) or []
    dims = iter(x.shape)
    return reshaped(node, [1 if d in axes else next(dims) for d in range(x.rank + len(axes))])


@operator("Identity")
def identity(node: Node) -> Kernel:
    return reshaped(node, node.inputs[0].shape)


@operator("Dropout")
def dropout(node: Node) -> Kernel:
    if len(node.outputs) > 1:
        raise Unsupported("dtype", "the optional mask output is a bool tensor; the format has no bool")
    training = node.input(2)
    if node.opset < 7:
        training_mode = not node.attr("is_test", 0)
    else:  # a training_mode that is not a constant may be true
        training_mode = training is not None and (training.constant is None or any(training.ints()))
    if training_mode:
        raise Unsupported("random", "in training mode Dropout drops elements at random")
    return reshaped(node, node.inputs[0].shape)


@operator("Tile")
def tile(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    repeats = node.input(1).ints()
    expect(y, [n * r for n, r in zip(x.shape, repeats, strict=True)])
    kernel, xs, (ys,) = copy_kernel(node)
    # output dim d counts (repeat, element) as loops 2d, 2d+1
    factors = [size for pair in zip(repeats, x.shape, strict=True) for size in pair]
    factored_copy(kernel, xs, ys, factors, [[2 * d + 1] for d in range(x.rank)],
                  [[2 * d, 2 * d + 1] for d in range(x.rank)])
    return kernel


@operator("Expand")
def expand(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    expect(y, broadcast_shape(x.shape, node.input(1).ints()))
    kernel, xs, (ys,) = copy_kernel(node)
    lead = y.rank - x.rank
    factored_copy(kernel, xs, ys, y.shape, [[] if n == 1 else [lead + d] for d, n in enumerate(x.shape)],
                  [[d] for d in range(y.rank)])
    return kernel


def space_depth(node: Node, depth_shape: Sequence[int], crd: bool, to_space: bool) -> Kernel:
    """DepthToSpace (`to_space`) and SpaceToDepth, which is its DCR inverse: with loops n, c, h, i,
    w, j over [N, C, H, b, W, b], space is [n, c, h*b+i, w*b+j] and depth [n, channel, h, w] with
    channel (i*b+j)*C+c (DCR) or c*b*b+i*b+j (CRD)."""
    n, channels, height, width = depth_shape
    block = node.attr("blocksize")
    kernel, xs, (ys,) = copy_kernel(node)
    factors = [n, channels // (block * block), height, block, width, block]
    space = [[0], [1], [2, 3], [4, 5]]
    depth = [[0], [1, 3, 5] if crd else [3, 5, 1], [2], [4]]
    factored_copy(kernel, xs, ys, factors, *((depth, space) if to_space else (space, depth)))
    return kernel


@operator("DepthToSpace")
def depth_to_space(node: Node) -> Kernel:
    x, block = node.inputs[0], node.attr("blocksize")
    n, c, h, w = x.shape
    expect(node.outputs[0], [n, c // (block * block), h * block, w * block])
    return space_depth(node, x.shape, node.attr("mode", "DCR") == "CRD", to_space=True)


@operator("SpaceToDepth")
def space_to_depth(node: Node) -> Kernel:
    x, block = node.inputs[0], node.attr("blocksize")
    n, c, h, w = x.shape
    expect(node.outputs[0], [n, c * block * block, h // block, w // block])
    return space_depth(node, node.outputs[0].shape, crd=False, to_space=False)


# --- box copies --------------------------------------------------------------------------------


@operator("Concat")
def concat(node: Node) -> Kernel:
    y = node.outputs[0]
    at = axis(node.attr("axis"), y.rank)
    kernel = Kernel(node.op.lower())
    ys = kernel.output(y)
    offsets = accumulate((x.shape[at] for x in node.inputs), initial=0)
    for x, offset in zip(node.inputs, offsets, strict=False):
        if 0 not in x.shape:  # an empty input has no array to declare
            runs = whole(x.shape)
            runs[at] = Run(x.shape[at], offset)
            copy_box(kernel, ys, runs, kernel.input(x))
    first = node.inputs[0].shape
    expect(y, [*first[:at], sum(x.shape[at] for x in node.inputs), *first[at + 1:]])
    return kernel


def split_sizes(node: Node, length: int) -> list[int]:
    """Split's part sizes: the `split` attribute (before opset 13) or input, else `num_outputs`
    chunks of ceil(length / n) with a smaller last one (opset 18), else equal parts per output."""
    given = node.attr("split") if node.opset < 13 else node.input(1)
    if given is not None:
        return list(given) if node.opset < 13 else given.ints()
    parts = node.attr("num_outputs", len(node.outputs))
    chunk = -(-length // parts)
    return [chunk] * (parts - 1) + [length - chunk * (parts - 1)]


@operator("Split")
def split(node: Node) -> Kernel:
    x = node.inputs[0]
    at = axis(node.attr("axis", 0), x.rank)
    sizes = split_sizes(node, x.shape[at])
    kernel, xs, ys = copy_kernel(node, len(node.outputs))
    if len(sizes) != len(ys):
        raise Unsupported("dynamic shape", f"Split into {len(sizes)} parts has {len(ys)} outputs")
    for y, target, size, offset in zip(node.outputs, ys, sizes, accumulate(sizes, initial=0), strict=False):
        expect(y, [*x.shape[:at], size, *x.shape[at + 1:]])
        runs = whole(y.shape)
        runs[at] = Run(size, 0, offset)
        copy_box(kernel, target, runs, xs)
    return kernel


def slice_run(length: int, start: int, end: int, step: int) -> Run:
    """The positions Slice takes from an axis of `length`, clamped as ONNX defines."""
    start, end = (v + length if v < 0 else v for v in (start, end))
    if step > 0:
        start, end = min(max(start, 0), length), min(max(end, 0), length)
    else:
        start, end = min(max(start, 0), length - 1), min(max(end, -1), length - 1)
    return Run(max(0, -((start - end) // step)), 0, start, step)


@operator("Slice")
def slice_(node: Node) -> Kernel:
    x = node.inputs[0]
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends, axes, steps = (v if v is None else v.ints() for v in (node.input(i) for i in range(1, 5)))
    axes = axes if axes is not None else range(len(starts))
    steps = steps if steps is not None else [1] * len(starts)
    runs = whole(x.shape)
    for a, start, end, step in zip(axes, starts, ends, steps, strict=True):
        d = axis(a, x.rank)
        runs[d] = slice_run(x.shape[d], start, end, step)
    expect(node.outputs[0], [run.size for run in runs])
    kernel, xs, (ys,) = copy_kernel(node)
    copy_box(kernel, ys, runs, xs)
    return kernel


def pad_source(position: int, length: int, mode: str) -> int | None:
    """The input index Pad reads at `position` relative to the input's first element (None: the fill)."""
    if 0 <= position < length:
        return position
    if mode == "edge":
        return min(max(position, 0), length - 1)
    if mode == "wrap":
        return position % length
    if mode == "reflect":
        period = 2 * (length - 1)
        folded = position % period if period else 0
        return folded if folded < length else period - folded
    return None


def pad_runs(length: int, before: int, after: int, mode: str) -> list[Run]:
    """One axis of Pad: the leading border, the interior and the trailing border of the output, each
    cut into runs along which the input index moves by a constant step. Negative pads crop first,
    and the borders repeat the cropped input (as ONNX Runtime's wrap shows)."""
    first, kept = max(-before, 0), length - max(-before, 0) - max(-after, 0)
    if kept < 1 and mode != "constant":
        raise Unsupported("not written", f"Pad mode {mode!r} of an axis cropped to nothing")
    before, after = max(before, 0), max(after, 0)
    runs = [Run(kept, before, first, 1)] if kept > 0 else []
    for low, high in ((0, before), (before + kept, before + kept + after)):
        if high == low:
            continue
        if mode == "constant":
            runs.append(Run(high - low, low, None))
            continue
        if high - low > MAX_BORDER:  # each position of a border that repeats the input is looked at
            raise Unsupported("not written", f"Pad mode {mode!r} with a border of more than {MAX_BORDER:,}")
        sources = [first + pad_source(position - before, kept, mode) for position in range(low, high)]
        runs += straight_runs(low, sources)
    return sorted(runs, key=lambda run: run.start)


def straight_runs(start: int, sources: Sequence[int | None]) -> list[Run]:
    """Runs from target position `start` on reading the `sources` indices (all None: one fill), each
    as long as its index keeps one step."""
    if sources and sources[0] is None:
        return [Run(len(sources), start, None)]
    runs, i = [], 0
    while i < len(sources):
        j, step = i + 1, sources[i + 1] - sources[i] if i + 1 < len(sources) else 1
        while j < len(sources) and sources[j] - sources[j - 1] == step:
            j += 1
        runs.append(Run(j - i, start + i, sources[i], step))
        i = j
    return runs


def padded(kernel: Kernel, xs: Array, ys: Array, widths: Sequence[tuple[int, int]], mode: str, fill: str) -> None:
    """Write `ys` as `xs` padded (or cropped) by `widths` per axis: one box per combination of the
    axes' runs, a fill where any axis is in a constant border."""
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported("not written", f"Pad mode {mode!r}")
    for runs in product(*(pad_runs(n, *width, mode) for n, width in zip(xs.shape, widths, strict=True))):
        copy_box(kernel, ys, runs, fill if any(run.source is None for run in runs) else xs)


def scalar(kernel: Kernel, value: Value, dtype: str) -> str:
    """A one-element input in an expression: a literal when it is a constant, else read from it."""
    if value.constant is not None:
        return number(value.floats()[0], dtype)
    return kernel.input(value, "value").at([0] * value.rank)


@operator("Pad")
def pad(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    kernel, xs, (ys,) = copy_kernel(node)
    if node.opset < 11:
        pads, fill = list(node.attr("pads")), number(node.attr("value", 0.0), y.dtype)
        axes = range(x.rank)
    else:
        pads, value, given = node.input(1).ints(), node.input(2), node.input(3)
        axes = [axis(a, x.rank) for a in given.ints()] if given is not None else range(x.rank)
        fill = number(0, y.dtype) if value is None else scalar(kernel, value, y.dtype)
    widths = [(0, 0)] * x.rank
    for i, d in enumerate(axes):
        widths[d] = (pads[i], pads[i + len(axes)])
    expect(y, [n + before + after for n, (before, after) in zip(x.shape, widths, strict=True)])
    padded(kernel, xs, ys, widths, node.attr("mode", "constant"), fill)
    return kernel


@operator("CenterCropPad")
def center_crop_pad(node: Node) -> Kernel:
    x, y = node.inputs[0], node.outputs[0]
    shape = node.input(1).ints()
    axes = [axis(a, x.rank) for a in node.attr("axes", range(x.rank))]
    widths = [(0, 0)] * x.rank
    for d, size in zip(axes, shape, strict=True):
        # the smaller half of the difference goes first, whether it is cropped or padded
        before = (size - x.shape[d]) // 2 if size >= x.shape[d] else -((x.shape[d] - size) // 2)
        widths[d] = (before, size - x.shape[d] - before)
    expect(y, [n + before + after for n, (before, after) in zip(x.shape, widths, strict=True)])
    kernel, xs, (ys,) = copy_kernel(node)
    padded(kernel, xs, ys, widths, "constant", number(0, y.dtype))
    return kernel


@operator("EyeLike")
def eye_like(node: Node) -> Kernel:
    y = node.outputs[0]
    expect(y, node.inputs[0].shape)
    kernel = Kernel(node.op.lower())
    ys = kernel.output(y)
    copy_box(kernel, ys, whole(y.shape), number(0, y.dtype))
    k = node.attr("k", 0)
    row, column = max(0, -k), max(0, k)
    length = min(y.shape[0] - row, y.shape[1] - column)
    if length > 0:
        kernel.loop([length], ys.at([affine([("{0}", 1)], row), affine([("{0}", 1)], column)]), "=", number(1, y.dtype))
    return kernel


@operator("ConstantOfShape")
def constant_of_shape(node: Node) -> Kernel:
    y = node.outputs[0]
    expect(y, node.inputs[0].ints())
    value = node.attr("value")
    kernel = Kernel(node.op.lower())
    ys = kernel.output(y)
    copy_box(kernel, ys, whole(y.shape), number(0 if value is None else value.reshape(-1)[0].item(), y.dtype))
    return kernel


@operator("Range")
def range_(node: Node) -> Kernel:
    y = node.outputs[0]
    if any(v.constant is None for v in node.inputs):
        raise Unsupported("data-dependent range", "Range's length comes from start, limit and delta, which are "
                                                  "not all constants")
    start, limit, delta = (v.floats()[0] for v in node.inputs)
    expect(y, [max(math.ceil((limit - start) / delta), 0)])
    kernel = Kernel(node.op.lower())
    ys = kernel.output(y)
    kernel.loop(y.shape, ys.at(["{0}"]), "=", f"{number(start, y.dtype)} + {{0}} * {number(delta, y.dtype)}")
    return kernel
