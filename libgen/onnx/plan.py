"""The plan of a model's run (libgen/onnx/run.py runs it): which unit of the import runs where (the
library, ONNX Runtime, a view, a constant), in an order that runs the graph, with only the units
the outputs need and consecutive ONNX Runtime nodes joined into one session; which Concats the
kernels before them write in place; when each value is last read; and the pool of buffers that
values whose lives do not overlap share."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..manifest import ALIGNMENT
from ..runtime import Library, aligned_empty
from .reads import used_names

VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
Shape = tuple[int, ...]


class RunError(Exception):
    """A model, library or input that cannot be run, with a message naming it."""

@dataclass(frozen=True)
class Info:
    """A value's numpy dtype and its shape, None when not known before the run."""

    dtype: np.dtype
    shape: Shape | None

@dataclass
class Unit:
    """A step of the run before it is planned: one call of the import or one node."""

    nodes: list[int]  # indices into the graph's nodes, in the graph's order
    inputs: list[str]
    outputs: list[str]
    kind: str = "onnxruntime"  # or "library", "view", "constant"
    kernel: str | None = None

def static_shape(unit: Unit, nodes: Sequence[onnx.NodeProto], infos: Mapping[str, Info]) -> np.ndarray | None:
    """The output of a unit that is one Shape or Size node of a value of static shape, else None."""
    node = nodes[unit.nodes[0]]
    if unit.kind != "onnxruntime" or len(unit.nodes) != 1 or node.op_type not in ("Shape", "Size") \
            or node.domain not in ("", "ai.onnx") or shape_of(infos, node.input[0]) is None:
        return None
    dims = shape_of(infos, node.input[0])
    if node.op_type == "Size":
        return np.array(math.prod(dims), np.int64)
    attributes = {a.name: a.i for a in node.attribute}
    return np.array(dims[attributes.get("start", 0):attributes.get("end", len(dims))], np.int64)


def shape_of(infos: Mapping[str, Info], name: str) -> Shape | None:
    info = infos.get(name)
    return None if info is None else info.shape


def value_infos(model: onnx.ModelProto) -> dict[str, Info]:
    """The dtype and static shape of every value that the graph of `model`, whose shapes
    `read_model` inferred as the import does, declares."""
    graph = model.graph
    infos: dict[str, Info] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        kind = value.type.tensor_type
        if not value.type.HasField("tensor_type") or kind.elem_type == 0:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim]
        shape = tuple(dims) if kind.HasField("shape") and None not in dims else None
        infos[value.name] = Info(np.dtype(helper.tensor_dtype_to_np_dtype(kind.elem_type)), shape)
    for tensor in graph.initializer:
        infos[tensor.name] = Info(np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)), tuple(tensor.dims))
    return infos

def units_of(nodes: Sequence[onnx.NodeProto], names: Sequence[str], calls: Iterable[Any]) -> list[Unit]:
    index = {name: i for i, name in enumerate(names)}
    units, covered = [], set()
    for call in calls:
        members = sorted(index[n] for n in call.nodes)
        covered.update(members)
        units.append(Unit(members, list(call.inputs), list(call.outputs), kernel=call.kernel))
    for i, node in enumerate(nodes):
        if i not in covered:
            units.append(Unit([i], list(used_names(node)), [o for o in node.output if o]))
    return units


def classify(unit: Unit, nodes: Sequence[onnx.NodeProto], library: Library, held: Collection[str],
              infos: dict[str, Info]) -> None:
    """Where `unit` runs: on the library when it holds the unit's kernel from the same spec (`held`)."""
    first = nodes[unit.nodes[0]]
    single = len(unit.nodes) == 1
    # a Dropout the import gave a kernel is one of inference, which passes its input through
    passes_through = first.op_type in VIEWS or first.op_type == "Dropout" and unit.kernel is not None
    if single and passes_through and first.input and shape_of(infos, first.input[0]) is not None \
            and shape_of(infos, first.output[0]) is not None:
        unit.kind, unit.inputs, unit.outputs = "view", [first.input[0]], [first.output[0]]
    elif unit.kernel in held:
        unit.kind = "library"
        for name, array in zip(unit.inputs + unit.outputs, [*library.kernels[unit.kernel].inputs,
                                                            *library.kernels[unit.kernel].outputs], strict=True):
            infos[name] = Info(array.numpy_dtype, array.shape)
    else:  # the nodes themselves, not the call: ONNX Runtime reads every input they name
        members = [nodes[i] for i in unit.nodes]
        made = {o for node in members for o in node.output}
        unit.inputs = list(dict.fromkeys(n for node in members for n in used_names(node) if n not in made))
        unit.outputs = [o for node in members for o in node.output if o]


