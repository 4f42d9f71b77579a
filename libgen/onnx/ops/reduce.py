"""Reductions and the normalisations built on them, all written by one reduction writer.

    kernel = kernel_for(Node("r", "ReduceMean", (x, axes), (y,), {"keepdims": 0}))

A statistic (a sum, a maximum, a mean...) is three lines, as the library's hand-written kernels
have them (`dojo_ir/library/layernorm1.dojo`): the accumulator's initial value over the kept
loops, the reduction over the kept loops then the reduced ones, then a finishing line (`/ N`,
`sqrt`, `log`...) over the kept loops again:

    3 mean[{0}] = 0
    3 8 5 mean[{0}] += x[{1},{0},{2}]
    3 mean[{0}] = mean[{0}] / 40

`Reduction` knows which loops a nest has and where a statistic is read; `reduce` writes the three
lines; the Reduce* operators, Softmax, LogSoftmax and the normalisations (Layer, Batch, Instance,
Group, Lp, MeanVariance, RMS) are then a few lines of their own each. Numerics follow ONNX
Runtime's: the softmaxes subtract the maximum first, the normalisations take the variance of
`x - mean` rather than `E[x²] - E[x]²`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..nodes import NUMPY, Array, Kernel, Node, Unsupported, Value, axis, broadcast, loops, number
from ..registry import operator

Index = Sequence[str]  # one index per axis of a loop nest
Expression = Callable[[Index], str]  # an expression at one element of a loop nest


@dataclass(frozen=True)
class Reduction:
    """A reduction of the `axes` (sorted positions) of a loop nest of `shape`. Its lines run the
    kept axes outermost and the reduced ones innermost, so the kept loops are `{0}`..`{k-1}` in
    every line it writes and a statistic is read the same way in all of them."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.shape)) if a not in self.axes)

    @property
    def count(self) -> int:
        """How many elements each statistic reduces."""
        return math.prod(self.shape[a] for a in self.axes)

    def nest(self) -> tuple[list[int], list[str]]:
        """The sizes of the reduction's loops, kept axes first, and the index of each axis in them."""
        order = [*self.kept, *self.axes]
        index = [""] * len(self.shape)
        for position, a in enumerate(order):
            index[a] = f"{{{position}}}"
        return [self.shape[a] for a in order], index

    def temporary(self, kernel: Kernel, name: str, dtype: str) -> Array:
        """A statistic of the kept axes only."""
        return kernel.temporary(name, dtype, [self.shape[a] for a in self.kept])

    def at(self, statistic: Array, index: Index | None = None) -> str:
        """The access of `statistic` at the element of the nest at `index` (by default, the
        reduction's own loops). A statistic holds the kept axes only, or all axes with the
        reduced ones of size 1 (an output with `keepdims`)."""
        index = self.nest()[1] if index is None else index
        if statistic.shape and len(statistic.shape) == len(self.shape):
            return statistic.at(["0" if a in self.axes else index[a] for a in range(len(self.shape))])
        return statistic.at([index[a] for a in self.kept])


def reduce(kernel: Kernel, reduction: Reduction, target: Array, init: str, assign: str, term: Expression,
           finish: Callable[[str], str] | None = None) -> None:
    """Write the statistic `target`: `target = init`, then `target ASSIGN term` over the reduced
    loops, then `target = finish(target)` when there is a finishing step."""
    sizes, index = reduction.nest()
    kept = sizes[:len(reduction.kept)]
    accumulator = reduction.at(target)
    kernel.loop(kept, accumulator, "=", init)
    kernel.loop(sizes, accumulator, assign, term(index))
    if finish is not None:
        kernel.loop(kept, accumulator, "=", finish(accumulator))


def elementwise(kernel: Kernel, shape: Sequence[int], target: Callable[[Index], str], expression: Expression) -> None:
    """One line over every element of `shape`, in its own order."""
    index = loops(len(shape))
    kernel.loop(shape, target(index), "=", expression(index))


def moments(kernel: Kernel, reduction: Reduction, value: Expression, dtype: str,
            centred: bool = True) -> tuple[Array | None, Array]:
    """The mean of `value` and its variance (the variance of `value - mean`, two passes as ONNX
    Runtime's normalisations do); without `centred`, no mean and the mean of `value²` (RMS)."""
    n = reduction.count
    mean = None
    if centred:
        mean = reduction.temporary(kernel, "mean", dtype)
        reduce(kernel, reduction, mean, "0", "+=", value, lambda m: f"{m} / {n}")
    deviation = (lambda i: f"({value(i)} - {reduction.at(mean)})") if centred else value
    var = reduction.temporary(kernel, "var" if centred else "ms", dtype)
    reduce(kernel, reduction, var, "0", "+=", lambda i: f"{deviation(i)} * {deviation(i)}", lambda v: f"{v} / {n}")
    return mean, var


