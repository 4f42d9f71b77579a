"""The kernel library: the 16 ML operators of the paper's Table 3 as `.dojo` text.

Each operator is a generator that writes its kernel at any shape. The kernels
are unfused on purpose: one loop nest per operation, written the way a person
would first write them, so that the moves have fusion and scheduling work to do.
The files next to this module hold every kernel at the paper's shape;
`python -m dojo_ir.library` rewrites them from the generators.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template

Shape = tuple[int, ...]
Line = tuple[Shape, str]

__all__ = ["KERNELS", "Kernel", "load_text", "path"]

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class _Source:
    """What a generator decides; `_render` turns it into canonical text.

    `words` is the shape in words for the header comment. Arrays are given
    with their shapes in declaration order: inputs, outputs, then temporaries
    in the order a reader meets them.
    """

    words: str
    inputs: dict[str, Shape]
    outputs: dict[str, Shape]
    temporaries: dict[str, Shape]
    body: list[Line]


def _nest(sizes: Shape, op: str, **values: int | str) -> Line:
    """One loop nest around one operation. `op` names scopes as `{d}`, which
    rules out str.format, so values spliced into it are written `$name`."""
    return sizes, Template(op).substitute(values)


def _render(kernel: str, description: str, source: _Source) -> str:
    signature = f"kernel {kernel}({', '.join(source.inputs)}) -> {', '.join(source.outputs)}"
    arrays = {**source.inputs, **source.outputs, **source.temporaries}
    declarations = [f"{name} f32 [{', '.join(map(str, shape))}] heap" for name, shape in arrays.items()]
    body = [" ".join([*map(str, sizes), op]) for sizes, op in source.body]
    lines = [f"# {description}, {source.words}.", signature, "", *declarations, "", *body]
    return "\n".join(lines) + "\n"


def _check_shape(kernel: str, expected: list[str], shape: dict[str, int]) -> None:
    unknown = [name for name in shape if name not in expected]
    if unknown:
        raise ValueError(f"{kernel}: unknown shape parameter {', '.join(unknown)}; expected {', '.join(expected)}")
    missing = [name for name in expected if name not in shape]
    if missing:
        raise ValueError(f"{kernel}: missing shape parameter {', '.join(missing)}; expected {', '.join(expected)}")
    for name, value in shape.items():
        # bool is an int subclass, but `n=True` is a mistake, not a size
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{kernel}: shape parameter {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class _Generator:
    """A builder of `_Source` made into a validating generator of `.dojo` text.
    The builder's keyword parameters are the shape parameters."""

    kernel: str
    description: str
    build: Callable[..., _Source]

    def __call__(self, **shape: int) -> str:
        _check_shape(self.kernel, list(inspect.signature(self.build).parameters), shape)
        return _render(self.kernel, self.description, self.build(**shape))


def _generator(kernel: str, description: str) -> Callable[[Callable[..., _Source]], _Generator]:
    return lambda build: _Generator(kernel, description, build)


# -- the operators ------------------------------------------------------------


def _elementwise(m: int, n: int, op: str, arrays: tuple[str, ...], result: str) -> _Source:
    return _Source(
        words=f"{m} by {n}",
        inputs={name: (m, n) for name in arrays},
        outputs={result: (m, n)},
        temporaries={},
        body=[_nest((m, n), op)],
    )


@_generator("add", "Elementwise addition")
def add(*, m: int, n: int) -> _Source:
    return _elementwise(m, n, "z[{0},{1}] = x[{0},{1}] + y[{0},{1}]", ("x", "y"), "z")


@_generator("mul", "Elementwise multiplication")
def mul(*, m: int, n: int) -> _Source:
    return _elementwise(m, n, "z[{0},{1}] = x[{0},{1}] * y[{0},{1}]", ("x", "y"), "z")


@_generator("relu", "Rectified linear unit")
def relu(*, m: int, n: int) -> _Source:
    return _elementwise(m, n, "y[{0},{1}] = max(x[{0},{1}], 0)", ("x",), "y")