def layout_consistent(held: Collection[str], calls: Sequence[Any], blocked: Collection[str]) -> set[str]:
    """The kernels of `held` that may run: not those of the calls that share a value in blocks of
    channels (the import's `blocked`) with a call whose kernel the library lacks, since ONNX
    Runtime reads and writes that value in the graph's layout; a call so left to ONNX Runtime may
    leave more."""
    held = set(held)
    while True:
        broken = {v for v in blocked if any(c.kernel not in held for c in calls if v in c.inputs or v in c.outputs)}
        dropped = {c.kernel for c in calls if broken & {*c.inputs, *c.outputs}} & held
        if not dropped:
            return held
        held -= dropped


def ordered(units: list[Unit]) -> list[Unit]:
    """`units` in an order that runs the graph: each when its inputs exist, the earliest first."""
    maker = {name: u for u, unit in enumerate(units) for name in unit.outputs}
    after: list[set[int]] = [set() for _ in units]
    waiting = [0] * len(units)
    for u, unit in enumerate(units):
        for source in {maker[n] for n in unit.inputs if n in maker} - {u}:
            after[source].add(u)
            waiting[u] += 1
    ready = sorted((unit.nodes[0], u) for u, unit in enumerate(units) if not waiting[u])
    order = []
    while ready:
        _, u = ready.pop(0)
        order.append(units[u])
        for v in after[u]:
            waiting[v] -= 1
            if not waiting[v]:
                ready.append((units[v].nodes[0], v))
                ready.sort()
    if len(order) != len(units):
        raise RunError("the graph's calls form a cycle")
    return order


def needed(units: list[Unit], outputs: Iterable[str]) -> list[Unit]:
    """The units that the graph's outputs need, in order."""
    wanted, kept = set(outputs), []
    for unit in reversed(units):
        if wanted & set(unit.outputs):
            wanted.update(unit.inputs)
            kept.append(unit)
    return kept[::-1]


def merged(units: list[Unit], outputs: Iterable[str]) -> list[Unit]:
    """Consecutive units on ONNX Runtime joined into one session's graph (consecutive in a
    topological order, no path leaves them and comes back), which gives out only the values that
    later units or the graph's outputs read."""
    merged: list[Unit] = []
    for unit in units:
        if unit.kind == "onnxruntime" and merged and merged[-1].kind == "onnxruntime":
            last = merged[-1]
            last.nodes = sorted(last.nodes + unit.nodes)
            last.inputs = list(dict.fromkeys([*last.inputs, *(n for n in unit.inputs if n not in last.outputs)]))
            last.outputs = last.outputs + unit.outputs
        else:
            merged.append(Unit(list(unit.nodes), list(unit.inputs), list(unit.outputs), unit.kind, unit.kernel))
    read = set(outputs)
    for unit in reversed(merged):
        if unit.kind == "onnxruntime":
            unit.outputs = [o for o in unit.outputs if o in read]
        read.update(unit.inputs)
    return merged


def concatenated_in_place(units: Sequence[Unit], nodes: Sequence[onnx.NodeProto], infos: Mapping[str, Info],
                          outputs: Iterable[str]) -> dict[str, tuple[str, int]]:
    """The inputs of Concat units that the kernels making them can write straight into the
    output's buffer, each at its byte offset there (SqueezeNet's fire modules, Inception's
    branches): the dimensions before the axis all 1 (a batch of one image), so that each input is
    one contiguous stretch of the output; each input made by a library kernel, read by the Concat
    alone, and starting where a kernel's arguments may (64-byte aligned). Each such unit becomes a
    view that runs nothing. ONNX Runtime copies them."""
    readers = Counter(name for unit in units for name in unit.inputs)
    readers.update(outputs)
    made = {name for unit in units if unit.kind == "library" for name in unit.outputs}
    parts: dict[str, tuple[str, int]] = {}
    for unit in units:
        node = nodes[unit.nodes[0]]
        if unit.kind != "library" or len(unit.nodes) != 1 or node.op_type != "Concat" \
                or node.domain not in ("", "ai.onnx") or shape_of(infos, node.output[0]) is None:
            continue
        shape = infos[node.output[0]].shape
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % len(shape)
        inputs = list(node.input)
        if any(size != 1 for size in shape[:axis]) or len(set(inputs)) != len(inputs) \
                or any(readers[n] != 1 or n not in made or not _beside(shape_of(infos, n), shape, axis)
                       for n in inputs):
            continue
        offsets = np.cumsum([0, *(math.prod(infos[n].shape) * infos[n].dtype.itemsize for n in inputs)])
        if all(offset % ALIGNMENT == 0 for offset in offsets[:-1]) and offsets[-1] > 0:
            parts.update((n, (node.output[0], int(offset))) for n, offset in zip(inputs, offsets, strict=False))
            unit.kind = "view"
    return parts