def output(node: Node, position: int) -> Value | None:
    """An optional output, None when the node does not ask for it."""
    return node.outputs[position] if position < len(node.outputs) else None


def floats_only(node: Node, value: Value, why: str) -> None:
    if value.dtype not in ("f32", "f64"):
        raise Unsupported("function", f"{node.op} on {value.dtype} needs {why} in integer arithmetic, "
                                      "which the format does not have")


def reduced_axes(node: Node, rank: int) -> tuple[int, ...]:
    """The Reduce* axes: an attribute up to opset 12 for ReduceSum and 17 for the others, an input
    after; none given means every axis, or none at all with `noop_with_empty_axes`."""
    if node.opset >= (13 if node.op == "ReduceSum" else 18):
        given = node.input(1)
        # an empty axes tensor is known to be empty even when it is not a constant
        axes = [] if given is None or 0 in given.shape else given.ints()
    else:
        axes = list(node.attr("axes", []))
    if not axes:
        return () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({axis(a, rank) for a in axes}))


def same(value: str) -> str:
    return value


def square(value: str) -> str:
    return f"{value} * {value}"


@dataclass(frozen=True)
class Fold:
    """How a Reduce* operator folds its elements: the accumulator's initial value (an infinity is
    replaced by the first element for integers, which have none), the reduction's operator, the
    term reduced, and the finishing step given the accumulator and the count."""

    init: str
    assign: str
    term: Callable[[str], str] = same
    finish: Callable[[str, str], str] | None = None
    needs: str = ""  # the float function it needs, when it needs one


FOLDS = {
    "ReduceSum": Fold("0", "+="),
    "ReduceMean": Fold("0", "+=", finish=lambda a, n: f"{a} / {n}"),
    "ReduceMax": Fold("-inf", "max="),
    "ReduceMin": Fold("inf", "min="),
    "ReduceProd": Fold("1", "*="),
    "ReduceL1": Fold("0", "+=", lambda v: f"abs({v})"),
    "ReduceL2": Fold("0", "+=", square, lambda a, n: f"sqrt({a})", needs="sqrt"),
    "ReduceLogSum": Fold("0", "+=", finish=lambda a, n: f"log({a})", needs="log"),
    "ReduceSumSquare": Fold("0", "+=", square),
}


@operator(*FOLDS)
def reduce_fold(node: Node) -> Kernel:
    """One statistic written straight into the output, at the output's rank (keepdims or not)."""
    x, (y,) = node.inputs[0], node.outputs
    fold = FOLDS[node.op]
    if fold.needs:
        floats_only(node, x, fold.needs)
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    reduction = Reduction(x.shape, reduced_axes(node, x.rank))
    init = fold.init
    if init.endswith("inf") and x.dtype not in ("f32", "f64"):
        init = xs.at(["0" if a in reduction.axes else i for a, i in enumerate(reduction.nest()[1])])
    n = str(reduction.count)
    finish = None if fold.finish is None else (lambda a: fold.finish(a, n))
    reduce(kernel, reduction, ys, init, fold.assign, lambda i: fold.term(xs.at(i)), finish)
    return kernel


@operator("ReduceLogSumExp")
def reduce_log_sum_exp(node: Node) -> Kernel:
    """log(sum(exp(x - max))) + max, so that exp does not overflow."""
    x, (y,) = node.inputs[0], node.outputs
    floats_only(node, x, "exp and log")
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    reduction = Reduction(x.shape, reduced_axes(node, x.rank))
    m = reduction.temporary(kernel, "m", x.dtype)
    reduce(kernel, reduction, m, "-inf", "max=", xs.at)
    reduce(kernel, reduction, ys, "0", "+=", lambda i: f"exp({xs.at(i)} - {reduction.at(m)})",
           lambda s: f"log({s}) + {reduction.at(m)}")
    return kernel


