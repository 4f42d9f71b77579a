"""The catalogue's table: each operator's kernel builder, registered by the module that writes it.

    @operator("Relu", "LeakyRelu")
    def rectifier(node: Node) -> Kernel: ...

A builder receives the node at static shapes and returns its kernel, or raises `Unsupported` for
the attribute values or shapes it cannot write.
"""

from __future__ import annotations

from collections.abc import Callable

from .nodes import Kernel, Node

Builder = Callable[[Node], Kernel]

OPERATORS: dict[str, Builder] = {}


def operator(*names: str) -> Callable[[Builder], Builder]:
    def register(builder: Builder) -> Builder:
        for name in names:
            assert name not in OPERATORS, f"{name} is registered twice"
            OPERATORS[name] = builder
        return builder

    return register