@_generator("batchnorm", "Batch normalization")
def batchnorm(*, n: int, c: int, h: int, w: int) -> _Source:
    # Training-mode statistics per channel over batch and space; the channel
    # scope is outermost in the reductions because that is what they reduce into.
    x = "x[{1},{0},{2},{3}]"
    return _Source(
        words=f"batch {n}, {c} channels, {h} by {w}",
        inputs={"x": (n, c, h, w)},
        outputs={"y": (n, c, h, w)},
        temporaries={"mean": (c,), "var": (c,)},
        body=[
            _nest((c,), "mean[{0}] = 0"),
            _nest((c, n, h, w), "mean[{0}] += $x", x=x),
            _nest((c,), "mean[{0}] = mean[{0}] / $count", count=n * h * w),
            _nest((c,), "var[{0}] = 0"),
            _nest((c, n, h, w), "var[{0}] += ($x - mean[{0}]) * ($x - mean[{0}])", x=x),
            _nest((c,), "var[{0}] = var[{0}] / $count", count=n * h * w),
            _nest((n, c, h, w), "y[{0},{1},{2},{3}] = (x[{0},{1},{2},{3}] - mean[{1}]) / sqrt(var[{1}] + 1e-5)"),
        ],
    )


@_generator("bmm", "Batched matrix multiplication")
def bmm(*, b: int, m: int, k: int, n: int) -> _Source:
    return _Source(
        words=f"{b} batches of {m} by {k} times {k} by {n}",
        inputs={"a": (b, m, k), "b": (b, k, n)},
        outputs={"c": (b, m, n)},
        temporaries={},
        body=[
            _nest((b, m, n), "c[{0},{1},{2}] = 0"),
            _nest((b, m, n, k), "c[{0},{1},{2}] += a[{0},{1},{3}] * b[{0},{3},{2}]"),
        ],
    )


@_generator("conv", "2D convolution")
def conv(*, n: int, co: int, ci: int, h: int, w: int, k: int) -> _Source:
    if k > h or k > w:
        raise ValueError(f"conv: the {k} by {k} filter does not fit the {h} by {w} image")
    oh, ow = h - k + 1, w - k + 1
    return _Source(
        words=f"batch {n}, {ci} to {co} channels, {h} by {w} image, {k} by {k} filter",
        inputs={"x": (n, ci, h, w), "w": (co, ci, k, k)},
        outputs={"y": (n, co, oh, ow)},
        temporaries={},
        body=[
            _nest((n, co, oh, ow), "y[{0},{1},{2},{3}] = 0"),
            _nest(
                (n, co, ci, oh, ow, k, k),
                "y[{0},{1},{3},{4}] += x[{0},{2},{3}+{5},{4}+{6}] * w[{1},{2},{5},{6}]",
            ),
        ],
    )


@_generator("layernorm", "Layer normalization")
def layernorm(*, m: int, n: int) -> _Source:
    return _Source(
        words=f"{m} rows of {n}",
        inputs={"x": (m, n), "g": (n,), "b": (n,)},
        outputs={"y": (m, n)},
        temporaries={"mean": (m,), "var": (m,)},
        body=[
            _nest((m,), "mean[{0}] = 0"),
            _nest((m, n), "mean[{0}] += x[{0},{1}]"),
            _nest((m,), "mean[{0}] = mean[{0}] / $n", n=n),
            _nest((m,), "var[{0}] = 0"),
            _nest((m, n), "var[{0}] += (x[{0},{1}] - mean[{0}]) * (x[{0},{1}] - mean[{0}])"),
            _nest((m,), "var[{0}] = var[{0}] / $n", n=n),
            _nest((m, n), "y[{0},{1}] = (x[{0},{1}] - mean[{0}]) / sqrt(var[{0}] + 1e-5) * g[{1}] + b[{1}]"),
        ],
    )


@_generator("matmul", "Matrix multiplication")
def matmul(*, m: int, k: int, n: int) -> _Source:
    return _Source(
        words=f"{m} by {k} times {k} by {n}",
        inputs={"a": (m, k), "b": (k, n)},
        outputs={"c": (m, n)},
        temporaries={},
        body=[
            _nest((m, n), "c[{0},{1}] = 0"),
            _nest((m, n, k), "c[{0},{1}] += a[{0},{2}] * b[{2},{1}]"),
        ],
    )


@_generator("reducemean", "Mean along the last axis")
def reducemean(*, m: int, n: int) -> _Source:
    return _Source(
        words=f"{m} rows of {n}",
        inputs={"x": (m, n)},
        outputs={"y": (m,)},
        temporaries={},
        body=[
            _nest((m,), "y[{0}] = 0"),
            _nest((m, n), "y[{0}] += x[{0},{1}]"),
            _nest((m,), "y[{0}] = y[{0}] / $n", n=n),
        ],
    )


