"""join_scopes: fuse a scope with the next sibling scope of the same size.

    N  A               N  A
    N  B       ->      |  B

`join_scopes(op=X, depth=d)` names the scope at depth d around operation X;
the scope that follows it in the same body is appended to it. References
`{d}` keep their meaning because both scopes sit at depth d.

Legal when both scopes are sequential, of the same size, and no element is touched
by the two scopes in different iterations (one touch a write): then every
dependence between them stays within one iteration, where the first scope's
work still runs first. Two updates of the same reduction operator may be
reordered (that only reassociates). The inverse is `fission`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..analysis import Analysis
from ..paths import TreePath, iter_paths, node_at, splice, with_body
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .examples import FUSED_PAIR

NAME = "join_scopes"
TITLE = "Fuse with the next scope"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def _next_sibling(a: Analysis, path: TreePath):
    parent = a.program.body if len(path) == 1 else node_at(a.program.body, path[:-1]).body
    i = path[-1]
    return (path[:-1] + (i + 1,), parent[i + 1]) if i + 1 < len(parent) else (None, None)


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope):
            _, sibling = _next_sibling(a, path)
            if isinstance(sibling, Scope):
                label, depth = a.locate(path)
                yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    next_path, sibling = _next_sibling(a, path)
    if not isinstance(sibling, Scope):
        return "the scope is not followed by a scope in the same body"
    if scope.kind or sibling.kind:
        return "only sequential scopes can be fused; unmap them first"
    if sibling.size != scope.size:
        return f"the next scope has size {sibling.size}, not {scope.size}"
    depth = len(path) - 1
    for relation in ("<", ">"):
        if a.depends(a.touches_in(path), a.touches_in(next_path), ("=",) * depth + (relation,)):
            return ("the two scopes touch the same element in different iterations, so fusing them would "
                    "change the order of a write and another access")
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path, scope = at.path, at.scope
    next_path, sibling = _next_sibling(a, path)
    fused = replace(scope, body=scope.body + sibling.body)
    body = splice(a.program.body, next_path, ())
    return with_body(a.program, splice(body, path, (fused,)))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4 t[{0}] = exp(x[{0}])
4 y[{0}] = t[{0}] + 1
""",
        "join_scopes(op=t, depth=0)",
        FUSED_PAIR,
    ),
]

NOT_APPLICABLE = [
    (
        # y[{0}] reads t[3-{0}], written by a later iteration of the first scope.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4 t[{0}] = exp(x[{0}])
4 y[{0}] = t[3-{0}] + 1
""",
        "join_scopes(op=t, depth=0)",
    ),
]
