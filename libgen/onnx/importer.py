"""`dojo import`: an ONNX model as one `.dojo` spec per node the format can express, and a map.

    imported = import_model("encoder.onnx")
    write_import(imported, Path("encoder"))     # encoder/matmul.dojo, ..., encoder/model.json
    for s in imported.skipped:
        print(s.node, s.op, s.feature, s.detail)

The model is read by model_file.py (`load_model`, within limits.py), its inputs fixed at
`input_shapes` (`--input-shape`), each Cast to BOOL moved after the moves of its result (select.py's
casts_late) and its shapes inferred
(shapes.py: ONNX Runtime's symbolic shape inference). Each node becomes a kernel at its static
shapes through `catalogue.kernel_for`, a Where or a Cast of a boolean through select.py, which
computes the booleans of its condition inside its kernel (model.json's `computed_in`); a node that
cannot (an operator the format cannot express, one not written yet, a symbolic or unknown shape,
a dtype the format does not have) is Skipped with the feature, never approximated.

Constants: initializers and Constant nodes are known at import, and so are the results of Shape
and Size at static shapes. Nodes that only move such constants around as exported models do
(FOLDABLE: Identity, Cast, Unsqueeze, Concat, Gather, Slice with constant inputs), and any node
of constant inputs that makes integers or booleans (shape arithmetic), are evaluated
here with onnx's numpy reference implementation, so that a Reshape fed by Shape -> Gather ->
Concat sees its shape. Folded nodes have neither a kernel nor a reason: in model.json they have
`"kernel": null, "unsupported": null`, and a runner computes them as it computes skipped nodes.
A BatchNormalization of constant statistics, or a Mul or Add of one constant a channel, after a
Conv of constant weights is folded into them (conv_fold.py, as ONNX Runtime does): the Conv's call
reads derived weights and writes the folded node's output, and covers the nodes. Some kernels read constants they derive
themselves (a Conv by Winograd's algorithm, winograd.py, its transformed weights; a
RotaryEmbedding its caches' rows at constant positions). The derived constants are model.json's
`constants` (with what each comes from, among the model's own) and DIR/constants.npz.

Identical kernels (same operator, shapes and attributes, hence the same text) are one kernel and
one file, so that a model's repeated layers are tuned once; a kernel is named after its operator
(`matmul`, `matmul_2`, ...), a name valid in C and Python that the library's module does not use.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dojo_ir import DojoError, load
from runner.files import write_arrays, write_atomically

from ..kernels import RESERVED
from . import limits
from .blocked import ACROSS_CHANNELS, blocked_groups
from .catalogue import FOLDED, NOT_EXPRESSIBLE, kernel_for
from .conv_fold import FOLDED_OPS, fold_into_conv
from .fuse import FUSABLE, fuse_graph
from .model_file import ModelError, load_model
from .nodes import DTYPES, Derived, Kernel, Node, Unsupported, Value, fresh_name, identifier
from .reads import used_names
from .registry import OPERATORS
from .select import Graph, casts_late, computed_inside, select_kernel, selects
from .shapes import ShapeError, infer_shapes, with_input_shapes

FOLDABLE = frozenset({"Identity", "Cast", "Unsqueeze", "Concat", "Gather", "Slice"})
INTEGRAL = frozenset({onnx.TensorProto.BOOL, onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                      onnx.TensorProto.INT8, onnx.TensorProto.UINT64, onnx.TensorProto.UINT32,
                      onnx.TensorProto.UINT16, onnx.TensorProto.UINT8})
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Call:
    """One kernel call of the model: which nodes it covers and its arguments."""

    kernel: str                 # the kernel's name = its file's stem (identical kernels share one)
    nodes: tuple[str, ...]      # the ONNX node names it computes (several when fused)
    inputs: tuple[str, ...]     # ONNX value names in the kernel's input order
    outputs: tuple[str, ...]    # ONNX value names in the kernel's output order


@dataclass(frozen=True)
class Skipped:
    """A node without a kernel, and why (`feature` is a key of nodes.FEATURES)."""

    node: str
    op: str
    feature: str
    detail: str


@dataclass(frozen=True)
class Imported:
    """The result of an import. `inputs`, `outputs` and `nodes` are model.json's entries of the
    same names (the graph's tensors, and every node with its kernel or reason)."""

    model: str
    kernels: dict[str, str]     # kernel name -> .dojo text (with its header comment)
    calls: tuple[Call, ...]     # in an order that runs the graph
    skipped: tuple[Skipped, ...]
    fused: bool = False
    inputs: tuple[dict[str, Any], ...] = ()
    outputs: tuple[dict[str, Any], ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    constants: Mapping[str, Derived] = field(default_factory=dict)  # written to DIR/constants.npz
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # as --input-shape fixed them
    blocked: Mapping[str, int] = field(default_factory=dict)  # value -> channels a block (blocked.py)

    def to_json(self) -> dict[str, Any]:
        """DIR/model.json."""
        return {"format": 1, "model": self.model, "fused": self.fused,
                "input_shapes": {name: list(shape) for name, shape in self.input_shapes.items()},
                "inputs": list(self.inputs),
                "outputs": list(self.outputs),
                "blocked": dict(self.blocked),
                "constants": [derived.json(name) for name, derived in self.constants.items()],
                "calls": [{"kernel": c.kernel, "file": f"{c.kernel}.dojo", "nodes": list(c.nodes),
                           "inputs": list(c.inputs), "outputs": list(c.outputs)} for c in self.calls],
                "nodes": list(self.nodes)}


def static_model(name: str, model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
                 ) -> onnx.ModelProto:
    """`model` with its inputs at `input_shapes` and every value's shape inferred (shapes.py);
    ModelError naming the file, or the option for a shape that does not fit."""
    try:
        return infer_shapes(casts_late(with_input_shapes(model, input_shapes or {})))
    except ShapeError as error:
        raise ModelError(f"{name}: error: {error}") from None
    except (onnx.shape_inference.InferenceError, ValueError) as error:
        raise ModelError(f"{name}: error: the model's shapes cannot be inferred: {error}") from None


@dataclass(frozen=True)
class Tensor:
    """What the graph says of a value: its ONNX element type and dims (an int, or a str for a
    symbolic or unknown one); dims None when even the rank is unknown."""

    elem_type: int
    dims: tuple[int | str, ...] | None

    def json(self, name: str) -> dict[str, Any]:
        """model.json's entry: the format's dtype, else numpy's name for it (bool, float16)."""
        dtype = DTYPES.get(self.elem_type)
        if dtype is None and self.elem_type:
            dtype = helper.tensor_dtype_to_np_dtype(self.elem_type).name
        return {"name": name, "dtype": dtype, "shape": None if self.dims is None else list(self.dims)}


def _tensor(info: onnx.ValueInfoProto) -> Tensor | None:
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        return None
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return Tensor(t.elem_type, None)
    return Tensor(t.elem_type, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                     for d in t.shape.dim))


def _tensors(graph: onnx.GraphProto) -> dict[str, Tensor]:
    found = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor = _tensor(info)
        if tensor is not None:
            found[info.name] = tensor
    return found


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Plain Python values: bytes decoded, tensors as numpy arrays (subgraphs stay protos)."""
    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        if isinstance(value, onnx.TensorProto):
            return numpy_helper.to_array(value)
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return {a.name: plain(helper.get_attribute_value(a)) for a in node.attribute}


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):  # a string tensor's elements
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return f"<{type(value).__name__}>"  # a subgraph


def _initializers(name: str, graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    constants = {}
    for tensor in graph.initializer:
        if any(size < 0 for size in tensor.dims):
            raise ModelError(f"{name}: error: initializer `{tensor.name}` has a negative size: {list(tensor.dims)}")
        try:
            constants[tensor.name] = numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError) as error:  # its data does not fill its shape; an unknown type
            raise ModelError(f"{name}: error: initializer `{tensor.name}` cannot be read: {error}") from None
    return constants


def _node_names(graph: onnx.GraphProto) -> list[str]:
    """Each node's name, made up from its operator and position when it has none or a taken one;
    a made-up name is none that the graph gives."""
    taken = {node.name for node in graph.node}
    names: list[str] = []
    seen: set[str] = set()
    for i, node in enumerate(graph.node):
        name = node.name
        if not name or name in seen:
            name = fresh_name(f"{node.name or node.op_type}_{i}", taken)
            taken.add(name)
        seen.add(name)
        names.append(name)
    return names


# -- constants ----------------------------------------------------------------------------------------


def _fold(node: onnx.NodeProto, opset: int, constants: Mapping[str, np.ndarray],
          tensors: Mapping[str, Tensor]) -> list[np.ndarray] | None:
    """The outputs of `node` when it is a constant at import, else None."""
    if node.op_type in ("Shape", "Size"):
        dims = tensors.get(node.input[0], Tensor(0, None)).dims
        if node.input[0] in constants:
            dims = constants[node.input[0]].shape
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(dims)), np.int64)]
        attributes = _attributes(node)
        return [np.array(dims[attributes.get("start", 0):attributes.get("end", len(dims))], np.int64)]
    constant = all(n in constants for n in used_names(node))
    if node.op_type not in FOLDED and not (constant and (node.op_type in FOLDABLE or _integral(node, tensors))):
        return None
    if not _small(node, tensors):
        return None  # a kernel's, or ONNX Runtime's, to compute: not the import's memory
    # onnx's reference implementation at the model's opset: the attributes' meaning changed over opsets
    inputs = [n for n in node.input if n]
    graph = helper.make_graph([node], "fold", [helper.make_tensor_value_info(n, 0, None) for n in inputs],
                              [helper.make_tensor_value_info(n, 0, None) for n in node.output if n])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {n: constants[n] for n in inputs})]
    except (ValueError, TypeError, IndexError, RuntimeError):
        return None  # not foldable after all (an index out of range...): the node is imported as any other


def _small(node: onnx.NodeProto, tensors: Mapping[str, Tensor]) -> bool:
    """Whether every output of `node` is known to hold at most limits.FOLDED_ELEMENTS: an output of
    unknown shape may be as large as its inputs' values say (a Range to 2**40)."""
    for output in filter(None, node.output):
        dims = tensors.get(output, Tensor(0, None)).dims
        if dims is None or not all(isinstance(d, int) for d in dims) or math.prod(dims) > limits.FOLDED_ELEMENTS:
            return False
    return True


def _integral(node: onnx.NodeProto, tensors: Mapping[str, Tensor]) -> bool:
    """Whether `node` makes only integers or booleans, and is not random: of constant inputs, that
    is shape arithmetic or a mask's condition, which exporters compute in the graph (Equal ->
    Where -> Expand), and no kernel can hold a boolean."""
    outputs = [tensors.get(n) for n in node.output if n]
    return NOT_EXPRESSIBLE.get(node.op_type, ("", ""))[0] != "random" and bool(outputs) and all(
        t is not None and t.elem_type in INTEGRAL for t in outputs)


# -- nodes ------------------------------------------------------------------------------------------------


def _value(name: str, tensors: Mapping[str, Tensor], constants: Mapping[str, np.ndarray]) -> Value:
    """The value `name` at its static shape; Unsupported when its shape or dtype is not one the
    format has."""
    if name in constants:
        array = constants[name]
        dtype = DTYPES.get(helper.np_dtype_to_tensor_dtype(array.dtype)) if array.dtype != object else None
        if dtype is None:
            raise Unsupported("dtype", f"`{name}` is {array.dtype}")
        return Value(name, dtype, tuple(int(d) for d in array.shape), array)
    tensor = tensors.get(name)
    if tensor is None or tensor.dims is None:
        raise Unsupported("dynamic shape", f"`{name}` has no known shape")
    shown = f"`{name}` has shape [{', '.join(map(str, tensor.dims))}]"
    if not all(isinstance(d, int) for d in tensor.dims):
        raise Unsupported("dynamic shape", shown)
    if 0 in tensor.dims:
        raise Unsupported("empty tensor", shown)
    if math.prod(tensor.dims) > limits.TENSOR_ELEMENTS:
        raise Unsupported("too large", f"{shown}, more than {limits.TENSOR_ELEMENTS:,} elements")
    if tensor.elem_type not in DTYPES:
        raise Unsupported("dtype", f"`{name}` is {onnx.TensorProto.DataType.Name(tensor.elem_type).lower()}")
    return Value(name, DTYPES[tensor.elem_type], tuple(tensor.dims))


def _loose_value(name: str, tensors: Mapping[str, Tensor], constants: Mapping[str, np.ndarray]) -> Value:
    """The value as far as it is known, for a node without a kernel (fusion reads only its name)."""
    try:
        return _value(name, tensors, constants)
    except Unsupported:
        return Value(name, "?", ())


def _kernel(node: onnx.NodeProto, name: str, opset: int, tensors: Mapping[str, Tensor],
            constants: Mapping[str, np.ndarray], rows_read: bool = False) -> tuple[Node, Kernel | Unsupported]:
    """The catalogue's node and its kernel, or why it has none. The operator's own reason comes
    before its shapes': an Equal is refused for comparing, not for its boolean output."""
    try:
        if node.domain not in DEFAULT_DOMAINS:
            raise Unsupported("not written", f"operator {node.op_type} of domain `{node.domain}`")
        if node.op_type in NOT_EXPRESSIBLE or node.op_type not in OPERATORS:
            kernel_for(_loose_node(node, name, opset, tensors, constants))  # the operator's reason, before shapes
        full = replace(_node(node, name, opset, lambda n: _value(n, tensors, constants)), rows_read=rows_read)
        return full, _checked(kernel_for, full)
    except Unsupported as why:
        return _loose_node(node, name, opset, tensors, constants), why


def _read_in_rows(graph: onnx.GraphProto) -> set[str]:
    """The values that a window along the channels (blocked.ACROSS_CHANNELS: an LRN) reads, directly
    or through the elementwise nodes and pools (fuse.FUSABLE) between: those stay in the graph's
    layout whatever the kernel writing them (Node.rows_read)."""
    read: set[str] = set()
    for node in reversed(graph.node):
        if node.op_type in ACROSS_CHANNELS or node.op_type in FUSABLE and read.intersection(node.output):
            read.update(n for n in node.input if n)
    return read


def _node(node: onnx.NodeProto, name: str, opset: int, value: Callable[[str], Value]) -> Node:
    """The catalogue's node of `node`, each of its values given by `value`."""
    return Node(name, node.op_type, tuple(value(n) if n else None for n in node.input),
                tuple(value(n) for n in node.output if n), _attributes(node), opset)


def _without_unread_optional_outputs(node: onnx.NodeProto, opset: int, readers: Counter) -> onnx.NodeProto:
    """`node` as if the model had left out the optional outputs that nothing reads (opset 9's
    Dropout mask, MaxPool's indices): a kernel need not write them, nor their dtype or shape be
    one the format has."""
    if node.domain not in DEFAULT_DOMAINS or not onnx.defs.has(node.op_type):
        return node
    declared = onnx.defs.get_schema(node.op_type, opset).outputs
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    kept = [o if i >= len(declared) or declared[i].option != optional or readers[o] else ""
            for i, o in enumerate(node.output)]
    while kept and not kept[-1]:
        kept.pop()
    if kept == list(node.output):
        return node
    trimmed = onnx.NodeProto()
    trimmed.CopyFrom(node)
    del trimmed.output[:]
    trimmed.output.extend(kept)
    return trimmed


def _loose_node(node: onnx.NodeProto, name: str, opset: int, tensors: Mapping[str, Tensor],
                constants: Mapping[str, np.ndarray]) -> Node:
    """The node as far as it is known, for a node without a kernel (fusion reads only its names)."""
    return _node(node, name, opset, lambda n: _loose_value(n, tensors, constants))


def _select_graph(tensors: Mapping[str, Tensor], constants: Mapping[str, np.ndarray]) -> Graph:
    """The graph as a select reads it (select.py); its makers are filled in as nodes are imported."""
    def is_boolean(name: str) -> bool:
        if name in constants:
            return constants[name].dtype == np.bool_
        return name in tensors and tensors[name].elem_type == onnx.TensorProto.BOOL

    return Graph({}, is_boolean, constants.get, lambda n: _value(n, tensors, constants))


def _adopt_derived(kernel: Kernel, derived: dict[str, Derived], taken: set[str]) -> None:
    """List the constants that `kernel` computed (Winograd's weights) in `derived`, under names
    not `taken` (the graph's and `derived`'s, to which it adds those it gives), each coming from the
    model's own constants (through those of `derived` it was computed from)."""
    for name, made in list(kernel.derived.items()):
        fresh = fresh_name(name, taken)
        taken.add(fresh)
        sources = tuple(s for n in made.sources for s in (derived[n].sources if n in derived else (n,)))
        derived[fresh] = kernel.derived[fresh] = Derived(made.value, sources, made.how)
        if fresh != name:
            del kernel.derived[name]
            kernel.sources.update((array, fresh) for array, source in kernel.sources.items() if source == name)


def _checked(build: Callable[[Node], Kernel], node: Node) -> Kernel:
    """`build(node)`, a kernel the format accepts. A node that passes onnx's checker can still
    declare shapes its operator cannot give (the checker does not infer them), and a builder then
    finds its arithmetic does not add up; that node is invalid, not the import."""
    try:
        kernel = build(node)
        load(kernel.render())
    except (AssertionError, ArithmeticError, LookupError, StopIteration, TypeError, ValueError, DojoError) as error:
        raise Unsupported("invalid", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                          ) from None
    return kernel


# -- kernels ------------------------------------------------------------------------------------------------


def _comment(model: str, nodes: Sequence[Node], sharing: int) -> str:
    named = ", ".join(f'"{n.name}" ({n.op})' for n in nodes)
    text = f"From {model}, {'nodes' if len(nodes) > 1 else 'node'} {named}."
    return text + (f"\nThe same kernel serves {sharing - 1} more node(s) of the model." if sharing > 1 else "")


def _name(base: str, taken: set[str]) -> str:
    base = identifier(base).lstrip("_") or "kernel"
    return identifier(f"{base}_kernel" if base in RESERVED else base, taken, separator="_")


def _calls(model: str, groups: list[tuple[tuple[Node, ...], Kernel]]) -> tuple[dict[str, str], list[Call]]:
    """One kernel per distinct text, named after its operator; one call per group."""
    keys = [kernel.render() for _, kernel in groups]  # before naming: identical nodes give identical texts
    members: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    kernels: dict[str, str] = {}
    name_of: dict[str, str] = {}
    for key, indices in members.items():
        nodes, kernel = groups[indices[0]]
        name_of[key] = _name(kernel.name, set(kernels))
        kernel.name = name_of[key]
        kernels[kernel.name] = kernel.render(comment="\n".join([_comment(model, nodes, len(indices)), *kernel.notes]))
    calls = [Call(name_of[key], tuple(n.name for n in nodes), tuple(kernel.sources[a.name] for a in kernel.inputs),
                  tuple(kernel.sources[a.name] for a in kernel.outputs))
             for key, (nodes, kernel) in zip(keys, groups, strict=True)]
    return kernels, calls


def import_model(model: onnx.ModelProto | str | Path, *, fuse: bool = False,
                 input_shapes: Mapping[str, Sequence[int]] | None = None) -> Imported:
    """The kernels, calls and skipped nodes of `model` (a file or a loaded model), its inputs at
    `input_shapes` where given; ModelError when it cannot be read."""
    name, proto = load_model(model)
    importer = GraphImporter(name, static_model(name, proto, input_shapes))
    for onnx_node, node_name in zip(importer.graph.node, _node_names(importer.graph), strict=True):
        importer.visit(onnx_node, node_name)
    return importer.imported(fuse, input_shapes or {})


class GraphImporter:
    """One model's import in progress, its state in one place as TVM's ONNX importer keeps it (its
    GraphProto): the model's values and constants, the catalogue's nodes with their kernels so far,
    each node's record for model.json, and what folding took in. `visit` takes the graph's nodes
    in order; `imported` then groups them into kernels and calls."""

    def __init__(self, name: str, proto: onnx.ModelProto):
        self.name, self.graph = name, proto.graph
        self.opset = next((o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS), 1)
        self.tensors = _tensors(self.graph)
        self.constants = _initializers(name, self.graph)
        self.graph_nodes: list[tuple[Node, Kernel | None]] = []
        self.records: list[dict[str, Any]] = []
        self.skipped: list[Skipped] = []
        self.derived: dict[str, Derived] = {}
        self.absorbed: dict[str, list[Node]] = {}  # a kernel's node -> the nodes folded into it
        self.made_by: dict[str, tuple[int, onnx.NodeProto]] = {}  # a value -> its node's entry in graph_nodes
        self.readers = Counter(n for node in self.graph.node for n in used_names(node))
        self.readers.update(o.name for o in self.graph.output)
        self.values = {*self.tensors, *(n for node in self.graph.node for n in (*node.input, *node.output))}
        self.around = _select_graph(self.tensors, self.constants)
        self.computes: dict[str, set[str]] = {}  # a select's node -> the boolean nodes its kernel computes
        self.read_in_rows = _read_in_rows(self.graph)

    def visit(self, onnx_node: onnx.NodeProto, node_name: str) -> None:
        """Import the graph's next node: folded into constants or into the product before it, a
        kernel, or skipped with the reason."""
        record = {"name": node_name, "op": onnx_node.op_type, "inputs": list(onnx_node.input),
                  "outputs": list(onnx_node.output), "attributes": {k: _jsonable(v) for k, v in
                                                                     _attributes(onnx_node).items()},
                  "kernel": None, "unsupported": None}
        self.records.append(record)
        onnx_node = _without_unread_optional_outputs(onnx_node, self.opset, self.readers)
        default = onnx_node.domain in DEFAULT_DOMAINS
        folded = _fold(onnx_node, self.opset, self.constants, self.tensors) if default else None
        if folded is not None:
            self.constants.update(zip((n for n in onnx_node.output if n), folded, strict=False))
            return
        if self._fold_into_product(onnx_node, node_name):
            return
        if default and selects(onnx_node, self.around):
            node, result = self._select(onnx_node, node_name)
        else:
            node, result = _kernel(onnx_node, node_name, self.opset, self.tensors, self.constants,
                                   self._rows_read(onnx_node))
        self.around.makers.update((o, (onnx_node, node_name)) for o in onnx_node.output)
        if isinstance(result, Unsupported):
            self.skipped.append(Skipped(node_name, onnx_node.op_type, result.feature, result.detail))
            record["unsupported"] = {"feature": result.feature, "detail": result.detail}
            self.graph_nodes.append((node, None))
        else:
            self.made_by.update((o, (len(self.graph_nodes), onnx_node)) for o in onnx_node.output)
            self.graph_nodes.append((node, result))

    def _rows_read(self, onnx_node: onnx.NodeProto) -> bool:
        """Whether an LRN reads an output of the node in rows (Node.rows_read)."""
        return not self.read_in_rows.isdisjoint(onnx_node.output)

    def _select(self, onnx_node: onnx.NodeProto, name: str) -> tuple[Node, Kernel | Unsupported]:
        """The node of a Where (or a Cast of a boolean) and its kernel, the condition computed
        inside; the boolean nodes it computes join `computes`."""
        try:
            node, kernel, inside = select_kernel(onnx_node, name, self.opset, self.around)
            result = _checked(lambda _: kernel, node)
        except Unsupported as why:
            return _loose_node(onnx_node, name, self.opset, self.tensors, self.constants), why
        self.computes[name] = inside
        return node, result

    def _fold_into_product(self, onnx_node: onnx.NodeProto, name: str) -> bool:
        """Fold a BatchNormalization of constants, or a Mul or Add of one constant a channel, into
        the Conv of constant weights whose output only it reads (conv_fold.py): the Conv's entry in
        `graph_nodes` becomes the Conv with the derived weights, writing the node's output, which
        `absorbed` lists under it (a chain of them folds one after the other); the derived
        constants join `constants` under names that neither it nor the graph's values have, each
        with the model's own constants it comes from. Whether it did."""
        if onnx_node.op_type not in FOLDED_OPS or onnx_node.domain not in DEFAULT_DOMAINS:
            return False
        read = [n for n in onnx_node.input if n in self.made_by and self.readers[n] == 1]
        if not read:
            return False
        position, conv = self.made_by[read[0]]
        product, kernel = self.graph_nodes[position]
        if kernel is None:
            return False
        folded = fold_into_conv(conv, onnx_node, self.constants, self.values | self.constants.keys())
        if folded is None:
            return False
        node, result = _kernel(folded.node, product.name, self.opset, self.tensors,
                               {**self.constants, **folded.constants}, self._rows_read(folded.node))
        if isinstance(result, Unsupported):
            return False
        self.constants.update(folded.constants)
        self.derived.update((n, Derived(value, self._model_sources(folded.sources[n]),
                                        f"{product.name}'s weights with {name} folded in"))
                            for n, value in folded.constants.items())
        self.graph_nodes[position] = (node, result)
        self.made_by[onnx_node.output[0]] = (position, folded.node)
        self.absorbed.setdefault(product.name, []).append(
            _loose_node(onnx_node, name, self.opset, self.tensors, self.constants))
        return True

    def _model_sources(self, names: Sequence[str]) -> tuple[str, ...]:
        """`names`, each derived constant among them replaced by the model's constants it comes from."""
        return tuple(dict.fromkeys(m for n in names for m in (self.derived[n].sources if n in self.derived else (n,))))

    def imported(self, fuse: bool, input_shapes: Mapping[str, Sequence[int]]) -> Imported:
        """The import of the nodes visited: the booleans that selects compute dropped, derived
        constants named, nodes grouped (fused or one a call) into kernels and calls."""
        inside = computed_inside(self.graph, [r["name"] for r in self.records], self.computes)
        skipped = [s for s in self.skipped if s.node not in inside]
        graph_nodes = [(node, kernel) for node, kernel in self.graph_nodes if node.name not in inside]
        for record in self.records:
            if record["name"] in inside:
                record["unsupported"], record["computed_in"] = None, inside[record["name"]]
        taken = self.values | self.constants.keys() | self.derived.keys()
        for _, kernel in graph_nodes:
            if kernel is not None and kernel.derived:
                _adopt_derived(kernel, self.derived, taken)
        if fuse:
            groups = [(tuple(nodes), kernel) for nodes, kernel in
                      fuse_graph(graph_nodes, keep={o.name for o in self.graph.output})]
        else:
            groups = [((node, ), kernel) for node, kernel in graph_nodes if kernel is not None]
        groups = [(tuple(m for node in nodes for m in (node, *self.absorbed.get(node.name, ()))), kernel)
                  for nodes, kernel in groups]
        covered = {node.name for nodes, _ in groups for node in nodes}
        outside = {v for r in self.records if r["name"] not in covered for v in r["inputs"]}
        groups, blocks = blocked_groups(groups, keep={o.name for o in self.graph.output}, outside=outside)
        kernels, calls = _calls(self.name, groups)
        by_node = {node: call.kernel for call in calls for node in call.nodes}
        for record in self.records:
            record["kernel"] = by_node.get(record["name"])
        known = set(self.constants)
        graph = self.graph
        return Imported(
            model=self.name, kernels=kernels, calls=tuple(calls), skipped=tuple(skipped), fused=fuse,
            constants={n: d for n, d in self.derived.items() if any(n in call.inputs for call in calls)},
            inputs=tuple(_tensor(i).json(i.name) for i in graph.input if i.name not in known and _tensor(i)),
            outputs=tuple(_tensor(o).json(o.name) for o in graph.output if _tensor(o)),
            nodes=tuple(self.records), input_shapes={n: tuple(s) for n, s in input_shapes.items()}, blocked=blocks)


def write_import(imported: Imported, out: Path) -> list[Path]:
    """DIR/KERNEL.dojo for each kernel and DIR/model.json, each replaced whole or not at all. The
    files an earlier import into DIR wrote (by its model.json) and this one does not are removed;
    no other file of DIR is touched."""
    out.mkdir(parents=True, exist_ok=True)
    earlier = _written_by(out / "model.json")
    written = []
    for name, text in imported.kernels.items():
        path = out / f"{name}.dojo"
        write_atomically(path, text.encode())
        written.append(path)
    if imported.constants:
        path = out / "constants.npz"
        write_arrays(path, {name: derived.value for name, derived in imported.constants.items()})
        written.append(path)
    path = out / "model.json"
    write_atomically(path, (json.dumps(imported.to_json(), indent=1) + "\n").encode())
    for name in earlier - {p.name for p in written}:
        (out / name).unlink(missing_ok=True)
    return [*written, path]


def _written_by(model_json: Path) -> set[str]:
    """The file names (within its folder) that the import which wrote `model_json` wrote."""
    try:
        record = json.loads(model_json.read_text(encoding="utf-8"))
        files = {call["file"] for call in record["calls"]} | ({"constants.npz"} if record["constants"] else set())
    except (OSError, ValueError, RecursionError, KeyError, TypeError):  # none, or not one of ours: keep all
        return set()
    return {name for name in files if isinstance(name, str) and Path(name).name == name
            and name.endswith((".dojo", ".npz")) and not name.startswith(".")}
