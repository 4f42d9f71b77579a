"""The operator catalogue: which ONNX operators become kernels, and why the others do not.

`kernel_for(node)` is the kernel of one node. Every operator of the default ONNX domain is either
registered by a module of `ops` or listed in NOT_EXPRESSIBLE with the feature of FEATURES that it
needs; `coverage()` counts both against onnx's own list of operators.
"""

from __future__ import annotations

from . import ops  # noqa: F401  (registers the operators)
from .nodes import Kernel, Node, Unsupported
from .registry import OPERATORS

# operator -> (feature, why): what each operator the catalogue does not write needs
NOT_EXPRESSIBLE: dict[str, tuple[str, str]] = {}


def kernel_for(node: Node) -> Kernel:
    """The kernel of `node`, or Unsupported naming what it needs."""
    if node.op in NOT_EXPRESSIBLE:
        feature, why = NOT_EXPRESSIBLE[node.op]
        raise Unsupported(feature, why)
    builder = OPERATORS.get(node.op)
    if builder is None:
        raise Unsupported("not written")
    return builder(node)
