"""Random kernels from the ONNX catalogue: what the cost model learns from beside the library's kernels.

    for kernel in random_kernels(24, seed=0):
        (out / f"{kernel.name}.dojo").write_text(kernel.text)

Each kernel is one ONNX node of an operator the catalogue covers, drawn with random attributes
(strides, groups, axes, broadcasting, permutations) at a random size, and imported as a model of
that node alone would be (`import_model`: weights are initializers, so a convolution may come in
by Winograd's algorithm as a real model's does). Sizes are drawn log-uniformly between `smallest`
and `largest` bytes of tensors, so that the kernels run from L1-resident to DRAM-bound, the range
where parallel and vector scopes start and stop paying, which the library's quick shapes (all
under a megabyte) do not cover. A convolution or matrix product is also held under `max_flops`,
so that its spec, timed once in every search, runs in milliseconds. The same seed gives the same
kernels on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from dojo_ir import load, to_text

from .importer import import_model

OPSET = 21
KiB = 1024


@dataclass(frozen=True)
class Tensor:
    """An input of the node: a constant one is an initializer, of seeded random values unless
    `ints` gives them (axes)."""

    name: str
    shape: tuple[int, ...]
    constant: bool = False
    ints: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Draw:
    """One node as drawn: its operator, inputs and attributes, before it is imported."""

    op: str
    inputs: tuple[Tensor, ...]
    attributes: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        shapes = ", ".join(f"{t.name}[{'x'.join(map(str, t.shape))}]{'=const' if t.constant else ''}"
                           for t in self.inputs)
        attributes = "".join(f" {key}={value}" for key, value in sorted(self.attributes.items()))
        return f"{self.op}({shapes}){attributes}"


@dataclass(frozen=True)
class RandomKernel:
    name: str
    draw: Draw
    text: str  # the .dojo kernel, with a header comment naming the draw


def _shape(rng: np.random.Generator, elements: float, rank: int, least: int = 2) -> tuple[int, ...]:
    """`rank` sizes of at least `least` whose product is about `elements`, split unevenly as real
    tensors are (a long row and a short batch as well as a square)."""
    shares = rng.dirichlet(np.full(rank, 3.0))
    return tuple(max(least, round(elements ** share)) for share in shares)


def _elementwise(rng: np.random.Generator, elements: float) -> Draw:
    op = rng.choice(["Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Gelu", "LeakyRelu", "Elu", "Softplus",
                     "HardSigmoid", "Abs", "Neg"])
    x = Tensor("x", _shape(rng, elements / 2, int(rng.integers(1, 5))))
    return Draw(str(op), (x,))


def _broadcast(rng: np.random.Generator, elements: float) -> Draw:
    op = rng.choice(["Add", "Mul", "Sub", "Max", "Min"])
    shape = _shape(rng, elements / 2.5, int(rng.integers(2, 5)))
    # the second operand keeps a random subset of the dimensions (a bias per channel, a row, a column)
    kept = rng.random(len(shape)) < 0.5
    kept[int(rng.integers(len(shape)))] = True
    other = tuple(size if keep else 1 for size, keep in zip(shape, kept, strict=True))
    return Draw(str(op), (Tensor("a", shape), Tensor("b", other, constant=bool(rng.random() < 0.5))))


def _matmul(rng: np.random.Generator, elements: float, max_flops: float) -> Draw:
    # the operands' elements about `elements`: m, k and n about its square root each
    m, k, n = _shape(rng, (elements / 3) ** 1.5, 3, least=8)
    while 2 * m * k * n > max_flops:
        m, k, n = max(2, m * 3 // 4), max(2, k * 3 // 4), max(2, n * 3 // 4)
    if rng.random() < 0.4:
        return Draw("Gemm", (Tensor("a", (m, k)), Tensor("b", (n, k), constant=True),
                             Tensor("c", (n,), constant=True)), {"transB": 1})
    most = min(8, int(max_flops // (2 * m * k * n)))  # a batch of products within the flops too
    batch = int(rng.integers(2, most + 1)) if rng.random() < 0.3 and most >= 2 else 1
    a = Tensor("a", (batch, m, k) if batch > 1 else (m, k))
    b = Tensor("b", (k, n), constant=bool(rng.random() < 0.7))
    return Draw("MatMul", (a, b))


def _conv(rng: np.random.Generator, elements: float, max_flops: float) -> Draw | None:
    kernel = int(rng.choice([1, 1, 3, 3, 3, 5, 7]))
    stride = int(rng.choice([1, 1, 2]))
    kind = rng.choice(["dense", "dense", "depthwise", "grouped"])
    batch = int(rng.choice([1, 1, 2]))
    channels = max(2, round(2 ** rng.uniform(1, 9)))
    size = max(kernel + 1, round(math.sqrt(max(elements / (2 * batch * channels), 4))))
    groups = channels if kind == "depthwise" else (int(rng.choice([2, 4])) if kind == "grouped" else 1)
    ci = max(groups, channels // groups * groups)
    co = ci * int(rng.choice([1, 2])) if kind == "depthwise" else max(groups, round(ci * rng.choice([0.5, 1, 2]))
                                                                       // groups * groups)

    def flops() -> int:
        return 2 * batch * co * (ci // groups) * kernel * kernel * (size // stride) ** 2

    while flops() > max_flops and size > kernel + 1:
        size = max(kernel + 1, size * 3 // 4)
    if flops() > max_flops:  # too many channels for the window even at its least image
        return None
    pads = kernel // 2 if rng.random() < 0.7 else 0
    x = Tensor("x", (batch, ci, size, size))
    w = Tensor("w", (co, ci // groups, kernel, kernel), constant=True)
    inputs = (x, w, Tensor("bias", (co,), constant=True)) if rng.random() < 0.6 else (x, w)
    return Draw("Conv", inputs, {"kernel_shape": [kernel, kernel], "strides": [stride, stride],
                                 "pads": [pads] * 4, "group": groups})


def _pool(rng: np.random.Generator, elements: float) -> Draw:
    batch, size = int(rng.choice([1, 2])), round(2 ** rng.uniform(2, 7))
    x = Tensor("x", (batch, max(2, round(elements / 1.5 / batch / size ** 2)), size, size))
    op = str(rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    if op.startswith("Global"):
        return Draw(op, (x,))
    kernel, stride = int(rng.choice([2, 3])), int(rng.choice([1, 2]))
    return Draw(op, (x,), {"kernel_shape": [kernel, kernel], "strides": [stride, stride]})


def _reduce(rng: np.random.Generator, elements: float) -> Draw:
    op = str(rng.choice(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2", "ReduceSumSquare"]))
    x = Tensor("x", _shape(rng, elements, int(rng.integers(2, 5))))
    axes = tuple(sorted({int(rng.integers(len(x.shape))) for _ in range(int(rng.integers(1, len(x.shape))))}))
    return Draw(op, (x, Tensor("axes", (len(axes),), constant=True, ints=axes)), {"keepdims": int(rng.integers(2))})


def _normalise(rng: np.random.Generator, elements: float) -> Draw:
    op = str(rng.choice(["Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
                         "InstanceNormalization"]))
    if op in ("Softmax", "LogSoftmax"):
        x = Tensor("x", _shape(rng, elements / 2, int(rng.integers(2, 5))))
        return Draw(op, (x,), {"axis": int(rng.integers(-len(x.shape), len(x.shape)))})
    if op == "LayerNormalization":
        x = Tensor("x", _shape(rng, elements / 2, int(rng.integers(2, 4))))
        return Draw(op, (x, Tensor("scale", x.shape[-1:], True), Tensor("bias", x.shape[-1:], True)), {"axis": -1})
    x = Tensor("x", _shape(rng, elements / 2, 4))
    channel = (x.shape[1],)
    if op == "InstanceNormalization":
        return Draw(op, (x, Tensor("scale", channel, True), Tensor("bias", channel, True)))
    return Draw(op, (x, *(Tensor(name, channel, True) for name in ("scale", "bias", "mean", "var"))))


def _transpose(rng: np.random.Generator, elements: float) -> Draw:
    x = Tensor("x", _shape(rng, elements / 2, int(rng.integers(2, 5))))
    perm = [int(p) for p in rng.permutation(len(x.shape))]
    if perm == sorted(perm):
        perm = perm[1:] + perm[:1]
    return Draw("Transpose", (x,), {"perm": perm})


# family -> (its share of the draws, the draw); the shares lean to the products, which dominate models' time
FAMILIES: dict[str, tuple[float, Callable[..., Draw | None]]] = {
    "elementwise": (1.0, _elementwise),
    "broadcast": (1.0, _broadcast),
    "matmul": (2.0, _matmul),
    "conv": (3.0, _conv),
    "pool": (1.0, _pool),
    "reduce": (1.0, _reduce),
    "normalise": (1.5, _normalise),
    "transpose": (0.5, _transpose),
}
PRODUCTS = {"matmul", "conv"}


def _values(rng: np.random.Generator, tensor: Tensor) -> np.ndarray:
    if tensor.ints is not None:
        return np.asarray(tensor.ints, dtype=np.int64)
    if tensor.name == "var":  # a variance is positive
        return rng.uniform(0.5, 2.0, tensor.shape).astype(np.float32)
    return rng.standard_normal(tensor.shape).astype(np.float32)


def node_model(draw: Draw, seed: int) -> onnx.ModelProto:
    """The draw as a model of one node: constant inputs are initializers of seeded values."""
    rng = np.random.default_rng(seed)
    node = helper.make_node(draw.op, [t.name for t in draw.inputs], ["y"], name="node",
                            **draw.attributes)
    inputs = [helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, t.shape)
              for t in draw.inputs if not t.constant]
    initializers = [numpy_helper.from_array(_values(rng, t), t.name) for t in draw.inputs if t.constant]
    output = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "random", inputs, [output], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def _draws(rng: np.random.Generator, smallest: int, largest: int, max_flops: float) -> Iterator[tuple[str, Draw]]:
    names = list(FAMILIES)
    shares = np.array([FAMILIES[f][0] for f in names])
    while True:
        family = names[int(rng.choice(len(names), p=shares / shares.sum()))]
        elements = math.exp(rng.uniform(math.log(smallest), math.log(largest))) / 4  # float32
        make = FAMILIES[family][1]
        draw = make(rng, elements, max_flops) if family in PRODUCTS else make(rng, elements)
        if draw is not None:
            yield family, draw


def random_kernels(count: int, seed: int = 0, *, smallest: int = 16 * KiB, largest: int = 64 * KiB * KiB,
                   max_flops: float = 64e6) -> list[RandomKernel]:
    """`count` kernels of random nodes; a draw over `max_flops`, or one the catalogue refuses (an
    attribute value it does not write), is drawn again, so every kernel is one the importer makes."""
    rng = np.random.default_rng(seed)
    kernels: list[RandomKernel] = []
    draws = _draws(rng, smallest, largest, max_flops)
    while len(kernels) < count:
        family, draw = next(draws)
        imported = import_model(node_model(draw, seed + len(kernels)))
        if imported.skipped or len(imported.kernels) != 1:
            continue
        (text,) = imported.kernels.values()
        # named for itself, not its operator: the cost model's logs group and hold out kernels by name,
        # and a random matmul is not the library's
        name = f"r{seed}_{len(kernels):02d}_{draw.op.lower()}"
        program = load(text)
        comment = f" A random kernel of the ONNX catalogue ({family}, seed {seed}): {draw.describe()}"
        kernels.append(RandomKernel(name, draw, to_text(replace(program, name=name,
                                                                comments=(comment, *program.comments)))))
    return kernels
