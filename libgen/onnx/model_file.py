"""Reading an ONNX model file as someone else wrote it: within the limits (limits.py) before
anything is read, its external data only from its own folder, every node checked against its
operator's schema (the graph as a whole, so that an If, Loop or Scan body may read the values
around it), its versions and element types ones ONNX defines. `load_model` gives the model or a
ModelError naming the file; the importer and the model runner start from it."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper

from . import limits


class ModelError(Exception):
    """A model that cannot be read or whose shapes cannot be inferred; the message names the file."""


def load_model(model: onnx.ModelProto | str | Path) -> tuple[str, onnx.ModelProto]:
    """The model's name (its file's) and the model; ModelError naming the file when it is none."""
    if isinstance(model, onnx.ModelProto):
        name, proto = f"{model.graph.name or 'model'}.onnx", model
    else:
        path = Path(model)
        name = path.name
        try:
            proto = _read(path)
        except (OSError, ValueError, TypeError, DecodeError, onnx.checker.ValidationError) as error:
            raise ModelError(f"{path}: error: cannot read an ONNX model: {error}") from None
        if not proto.HasField("graph"):  # protobuf reads an empty file, and some others, as an empty message
            raise ModelError(f"{path}: error: cannot read an ONNX model: it has no graph")
    graph = proto.graph
    _check_numbers(name, proto)
    # every node as its operator's schema defines it, so that the catalogue reads well-formed attributes
    # (the nodes alone: check_model also wants every declared type to have a shape, which ORT does not)
    context = onnx.checker.C.CheckerContext()
    context.ir_version = proto.ir_version
    context.opset_imports = {o.domain: o.version for o in proto.opset_import}
    try:
        # the graph as a whole, so that an If, Loop or Scan body may read the values around it
        onnx.checker.C.check_graph(_nodes_to_check(graph).SerializeToString(), context,
                                   onnx.checker.C.LexicalScopeContext())
    except (onnx.checker.ValidationError, ValueError) as error:  # a name that is not UTF-8: a ValueError
        message = " ".join(str(error).split()) or type(error).__name__
        raise ModelError(f"{name}: error: not a valid ONNX model: {message}") from None
    made = {value.name for value in (*graph.input, *graph.initializer)} | {""}
    for node in graph.node:
        missing = next((value for value in node.input if value not in made), None)
        if missing is not None:  # ONNX lists a graph's nodes in an order that runs it
            raise ModelError(f"{name}: error: not a valid ONNX model: node `{node.name or node.op_type}` reads "
                             f"`{missing}`, which no earlier node makes and the graph does not give")
        made.update(node.output)
    names = [text for node in graph.node for text in (node.name, node.op_type, node.domain, *node.input,
                                                       *node.output)]
    names += [value.name for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)]
    if not all(isinstance(text, str) for text in names):  # protobuf gives a string that is not UTF-8 as bytes
        raise ModelError(f"{name}: error: not a valid ONNX model: a name is not UTF-8 text")
    return name, proto


_ELEMENT_TYPES = frozenset(onnx.TensorProto.DataType.values())


def _check_numbers(name: str, proto: onnx.ModelProto) -> None:
    """ModelError for a version or an element type that no ONNX defines (onnx's checker takes the
    versions as 32-bit integers, and names element types by a table)."""
    for version, what in [(proto.ir_version, "IR version"),
                          *((o.version, f"opset version of domain `{o.domain}`" if o.domain else "opset version")
                            for o in proto.opset_import)]:
        if not 0 <= version < 2**31:
            raise ModelError(f"{name}: error: not a valid ONNX model: {what} {version} is not one ONNX defines")
    graph = proto.graph
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type not in _ELEMENT_TYPES:
            raise ModelError(f"{name}: error: not a valid ONNX model: value `{value.name}` has element type "
                             f"{value.type.tensor_type.elem_type}, which ONNX does not define")
    for tensor in graph.initializer:
        if tensor.data_type not in _ELEMENT_TYPES:
            raise ModelError(f"{name}: error: not a valid ONNX model: initializer `{tensor.name}` has element "
                             f"type {tensor.data_type}, which ONNX does not define")


def _nodes_to_check(graph: onnx.GraphProto) -> onnx.GraphProto:
    """The graph's nodes between its inputs (its initializers among them, without their data) and
    outputs, each given a shape if it has none: the checker wants one on the main graph's values,
    and ONNX Runtime does not, so neither does the import."""
    checked = onnx.GraphProto(name=graph.name, node=graph.node)
    given = {value.name for value in graph.input}
    checked.input.extend([*graph.input, *(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                                          for t in graph.initializer if t.name not in given)])
    checked.output.extend(graph.output)
    for value in (*checked.input, *checked.output):
        if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
            value.type.tensor_type.shape.SetInParent()
    return checked


def _read(path: Path) -> onnx.ModelProto:
    """The model at `path`, its external data read only after its size is checked against the limits."""
    _check_file(path, limits.MODEL_BYTES, "the model")
    proto = onnx.load(path, load_external_data=False)
    external = 0
    for tensor in _all_tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = external_data_helper.ExternalDataInfo(tensor)
            where = path.parent / info.location
            size = _check_file(where, limits.EXTERNAL_DATA_BYTES, f"tensor `{tensor.name}`'s external data")
            external += info.length if info.length is not None else max(0, size - (info.offset or 0))
            if external > limits.EXTERNAL_DATA_BYTES:
                raise ValueError(f"its external data passes the limit of {limits.EXTERNAL_DATA_BYTES:,} bytes at "
                                 f"tensor `{tensor.name}` (docs/onnx.md, Limits)")
    # onnx refuses external data outside the model's directory (an absolute path, `..`, a link)
    external_data_helper.load_external_data_for_model(proto, str(path.parent))
    return proto


def _check_file(path: Path, limit: int, what: str) -> int:
    """The size of the regular file at `path`; ValueError for another kind of file (a pipe or a device
    would be read forever) or one over `limit` bytes."""
    status = path.stat()
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{what} is not a regular file")
    if status.st_size > limit:
        raise ValueError(f"{what} has {status.st_size:,} bytes, over the limit of {limit:,} (docs/onnx.md, Limits)")
    return status.st_size


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """The graph's initializers and its nodes' tensor attributes, subgraphs' included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _all_tensors(subgraph)