def _beside(part: tuple[int, ...] | None, whole: tuple[int, ...], axis: int) -> bool:
    """Whether `part` is a stretch of `whole` along `axis` in one layout: a Concat's input and
    output both in blocks of channels or both not (its kernel converts between two layouts)."""
    return part is not None and len(part) == len(whole) \
        and all(p == w for i, (p, w) in enumerate(zip(part, whole, strict=True)) if i != axis)


def dead_after(units: Sequence[Unit], outputs: Iterable[str],
               parts: Mapping[str, tuple[str, int]] | None = None) -> dict[int, list[str]]:
    """For each position in `units`, the values that no later unit reads, nor the graph's outputs:
    a value that a view reshapes is named by the value it views, and lives as long as the views;
    a value written into another's buffer (`parts`) is named by that value."""
    parts = parts or {}
    viewed: dict[str, str] = {name: whole for name, (whole, _) in parts.items()}
    for unit in units:
        if unit.kind == "view" and unit.inputs[0] not in parts:
            viewed[unit.outputs[0]] = viewed.get(unit.inputs[0], unit.inputs[0])
    last: dict[str, float] = {}
    for position, unit in enumerate(units):
        for name in (*unit.inputs, *unit.outputs):
            last[viewed.get(name, name)] = position
    for name in outputs:
        last[viewed.get(name, name)] = math.inf
    dead: dict[int, list[str]] = {}
    for name, position in last.items():
        if position != math.inf:
            dead.setdefault(int(position), []).append(name)
    return dead


def sub_model(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], inputs: Sequence[str], outputs: Sequence[str],
              infos: Mapping[str, Info], constants: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A model of `nodes` alone: `inputs` become graph inputs, or initializers for `constants`."""
    def value_info(name: str) -> onnx.ValueInfoProto:
        info = infos.get(name)
        if info is None:  # shape inference knows nothing of it: ONNX Runtime finds its type itself
            return helper.make_empty_tensor_value_info(name)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(info.dtype), info.shape)

    made = {o for node in nodes for o in node.output}
    known = [n for n in made if n in infos and n not in outputs]
    graph = helper.make_graph(
        list(nodes), "part", [value_info(n) for n in inputs if n not in constants], [value_info(n) for n in outputs],
        [numpy_helper.from_array(np.asarray(constants[n]), n) for n in inputs if n in constants],
        value_info=[value_info(n) for n in sorted(known)])
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub

class Pool:
    """The buffers of a run's values. A value's buffer goes back to the pool once its last reader
    has run, and a value made later takes the smallest that holds it, as ONNX Runtime's allocation
    planner does: the run then writes into memory it touched a few steps before, still in cache,
    instead of a buffer of its own that the other values have pushed out. The encoder layer's
    steps, 16% slower one after the other than each alone with a buffer per value, run 8% faster
    (the smallest buffer that fits did better than the one freed last)."""

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []  # 64-byte aligned bytes
        self.allocated = 0  # bytes, over every buffer made

    def take(self, dtype: np.dtype, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """A buffer (bytes) holding `shape` of `dtype`, and the array over its start."""
        nbytes = math.prod(shape) * dtype.itemsize
        fitting = [i for i, raw in enumerate(self._free) if raw.nbytes >= nbytes]
        if fitting:
            raw = self._free.pop(min(fitting, key=lambda i: self._free[i].nbytes))
        else:
            raw = aligned_empty(np.dtype(np.uint8), (max(nbytes, 1),))
            self.allocated += raw.nbytes
        return raw, raw[:nbytes].view(dtype).reshape(shape)

    def give(self, raw: np.ndarray) -> None:
        self._free.append(raw)


def aligned_copy(value: np.ndarray) -> np.ndarray:
    copy = aligned_empty(value.dtype, value.shape)
    copy[...] = value
    return copy
