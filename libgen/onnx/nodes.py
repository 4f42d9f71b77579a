"""What the ONNX catalogue works with: a node at static shapes, and the `.dojo` kernel it becomes.

    node = Node("ln", "LayerNormalization", (x, g, b), (y,), {"axis": -1, "epsilon": 1e-5})
    kernel = Kernel("layernormalization")
    xs, ys = kernel.input(x), kernel.output(y)
    kernel.loop(y.shape, ys.at(loops(2)), "=", f"{xs.at(loops(2))} * 2")
    text = kernel.render(comment="From model.onnx, node ln (LayerNormalization).")

A `Value` is a tensor of the graph with its dtype and static shape, and its contents when they are
known when the model is imported (an initializer or a folded constant): attributes that recent
opsets pass as inputs (Reshape's shape, ReduceSum's axes, Pad's pads) are read from those. A
`Kernel` collects declarations and loop nests and prints a `.dojo` file; the catalogue's operators
build one per node, and `fuse` joins several into one. An operator that cannot be written raises
`Unsupported` with one of `FEATURES`, so that the importer reports the node instead of
approximating it.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import helper

from dojo_ir.tree import KEYWORDS

# ONNX TensorProto data types the format has
DTYPES = {1: "f32", 11: "f64", 6: "i32", 7: "i64"}
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}

# Why a node has no kernel. The first four are the format's exclusions (FORMAT.md, the paper's
# Table 2); the rest are what the format lacks or what an import cannot know.
FEATURES = {
    "indirection": "indexes an array by the values of another (FORMAT.md excludes indirection)",
    "data-dependent range": "its output's shape or a loop's range depends on the data",
    "dependent iteration": "an iteration depends on earlier ones of the same loop, beyond a reduction",
    "control flow": "it branches on the data (a comparison, a select or a subgraph)",
    "function": "it needs a function the format does not have",
    "dtype": "it uses a data type the format does not have (f32, f64, i32, i64)",
    "random": "its result is random",
    "not a tensor": "it works on sequences, maps, optionals or strings",
    "dynamic shape": "a shape is not known when the model is imported",
    "empty tensor": "a tensor has no elements, and the format's dimensions are at least 1",
    "too large": "a tensor is larger than the import's limits (docs/onnx.md, Limits)",
    "not written": "the catalogue has no entry for it yet",
    "invalid": "its shapes or attributes disagree with its operator's definition",
}

ACCESS = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\[")  # an array's name where it is accessed
LINE = re.compile(r"(?P<sizes>(?:\d+ )*)(?P<array>[A-Za-z_]\w*)\[(?P<indices>[^\]]*)\] "
                  r"(?P<assign>=|\+=|\*=|max=|min=) (?P<expression>.*)")  # a body line as Kernel.loop writes it

# The format's keywords, and the words that start a derivation line: a tensor is never named so.
_KEYWORDS = KEYWORDS | {"spec", "move"}


class Unsupported(Exception):
    """A node the catalogue does not turn into a kernel; `feature` is a key of FEATURES."""

    def __init__(self, feature: str, detail: str = ""):
        assert feature in FEATURES, feature
        self.feature = feature
        self.detail = detail
        super().__init__(f"{feature}: {detail or FEATURES[feature]}")


@dataclass(frozen=True, eq=False)
class Value:
    """A tensor of the graph: its ONNX name, the format's dtype, its static shape, and its
    contents when they are known at import."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    constant: np.ndarray | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def ints(self) -> list[int]:
        """The contents of a constant integer input (shape, axes, pads...)."""
        if self.constant is None:
            raise Unsupported("dynamic shape", f"`{self.name}` must be a constant to be read at import")
        return [int(v) for v in np.asarray(self.constant).reshape(-1)]

    def floats(self) -> list[float]:
        if self.constant is None:
            raise Unsupported("dynamic shape", f"`{self.name}` must be a constant to be read at import")
        return [float(v) for v in np.asarray(self.constant).reshape(-1)]