@operator("Softmax", "LogSoftmax")
def softmax(node: Node) -> Kernel:
    """Along `axis` from opset 13; before, over every axis from `axis` on (the input flattened to
    2-D there). Both subtract the maximum before exp, as ONNX Runtime does."""
    return _softmax(node, empty_rows_zero=False)


def softmax_empty_rows_zero(node: Node) -> Kernel:
    """The Softmax `node` with its rows of -inf only (a mask took every position) made 0 instead of
    NaN, as torch's scaled_dot_product_attention writes it: Where(IsNaN(softmax), 0, softmax).
    The maximum is raised to the least finite float, so such a row's exps are 0, and the sum to 1,
    which changes no other row: the sum of a row of finite maximum is at least exp(0) = 1. A row
    holding a NaN or +inf still gives NaN, where the guard would give 0."""
    return _softmax(node, empty_rows_zero=True)


def _softmax(node: Node, empty_rows_zero: bool) -> Kernel:
    (x,), (y,) = node.inputs, node.outputs
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    if node.opset >= 13:
        axes = (axis(node.attr("axis", -1), x.rank),)
    else:
        axes = tuple(range(axis(node.attr("axis", 1), x.rank), x.rank))
    reduction = Reduction(x.shape, axes)
    m = reduction.temporary(kernel, "m", x.dtype)
    s = reduction.temporary(kernel, "s", x.dtype)
    reduce(kernel, reduction, m, "-inf", "max=", xs.at)
    if node.op == "LogSoftmax":
        reduce(kernel, reduction, s, "0", "+=", lambda i: f"exp({xs.at(i)} - {reduction.at(m)})", lambda v: f"log({v})")
        elementwise(kernel, x.shape, ys.at, lambda i: f"{xs.at(i)} - {reduction.at(m, i)} - {reduction.at(s, i)}")
        return kernel
    e = kernel.temporary("e", x.dtype, x.shape)
    largest = np.format_float_scientific(np.finfo(NUMPY[x.dtype]).max, unique=True).replace("+", "")
    lowest = f"(-{largest})"  # the least finite float, as short as it reads back
    maximum = (lambda i: f"max({reduction.at(m, i)}, {lowest})") if empty_rows_zero else \
        (lambda i: reduction.at(m, i))
    elementwise(kernel, x.shape, e.at, lambda i: f"exp({xs.at(i)} - {maximum(i)})")
    reduce(kernel, reduction, s, "0", "+=", e.at)
    total = (lambda i: f"max({reduction.at(s, i)}, 1)") if empty_rows_zero else (lambda i: reduction.at(s, i))
    elementwise(kernel, x.shape, ys.at, lambda i: f"{e.at(i)} / {total(i)}")
    return kernel


def standardise(x: str, mean: str, var: str, epsilon: float, dtype: str) -> str:
    return f"({x} - {mean}) / sqrt({var} + {number(epsilon, dtype)})"


def parameters(kernel: Kernel, node: Node) -> tuple[Array | None, Array | None]:
    """The scale and bias inputs (1 and 2) of a normalisation, None when absent."""
    return tuple(None if value is None else kernel.input(value, name)
                 for value, name in ((node.input(1), "scale"), (node.input(2), "bias")))


def affine(value: str, scale: Array | None, bias: Array | None, index: Callable[[Array], Index]) -> str:
    """`value * scale + bias`, each parameter read at `index(parameter)` and left out when absent."""
    for parameter, op in ((scale, "*"), (bias, "+")):
        if parameter is not None:
            value = f"{value} {op} {parameter.at(index(parameter))}"
    return value


def statistics_dtype(node: Node, x: Value) -> str:
    """The precision of a normalisation's statistics: f64 with stash_type 11, else the input's
    (for an f64 input with the default stash_type 1 too, as ONNX Runtime keeps them); a stash_type
    the format has no type for (bfloat16, float16) cannot be honoured."""
    stash = node.attr("stash_type", 1)
    if stash not in (1, 11):
        raise Unsupported("dtype", f"stash_type {stash}: the statistics would be kept in a type the format lacks")
    return "f64" if stash == 11 else x.dtype