@_generator("relu_ffn", "ReLU then a pointwise feed-forward layer over channels")
def relu_ffn(*, n: int, c: int, h: int, w: int) -> _Source:
    return _Source(
        words=f"batch {n}, {c} channels, {h} by {w}",
        inputs={"x": (n, c, h, w), "w": (c, c), "b": (c,)},
        outputs={"y": (n, c, h, w)},
        temporaries={"r": (n, c, h, w)},
        body=[
            _nest((n, c, h, w), "r[{0},{1},{2},{3}] = max(x[{0},{1},{2},{3}], 0)"),
            _nest((n, c, h, w), "y[{0},{1},{2},{3}] = b[{1}]"),
            _nest((n, c, h, w, c), "y[{0},{1},{2},{3}] += w[{1},{4}] * r[{0},{4},{2},{3}]"),
        ],
    )


@_generator("rmsnorm", "Root mean square normalization")
def rmsnorm(*, m: int, n: int) -> _Source:
    return _Source(
        words=f"{m} rows of {n}",
        inputs={"x": (m, n), "g": (n,)},
        outputs={"y": (m, n)},
        temporaries={"ms": (m,)},
        body=[
            _nest((m,), "ms[{0}] = 0"),
            _nest((m, n), "ms[{0}] += x[{0},{1}] * x[{0},{1}]"),
            _nest((m,), "ms[{0}] = ms[{0}] / $n", n=n),
            _nest((m, n), "y[{0},{1}] = x[{0},{1}] / sqrt(ms[{0}] + 1e-5) * g[{1}]"),
        ],
    )


@_generator("softmax", "Row-wise softmax")
def softmax(*, m: int, n: int) -> _Source:
    return _Source(
        words=f"{m} rows of {n}",
        inputs={"x": (m, n)},
        outputs={"y": (m, n)},
        temporaries={"m": (m,), "e": (m, n), "s": (m,)},
        body=[
            _nest((m,), "m[{0}] = -inf"),
            _nest((m, n), "m[{0}] max= x[{0},{1}]"),
            _nest((m, n), "e[{0},{1}] = exp(x[{0},{1}] - m[{0}])"),
            _nest((m,), "s[{0}] = 0"),
            _nest((m, n), "s[{0}] += e[{0},{1}]"),
            _nest((m, n), "y[{0},{1}] = e[{0},{1}] / s[{0}]"),
        ],
    )


@_generator("swiglu", "SwiGLU activation")
def swiglu(*, b: int, t: int, d: int, h: int) -> _Source:
    return _Source(
        words=f"batch {b}, {t} tokens, {d} features to {h}",
        inputs={"x": (b, t, d), "w": (d, h), "v": (d, h)},
        outputs={"y": (b, t, h)},
        temporaries={"a": (b, t, h), "c": (b, t, h)},
        body=[
            _nest((b, t, h), "a[{0},{1},{2}] = 0"),
            _nest((b, t, h, d), "a[{0},{1},{2}] += x[{0},{1},{3}] * w[{3},{2}]"),
            _nest((b, t, h), "c[{0},{1},{2}] = 0"),
            _nest((b, t, h, d), "c[{0},{1},{2}] += x[{0},{1},{3}] * v[{3},{2}]"),
            _nest((b, t, h), "y[{0},{1},{2}] = a[{0},{1},{2}] / (1 + exp(-a[{0},{1},{2}])) * c[{0},{1},{2}]"),
        ],
    )


# -- the library ----------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """A Table 3 entry: a generator and the shape the paper tunes it at.

    `small_params` is a tiny shape for tests: every size small and, where the
    operator allows, different from the others so that a transposed index
    goes out of bounds or gives a wrong answer instead of passing by luck.
    `quick_params` is a shape whose spec runs in tens to hundreds of
    microseconds, big enough that vectors and threads pay as they do at the
    paper's shape: what the agent trains on and smoke benchmarks run, where
    an evaluation costs a fraction of a second.
    """

    name: str
    description: str
    params: dict[str, int]
    small_params: dict[str, int]
    quick_params: dict[str, int]
    generate: Callable[..., str]

    def text(self, **overrides: int) -> str:
        """The kernel at the paper's shape, with `overrides` replacing some sizes."""
        return self.generate(**{**self.params, **overrides})

    def small(self) -> str:
        return self.generate(**self.small_params)

    def quick(self) -> str:
        return self.generate(**self.quick_params)