@dataclass(frozen=True, eq=False)
class Node:
    """An ONNX node at static shapes. An absent optional input is None, as ONNX's empty name is."""

    name: str
    op: str
    inputs: tuple[Value | None, ...]
    outputs: tuple[Value, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    opset: int = 21
    # whether a window along the channels (an LRN) reads its output, directly or through elementwise
    # nodes and pools: written in blocks of channels, it would be written back to rows (blocked.py)
    rows_read: bool = False

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def input(self, position: int) -> Value | None:
        return self.inputs[position] if position < len(self.inputs) else None


def loops(rank: int, first: int = 0) -> list[str]:
    """`{first}`, `{first+1}`, ...: the references of `rank` consecutive loops."""
    return [f"{{{d}}}" for d in range(first, first + rank)]


class Nest:
    """The loops of one body line, opened outermost first. A dimension of one element gets no loop:
    its index is 0."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def over(self, size: int) -> str:
        if size == 1:
            return "0"
        self.sizes.append(size)
        return f"{{{len(self.sizes) - 1}}}"

    def all(self, shape: Iterable[int]) -> list[str]:
        return [self.over(size) for size in shape]


def grouped_product(line: Nest, batch: int, group: int, per_out: int, outputs: Sequence[int],
                    per_in: int) -> tuple[str, list[str], str, str, str]:
    """Open a grouped convolution's loops on `line`, outermost first: the image, the group, its
    output channel, the output positions and its input channel. Their references (image,
    positions, the group's input channel) and the output and input channels they index."""
    n, g = line.over(batch), line.over(group)
    m = line.over(per_out)
    positions = line.all(outputs)
    c = line.over(per_in)
    return n, positions, c, affine([(g, per_out), (m, 1)]), affine([(g, per_in), (c, 1)])


def broadcast(shape: Sequence[int], indices: Sequence[str]) -> list[str]:
    """The indices of an operand of `shape` under ONNX's multidirectional broadcasting, where
    `indices` index the result: shapes align on the right, and a dimension of 1 is read at 0."""
    tail = list(indices[len(indices) - len(shape):]) if shape else []
    return ["0" if size == 1 else index for size, index in zip(shape, tail, strict=True)]


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for d in range(rank):
        sizes = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise Unsupported("dynamic shape", f"shapes {[list(s) for s in shapes]} do not broadcast")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def axis(value: int, rank: int) -> int:
    """An ONNX axis, which may count from the end, as a position."""
    if not -rank <= value < max(rank, 1):
        raise Unsupported("dynamic shape", f"axis {value} is outside a tensor of rank {rank}")
    return value % rank if rank else 0


def affine(terms: Iterable[tuple[str | None, int]], constant: int = 0) -> str:
    """An index such as `{3}*2+{5}+1` from (reference, coefficient) pairs and a constant; a
    reference None or "0" (the index of a dimension of one element) drops out. Positive parts go
    first, so that a reflection reads `3-{0}`, not `-{0}+3`."""
    parts = [(c, ref if abs(c) == 1 else f"{ref}*{abs(c)}") for ref, c in terms if ref not in (None, "0") and c]
    parts += [(constant, str(abs(constant)))] if constant else []
    parts.sort(key=lambda part: part[0] < 0)
    text = "".join(("-" if c < 0 else "+" if i else "") + t for i, (c, t) in enumerate(parts))
    return text or "0"


def number(value: float, dtype: str = "f32") -> str:
    """A literal of the format for `value` in `dtype`: the shortest text that reads back as the
    same number there, negative ones in parentheses so that they stand anywhere in an expression."""
    if dtype in ("i32", "i64"):
        text = str(int(value))
    elif np.isinf(value):
        text = "-inf" if value < 0 else "inf"
    elif np.isnan(value):
        raise Unsupported("function", "a NaN constant cannot be written")
    else:
        text = np.format_float_positional(NUMPY[dtype](value), unique=True, trim="0") \
            if abs(value) >= 1e-4 or value == 0 else np.format_float_scientific(NUMPY[dtype](value), unique=True,
                                                                                trim="0")
        text = text.removesuffix(".")
        if "e" in text:
            mantissa, exponent = text.split("e")
            text = f"{mantissa.removesuffix('.')}e{int(exponent)}"
    return f"({text})" if text.startswith("-") else text


def fresh_name(base: str, taken: Collection[str]) -> str:
    """An ONNX value name not in `taken`: `base`, else `base.2`, `base.3`..."""
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    return name


def identifier(name: str, taken: Iterable[str] = (), separator: str = "") -> str:
    """An array or kernel name of the format made from an ONNX name, distinct from `taken` (by a
    number after `separator`: `x2`, or `matmul_2`)."""
    base = re.sub(r"\W+", "_", name).strip("_") or "t"
    if base[0].isdigit():
        base = f"t{base}"
    if base in _KEYWORDS or keyword.iskeyword(base):
        base = f"{base}_"
    taken = set(taken)
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}{separator}{n}"
    return candidate


@dataclass(frozen=True)
class Derived:
    """A constant the import computed from the model's own (a Conv's weights with a
    BatchNormalization folded in or transformed for Winograd's algorithm, a rotary embedding's
    rows at constant positions): a kernel's call reads it by its name."""

    value: np.ndarray
    sources: tuple[str, ...]  # the model's constants it comes from
    how: str

    def json(self, name: str) -> dict[str, Any]:
        return {"name": name, "dtype": DTYPES[helper.np_dtype_to_tensor_dtype(self.value.dtype)],
                "shape": list(self.value.shape), "from": list(self.sources), "how": self.how}


@dataclass(frozen=True)
class Array:
    """An array declared in a kernel."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def at(self, indices: Sequence[str | int]) -> str:
        """An access: `x[{0},{1}]`, `s[]`."""
        assert len(indices) == len(self.shape), (self.name, indices, self.shape)
        return f"{self.name}[{','.join(map(str, indices))}]"


class Kernel:
    """A `.dojo` kernel under construction: arrays in the order declared, then body lines."""

    def __init__(self, name: str):
        self.name = identifier(name)
        self.inputs: list[Array] = []
        self.outputs: list[Array] = []
        self.temporaries: list[Array] = []
        self.lines: list[str] = []
        self.sources: dict[str, str] = {}  # array name -> the ONNX value it holds (inputs and outputs)
        self.derived: dict[str, Derived] = {}  # ONNX name -> a constant input the kernel computed at import
        self.notes: list[str] = []  # lines for the file's header comment, after the nodes it comes from

    @property
    def arrays(self) -> list[Array]:
        return self.inputs + self.outputs + self.temporaries

    def _declare(self, into: list[Array], name: str, dtype: str, shape: Sequence[int]) -> Array:
        array = Array(identifier(name, (a.name for a in self.arrays)), dtype, tuple(shape))
        into.append(array)
        return array

    def input(self, value: Value, name: str = "x") -> Array:
        """Declare `value` as an input; the same value given twice is one input."""
        for array in self.inputs:
            if self.sources[array.name] == value.name:
                return array
        array = self._declare(self.inputs, name, value.dtype, value.shape)
        self.sources[array.name] = value.name
        return array

    def derived_input(self, value: Value, derived: Derived, name: str) -> Array:
        """Declare an input computed at import: `value` names it and gives its dtype and shape."""
        array = self._declare(self.inputs, name, value.dtype, value.shape)
        self.sources[array.name] = value.name
        self.derived[value.name] = derived
        return array

    def output(self, value: Value, name: str = "y") -> Array:
        array = self._declare(self.outputs, name, value.dtype, value.shape)
        self.sources[array.name] = value.name
        return array

    def temporary(self, name: str, dtype: str, shape: Sequence[int]) -> Array:
        return self._declare(self.temporaries, name, dtype, shape)

    def loop(self, sizes: Sequence[int], target: str, assign: str, expression: str) -> None:
        """One body line: loops of `sizes`, outermost first, around `target ASSIGN expression`,
        which refer to the loops as `{0}`, `{1}`, ..."""
        assert assign in ("=", "+=", "*=", "max=", "min="), assign
        self.lines.append(" ".join([*map(str, sizes), target, assign, expression]))

    def render(self, comment: str = "") -> str:
        """The kernel as `.dojo` text; `comment` lines go on top."""
        declarations = [f"{a.name} {a.dtype} [{', '.join(map(str, a.shape))}] heap" for a in self.arrays]
        header = [f"# {line}" if line else "#" for line in comment.splitlines()]
        ins = ", ".join(a.name for a in self.inputs)
        outs = ", ".join(a.name for a in self.outputs)
        return "\n".join([*header, f"kernel {self.name}({ins}) -> {outs}", "", *declarations, "", *self.lines, ""])


def border_boxes(extents: Sequence[int], begins: Sequence[int], sizes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """The boxes, each (start, size) along every dimension, that together are an array of `extents`
    without the box of `sizes` at `begins`: along each dimension in turn, the parts before and
    after that box, within the box along the dimensions before."""
    sides = []
    for d, (extent, begin, size) in enumerate(zip(extents, begins, sizes, strict=True)):
        inside = list(zip(begins[:d], sizes[:d], strict=True))
        whole = [(0, e) for e in extents[d + 1:]]
        sides += [[*inside, part, *whole] for part in ((0, begin), (begin + size, extent - begin - size))
                  if part[1] > 0]
    return sides