def normalise(node: Node, reduction: Reduction, view: Callable[[Index], Index], epsilon: float,
              parameter: Callable[[Array, Index], Index], centred: bool = True) -> tuple[Kernel, Array | None, Array]:
    """`(x - mean) / sqrt(var + epsilon) * scale + bias` (without `centred`: `x / sqrt(mean(x²) +
    epsilon) * scale`) with the statistics over `reduction`, a loop nest whose element `i` is x's
    and y's element `view(i)`; scale and bias are inputs 1 and 2 when present, read at
    `parameter(array, i)`. Returns the kernel and its statistics."""
    x, y = node.inputs[0], node.outputs[0]
    kernel = Kernel(node.op.lower())
    xs = kernel.input(x)
    scale, bias = parameters(kernel, node)
    ys = kernel.output(y)

    def x_at(i: Index) -> str:
        return xs.at(view(i))

    def standardised(i: Index) -> str:
        if centred:
            return standardise(x_at(i), reduction.at(mean, i), reduction.at(var, i), epsilon, x.dtype)
        return f"{x_at(i)} / sqrt({reduction.at(var, i)} + {number(epsilon, x.dtype)})"

    mean, var = moments(kernel, reduction, x_at, statistics_dtype(node, x), centred)
    elementwise(kernel, reduction.shape, lambda i: ys.at(view(i)),
                lambda i: affine(standardised(i), scale, bias, lambda p: parameter(p, i)))
    return kernel, mean, var


def trailing(node: Node, rank: int) -> tuple[int, ...]:
    """The axes from the `axis` attribute (default -1) on, as LayerNormalization and
    RMSNormalization normalise."""
    return tuple(range(axis(node.attr("axis", -1), rank), rank))


@operator("LayerNormalization")
def layer_normalization(node: Node) -> Kernel:
    """Normalised over the axes from `axis` on, scale and bias broadcast there; optional outputs
    Mean and InvStdDev = 1 / sqrt(var + epsilon), in their own dtype."""
    x = node.inputs[0]
    epsilon = node.attr("epsilon", 1e-5)
    reduction = Reduction(x.shape, trailing(node, x.rank))
    kernel, mean, var = normalise(node, reduction, list, epsilon, lambda p, i: broadcast(p.shape, i))
    sizes = reduction.nest()[0][:len(reduction.kept)]
    mean_out, inv_out = output(node, 1), output(node, 2)
    if mean_out is not None:
        kernel.loop(sizes, reduction.at(kernel.output(mean_out, "mean_out")), "=", reduction.at(mean))
    if inv_out is not None:
        kernel.loop(sizes, reduction.at(kernel.output(inv_out, "inv_std_dev")), "=",
                    f"1 / sqrt({reduction.at(var)} + {number(epsilon, inv_out.dtype)})")
    return kernel


def channel(array: Array, index: Index) -> list[str]:
    """The index of a per-channel array (scale, mean...): its axes line up with the input's from
    axis 1, the channel, on."""
    return list(index[1:1 + len(array.shape)])


@operator("BatchNormalization")
def batch_normalization(node: Node) -> Kernel:
    """Inference mode normalises with the given mean and var; training mode with the batch's own
    (over every axis but the channel, biased variance) and also outputs the running statistics
    `given * momentum + batch * (1 - momentum)`."""
    x, _, _, given_mean, given_var = node.inputs[:5]
    training = node.attr("training_mode", 0)
    if not training and any(output(node, k) is not None for k in range(1, 5)):
        raise Unsupported("not written", "the training outputs of BatchNormalization before opset 14")
    epsilon = node.attr("epsilon", 1e-5)
    if training:
        reduction = Reduction(x.shape, tuple(a for a in range(x.rank) if a != 1))
        kernel, mean, var = normalise(node, reduction, list, epsilon, channel)
    else:
        kernel = Kernel(node.op.lower())
        xs = kernel.input(x)
        scale, bias = parameters(kernel, node)
        mean, var = kernel.input(given_mean, "mean"), kernel.input(given_var, "var")
        ys = kernel.output(node.outputs[0])
        elementwise(kernel, x.shape, ys.at, lambda i: affine(
            standardise(xs.at(i), mean.at(channel(mean, i)), var.at(channel(var, i)), epsilon, x.dtype),
            scale, bias, lambda p: channel(p, i)))
        return kernel
    momentum = node.attr("momentum", 0.9)
    for k, given, batch in ((1, given_mean, mean), (2, given_var, var)):
        if output(node, k) is not None:
            given_at = kernel.input(given, f"input_{batch.name}")
            elementwise(kernel, given.shape, kernel.output(output(node, k), f"running_{batch.name}").at,
                        lambda i, given_at=given_at, batch=batch: f"{given_at.at(i)} * {number(momentum, x.dtype)} + "
                                                                  f"{batch.at(i)} * {number(1 - momentum, x.dtype)}")
    return kernel


