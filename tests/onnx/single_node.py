"""One ONNX node, run by ONNX Runtime and by its kernel from the catalogue.

    text = check_node("Gemm", {"a": a, "b": b, "c": c}, {"transB": 1, "alpha": 0.5})

builds a model of the single node with `onnx.helper`, runs it with ONNX Runtime, turns the node
into its kernel (`catalogue.kernel_for`) at the shapes ORT's outputs have, runs the kernel with
the reference interpreter on the same inputs and asserts that the results agree. Inputs named in
`constants` are initializers, as a model's weights and shape tensors are, so the kernel sees
their values; an input given as None is an absent optional input (ONNX's empty name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from dojo_ir import interpret, load
from libgen.onnx.catalogue import kernel_for
from libgen.onnx.nodes import Node, Value

OPSET = 21
FORMAT_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
                 np.dtype(np.int64): "i64"}


def single_node_model(op: str, inputs: Mapping[str, np.ndarray | None], attributes: Mapping[str, Any],
                      constants: Collection[str], outputs: int, opset: int) -> onnx.ModelProto:
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:  # ORT crashes on some operators given a trailing empty name
        names.pop()
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], name="node", **attributes)
    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                    for name, value in inputs.items() if value is not None and name not in constants]
    initializers = [numpy_helper.from_array(value, name) for name, value in inputs.items()
                    if value is not None and name in constants]
    graph = helper.make_graph([node], "single", graph_inputs, [], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    # shape inference leaves some outputs out (GroupNormalization's function body reshapes through
    # runtime shapes); ORT takes an output of the first input's type and any shape
    first = next(value for value in inputs.values() if value is not None)
    unknown = helper.make_tensor_value_info("", helper.np_dtype_to_tensor_dtype(first.dtype), None)
    for i in range(outputs):
        output = model.graph.output.add()
        output.CopyFrom(inferred.get(f"y{i}", unknown))
        output.name = f"y{i}"
    return model


def run_ort(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray | None],
            constants: Collection[str]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {name: value for name, value in inputs.items() if value is not None and name not in constants}
    return session.run(None, feed)


def node_of(op: str, inputs: Mapping[str, np.ndarray | None], attributes: Mapping[str, Any],
            constants: Collection[str], expected: list[np.ndarray], opset: int = OPSET) -> Node:
    """The catalogue's view of the node: its values at the shapes of `inputs` and of ORT's outputs."""
    values = tuple(None if value is None else
                   Value(name, FORMAT_DTYPES[value.dtype], tuple(value.shape), value if name in constants else None)
                   for name, value in inputs.items())
    results = tuple(Value(f"y{i}", FORMAT_DTYPES[array.dtype], tuple(array.shape)) for i, array in enumerate(expected))
    # the importer gives a tensor attribute to the catalogue as its numpy array, as here
    plain = {key: numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value
             for key, value in attributes.items()}
    return Node("node", op, values, results, plain, opset)


def check_node(op: str, inputs: Mapping[str, np.ndarray | None], attributes: Mapping[str, Any] | None = None, *,
               constants: Collection[str] = (), outputs: int = 1, opset: int = OPSET, rtol: float = 1e-4,
               atol: float = 1e-5) -> str:
    """Assert that the kernel of the node computes what ONNX Runtime does; return its text."""
    attributes = dict(attributes or {})
    model = single_node_model(op, inputs, attributes, constants, outputs, opset)
    expected = run_ort(model, inputs, constants)
    kernel = kernel_for(node_of(op, inputs, attributes, constants, expected, opset))
    text = kernel.render(comment=f"{op} {attributes}")
    program = load(text)
    given = {**inputs, **{name: derived.value for name, derived in kernel.derived.items()}}
    feed = {array.name: given[kernel.sources[array.name]] for array in kernel.inputs}
    got = interpret(program, feed)
    for array in kernel.outputs:
        want = expected[int(kernel.sources[array.name][1:])]
        np.testing.assert_allclose(got[array.name], want, rtol=rtol, atol=atol, err_msg=f"{op} {attributes}\n{text}")
    return text


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def normal(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
