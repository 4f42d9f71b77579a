"""Naming a node of a body by its path, and rebuilding a tree: around one
node, for every operation, or without its comments.

A path is the child indices from the root body down to a node: `(2, 0)` is
the first child of the third top-level scope. Trees are immutable, so a change
deep inside rebuilds the scopes above it and shares everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from .tree import Node, Op, Program, Scope

TreePath = tuple[int, ...]


def iter_paths(body: tuple[Node, ...], path: TreePath = ()) -> Iterator[tuple[TreePath, Node]]:
    """Every node with its path, in pre-order."""
    for i, node in enumerate(body):
        yield path + (i,), node
        if isinstance(node, Scope):
            yield from iter_paths(node.body, path + (i,))


def node_at(body: tuple[Node, ...], path: TreePath) -> Node:
    node: Node = body[path[0]]
    for i in path[1:]:
        assert isinstance(node, Scope)
        node = node.body[i]
    return node


def siblings(body: tuple[Node, ...], path: TreePath) -> tuple[Node, ...]:
    """The body that holds the node at `path`: its own and its siblings'."""
    return body if len(path) == 1 else node_at(body, path[:-1]).body


def splice(body: tuple[Node, ...], path: TreePath, nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """`body` with the node at `path` replaced by `nodes` (zero or more)."""
    i = path[0]
    if len(path) == 1:
        return body[:i] + nodes + body[i + 1:]
    scope = body[i]
    assert isinstance(scope, Scope)
    return body[:i] + (replace(scope, body=splice(scope.body, path[1:], nodes)),) + body[i + 1:]


def with_body(program: Program, body: tuple[Node, ...]) -> Program:
    return replace(program, body=body)


def map_ops(nodes: tuple[Node, ...], f: Callable[[Op], Op]) -> tuple[Node, ...]:
    """`nodes` with every operation replaced by `f` of it, the scopes unchanged."""
    return tuple(f(n) if isinstance(n, Op) else replace(n, body=map_ops(n.body, f)) for n in nodes)


def uncommented(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """`nodes` without the comments of their operations."""
    return map_ops(nodes, lambda op: replace(op, comments=()))


def without_comments(program: Program) -> Program:
    """The program with no comments and no derivation: what it computes."""
    return replace(program, comments=(), trailing=(), derivation=None,
                   buffers=tuple(replace(b, comments=()) for b in program.buffers), body=uncommented(program.body))


def same_program(a: Program, b: Program) -> bool:
    return without_comments(a) == without_comments(b)