@operator("InstanceNormalization")
def instance_normalization(node: Node) -> Kernel:
    """Over the spatial axes of each sample and channel."""
    x = node.inputs[0]
    return normalise(node, Reduction(x.shape, tuple(range(2, x.rank))), list, node.attr("epsilon", 1e-5),
                     channel)[0]


@operator("GroupNormalization")
def group_normalization(node: Node) -> Kernel:
    """Over each group of C/G consecutive channels and the spatial axes: the loop nest splits the
    channel axis into (group, channel in group). Scale and bias are per group at opset 18, per
    channel from opset 21 (which fixed 18's definition)."""
    x = node.inputs[0]
    groups = node.attr("num_groups")
    n, c, *spatial = x.shape
    if c % groups:
        raise Unsupported("dynamic shape", f"{c} channels do not split into {groups} groups")
    size = c // groups
    reduction = Reduction((n, groups, size, *spatial), tuple(range(2, x.rank + 1)))

    def view(i: Index) -> list[str]:
        return [i[0], f"{i[1]}*{size}+{i[2]}", *i[3:]]

    def parameter(p: Array, i: Index) -> list[str]:
        return [i[1]] if node.opset < 21 else [view(i)[1]]

    return normalise(node, reduction, view, node.attr("epsilon", 1e-5), parameter)[0]


@operator("RMSNormalization")
def rms_normalization(node: Node) -> Kernel:
    """x / sqrt(mean(x²) + epsilon) * scale over the axes from `axis` on (opset 23)."""
    x = node.inputs[0]
    return normalise(node, Reduction(x.shape, trailing(node, x.rank)), list, node.attr("epsilon", 1e-5),
                     lambda p, i: broadcast(p.shape, i), centred=False)[0]


@operator("MeanVarianceNormalization")
def mean_variance_normalization(node: Node) -> Kernel:
    """(x - mean) / (sqrt(var) + 1e-9) over `axes`, ONNX's definition (its epsilon is fixed)."""
    (x,), (y,) = node.inputs, node.outputs
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    reduction = Reduction(x.shape, tuple(sorted({axis(a, x.rank) for a in node.attr("axes", [0, 2, 3])})))
    mean, var = moments(kernel, reduction, xs.at, x.dtype)
    elementwise(kernel, x.shape, ys.at, lambda i: f"({xs.at(i)} - {reduction.at(mean, i)}) / "
                                                  f"(sqrt({reduction.at(var, i)}) + {number(1e-9, x.dtype)})")
    return kernel


@operator("LpNormalization")
def lp_normalization(node: Node) -> Kernel:
    """x / norm along `axis`, p = 1 or 2. ONNX Runtime writes 0 where the norm is 0, which a
    branch would say; the format has none, so the kernel divides by max(norm, the smallest
    subnormal), which is the norm itself whenever it is not 0 and gives 0 / tiny = 0 on a row of
    zeros. For p = 2 a row of nonzero numbers whose squares all underflow also has norm 0: the
    factor min(norm * big, 1), 1 for every norm a square can give and 0 for none, zeroes it too."""
    (x,), (y,) = node.inputs, node.outputs
    p = node.attr("p", 2)
    if p not in (1, 2):
        raise Unsupported("function", f"p = {p}: ONNX defines p = 1 or 2 only, other norms would need pow")
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    reduction = Reduction(x.shape, (axis(node.attr("axis", -1), x.rank),))
    norm = reduction.temporary(kernel, "norm", x.dtype)
    if p == 1:
        reduce(kernel, reduction, norm, "0", "+=", lambda i: f"abs({xs.at(i)})")
    else:
        reduce(kernel, reduction, norm, "0", "+=", lambda i: square(xs.at(i)), lambda v: f"sqrt({v})")
    tiny = float(np.finfo(NUMPY[x.dtype]).smallest_subnormal)
    # the smallest nonzero norm of squares is sqrt(tiny); big is a power of ten past its inverse
    big = f"1e{math.ceil(-math.log10(math.sqrt(tiny))) + 1}"

    def value(i: Index) -> str:
        quotient = f"{xs.at(i)} / max({reduction.at(norm, i)}, {number(tiny, x.dtype)})"
        return quotient if p == 1 else f"{quotient} * min({reduction.at(norm, i)} * {big}, 1)"

    elementwise(kernel, x.shape, ys.at, value)
    return kernel
