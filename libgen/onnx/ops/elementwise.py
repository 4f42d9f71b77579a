"""Elementwise operators: one scalar expression per output element, operands broadcast as ONNX
defines (multidirectional, shapes aligned on the right)."""

from __future__ import annotations

from ..nodes import Kernel, Node, broadcast, loops
from ..registry import operator


@operator("Relu")
def relu(node: Node) -> Kernel:
    (x,), (y,) = node.inputs, node.outputs
    kernel = Kernel(node.op.lower())
    xs, ys = kernel.input(x), kernel.output(y)
    index = loops(y.rank)
    kernel.loop(y.shape, ys.at(index), "=", f"max({xs.at(broadcast(x.shape, index))}, 0)")
    return kernel