def _kernel(name: str, generate: _Generator, params: dict[str, int], small: dict[str, int],
            quick: dict[str, int]) -> Kernel:
    return Kernel(name, generate.description, params, small, quick, generate)


KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        _kernel("add", add, {"m": 3072, "n": 4096},
                {"m": 3, "n": 5},
                {"m": 384, "n": 512}),
        _kernel("batchnorm1", batchnorm, {"n": 8, "c": 3, "h": 2048, "w": 2048},
                {"n": 2, "c": 3, "h": 4, "w": 5},
                {"n": 2, "c": 3, "h": 256, "w": 256}),
        _kernel("batchnorm2", batchnorm, {"n": 8, "c": 64, "h": 300, "w": 300},
                {"n": 3, "c": 4, "h": 5, "w": 6},
                {"n": 2, "c": 16, "h": 75, "w": 75}),
        _kernel("bmm", bmm, {"b": 192, "m": 256, "k": 128, "n": 256},
                {"b": 2, "m": 3, "k": 4, "n": 5},
                {"b": 8, "m": 64, "k": 32, "n": 64}),
        _kernel("conv1", conv, {"n": 8, "co": 10, "ci": 3, "h": 512, "w": 512, "k": 5},
                {"n": 2, "co": 4, "ci": 3, "h": 10, "w": 11, "k": 5},
                {"n": 1, "co": 10, "ci": 3, "h": 64, "w": 64, "k": 5}),
        _kernel("conv2", conv, {"n": 8, "co": 64, "ci": 64, "h": 56, "w": 56, "k": 3},
                {"n": 2, "co": 4, "ci": 5, "h": 8, "w": 9, "k": 3},
                {"n": 1, "co": 16, "ci": 16, "h": 28, "w": 28, "k": 3}),
        _kernel("layernorm1", layernorm, {"m": 16384, "n": 1024},
                {"m": 3, "n": 5},
                {"m": 512, "n": 256}),
        _kernel("layernorm2", layernorm, {"m": 4096, "n": 4096},
                {"m": 4, "n": 6},
                {"m": 256, "n": 512}),
        _kernel("matmul", matmul, {"m": 768, "k": 1024, "n": 1024},
                {"m": 3, "k": 4, "n": 5},
                {"m": 96, "k": 128, "n": 128}),
        _kernel("mul", mul, {"m": 6, "n": 14336},
                {"m": 2, "n": 7},
                {"m": 6, "n": 14336}),
        _kernel("reducemean", reducemean, {"m": 4096, "n": 4096},
                {"m": 3, "n": 5},
                {"m": 256, "n": 512}),
        _kernel("relu", relu, {"m": 4096, "n": 4096},
                {"m": 4, "n": 6},
                {"m": 256, "n": 512}),
        _kernel("relu_ffn", relu_ffn, {"n": 8, "c": 64, "h": 112, "w": 112},
                {"n": 2, "c": 3, "h": 4, "w": 5},
                {"n": 1, "c": 16, "h": 28, "w": 28}),
        _kernel("rmsnorm", rmsnorm, {"m": 3072, "n": 4096},
                {"m": 3, "n": 5},
                {"m": 192, "n": 512}),
        _kernel("softmax", softmax, {"m": 24576, "n": 512},
                {"m": 3, "n": 5},
                {"m": 768, "n": 128}),
        _kernel("swiglu", swiglu, {"b": 1, "t": 256, "d": 4096, "h": 448},
                {"b": 2, "t": 3, "d": 4, "h": 5},
                {"b": 1, "t": 32, "d": 256, "h": 64}),
    )
}


def _known(name: str) -> Kernel:
    if name not in KERNELS:
        raise ValueError(f"no kernel named {name!r}; the library has {', '.join(KERNELS)}")
    return KERNELS[name]


def path(name: str) -> Path:
    """Where the kernel `name` is stored at the paper's shape."""
    return _HERE / f"{_known(name).name}.dojo"


def load_text(name: str) -> str:
    """The stored `.dojo` text of the kernel `name` at the paper's shape."""
    return path(name).read_text()
