"""What an ONNX node reads: the importer counts a value's readers with it, the model runner feeds
a node's session with it."""

from __future__ import annotations

import onnx


def used_names(node: onnx.NodeProto) -> list[str]:
    """The values `node` reads: its inputs, and those its subgraphs read from the graph around them."""
    names = [n for n in node.input if n]
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            defined = {v.name for v in [*graph.input, *graph.initializer]} | {o for n in graph.node for o in n.output}
            names.extend(n for inner in graph.node for n in used_names(inner) if n not in defined)
    return list(dict.fromkeys(names))
