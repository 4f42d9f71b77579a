"""swap_scopes: interchange a scope with its only child scope.

    N M  A      ->      M N  A   (with {d} and {d+1} exchanged in A)

`swap_scopes(op=X, depth=d)` names the outer scope. Both scopes must be
sequential. Legal when no dependence runs forward in the outer scope and
backward in the inner one (direction `(<, >)`): exactly the dependences whose
order an interchange would reverse. Updates of one reduction operator may be
reordered. The move is its own inverse.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..paths import iter_paths, splice, with_body
from ..refs import ref, substitute
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved

NAME = "swap_scopes"
TITLE = "Interchange with the inner scope"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and len(node.body) == 1 and isinstance(node.body[0], Scope):
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    if len(scope.body) != 1 or not isinstance(scope.body[0], Scope):
        return "the scope does not hold exactly one scope"
    if scope.kind or scope.body[0].kind:
        return "both scopes must be sequential"
    inside = a.touches_in(path)
    if a.depends(inside, inside, ("=",) * (len(path) - 1) + ("<", ">")):
        return "a dependence runs forward in the outer scope and backward in the inner one"
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path, outer = at.path, at.scope
    inner = outer.body[0]
    depth = len(path) - 1
    swap = {depth: depth + 1, depth + 1: depth}
    body = substitute(inner.body, lambda d: ref(swap.get(d, d)))
    swapped = Scope(inner.size, inner.kind, (Scope(outer.size, outer.kind, body),))
    return with_body(a.program, splice(a.program.body, path, (swapped,)))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [3, 4] heap
y f32 [4, 3] heap

3 4 y[{1},{0}] = x[{0},{1}]
""",
        "swap_scopes(op=y, depth=0)",
        """kernel k(x) -> y

x f32 [3, 4] heap
y f32 [4, 3] heap

4 3 y[{0},{1}] = x[{1},{0}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # Iteration (i, j) reads t[i+2, j], which iteration (i+1, j-1) writes
        # afterwards: an anti-dependence of direction (<, >).
        """kernel k(x) -> y

x f32 [4, 4] heap
y f32 [4, 4] heap
t f32 [6, 6] heap

6 6 t[{0},{1}] = 1
4 4 t[{0}+1,{1}+1] = t[{0}+2,{1}] + x[{0},{1}]
4 4 y[{0},{1}] = t[{0},{1}]
""",
        "swap_scopes(op=t#2, depth=0)",
    ),
]
