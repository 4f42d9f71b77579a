"""ONNX Runtime peer: each kernel as an ONNX graph written with `onnx.helper` (opset 17: LayerNormalization,
Softmax over the last axis, Conv, MatMul; the batch normalization with batch statistics and the RMS norm
composed from ReduceMean and elementwise operators, as ONNX has no inference operator for the first and
RMSNormalization only from opset 23), run by the CPU execution provider with 2 intra-op threads, all graph
optimizations on."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from . import THREADS, Prepared, copy_into, input_names, output_shape, spec_of

NAME = "onnxruntime"
OPSET = 17
EPS = 1e-5


def _eps() -> onnx.TensorProto:
    return helper.make_tensor("eps", TensorProto.FLOAT, [], [EPS])


def _nodes(kernel: str, shape: dict[str, int]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The graph's nodes and initializers; inputs have the spec's names, the output is `out`."""
    N = helper.make_node
    if kernel in ("add", "mul"):
        return [N(kernel.capitalize(), ["x", "y"], ["out"])], []
    if kernel == "relu":
        return [N("Relu", ["x"], ["out"])], []
    if kernel.startswith("batchnorm"):
        axes = [0, 2, 3]
        return [
            N("ReduceMean", ["x"], ["mean"], axes=axes, keepdims=1),
            N("Sub", ["x", "mean"], ["d"]),
            N("Mul", ["d", "d"], ["d2"]),
            N("ReduceMean", ["d2"], ["var"], axes=axes, keepdims=1),
            N("Add", ["var", "eps"], ["ve"]),
            N("Sqrt", ["ve"], ["sd"]),
            N("Div", ["d", "sd"], ["out"]),
        ], [_eps()]
    if kernel in ("bmm", "matmul"):
        return [N("MatMul", ["a", "b"], ["out"])], []
    if kernel.startswith("conv"):
        return [N("Conv", ["x", "w"], ["out"])], []
    if kernel.startswith("layernorm"):
        return [N("LayerNormalization", ["x", "g", "b"], ["out"], axis=-1, epsilon=EPS)], []
    if kernel == "reducemean":
        return [N("ReduceMean", ["x"], ["out"], axes=[-1], keepdims=0)], []
    if kernel == "relu_ffn":
        c = shape["c"]
        return [
            N("Relu", ["x"], ["r"]),
            N("Reshape", ["w", "wshape"], ["w4"]),
            N("Conv", ["r", "w4", "b"], ["out"]),
        ], [helper.make_tensor("wshape", TensorProto.INT64, [4], [c, c, 1, 1])]
    if kernel == "rmsnorm":
        return [
            N("Mul", ["x", "x"], ["x2"]),
            N("ReduceMean", ["x2"], ["ms"], axes=[-1], keepdims=1),
            N("Add", ["ms", "eps"], ["me"]),
            N("Sqrt", ["me"], ["rms"]),
            N("Div", ["x", "rms"], ["xn"]),
            N("Mul", ["xn", "g"], ["out"]),
        ], [_eps()]
    if kernel == "softmax":
        return [N("Softmax", ["x"], ["out"], axis=-1)], []
    if kernel == "swiglu":
        return [
            N("MatMul", ["x", "w"], ["a"]),
            N("MatMul", ["x", "v"], ["c"]),
            N("Sigmoid", ["a"], ["sa"]),
            N("Mul", ["a", "sa"], ["silu"]),
            N("Mul", ["silu", "c"], ["out"]),
        ], []
    raise KeyError(kernel)


def model(kernel: str, shape: dict[str, int]) -> onnx.ModelProto:
    spec = spec_of(kernel, shape)
    nodes, initializers = _nodes(kernel, shape)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(spec.buffer_of[n].shape))
              for n in input_names(kernel)]
    output = helper.make_tensor_value_info("out", TensorProto.FLOAT, list(output_shape(kernel, shape)))
    graph = helper.make_graph(nodes, kernel, inputs, [output], initializer=initializers)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def build(kernel: str, shape: dict[str, int], inputs: dict[str, np.ndarray], **_: Any) -> Prepared:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model(kernel, shape).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    # inputs bound once as OrtValues sharing the numpy arrays' memory, the output into one preallocated array
    binding = session.io_binding()
    arrays = {name: np.ascontiguousarray(inputs[name]) for name in input_names(kernel)}
    for name, array in arrays.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array))
    out = np.empty(output_shape(kernel, shape), np.float32)
    binding.bind_output("out", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)

    def run():
        session.run_with_iobinding(binding)
        return out

    return Prepared(run=run, fetch=lambda a: a.copy(), refresh=copy_into(arrays))
