"""unroll_scope: unroll a small sequential scope.

    N  A      ->      N:u  A

`unroll_scope(op=X, depth=d)` marks the sequential scope at depth d around
operation X `:u`: the code generator writes its N iterations out one after the
other. Legal for N <= 32 when the nest of unrolled scopes it joins writes out
at most 64 copies of a body (N times the sizes of the `:u` scopes around it and
of those along any path inside it), which keeps the generated code small: gcc
took minutes over a 16 x 32 unrolled reduction. Also only when the nesting
rules of `mapping.py` still hold (no GPU scope may end up inside a `:u`).
Always keeps the meaning: the iterations run in the same order. The inverse is
`unmap_scope`.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod

from ..analysis import Analysis
from ..paths import iter_paths, node_at
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .mapping import nesting_problem, with_kind

NAME = "unroll_scope"
TITLE = "Unroll the scope"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET

MAX_SIZE = 32
MAX_COPIES = 64


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind and node.size <= MAX_SIZE:
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    if scope.kind:
        return f"the scope is already mapped (`{scope.token}`); only a sequential scope can be unrolled"
    if scope.size > MAX_SIZE:
        return f"the scope has {scope.size} iterations; only scopes of at most {MAX_SIZE} are unrolled"
    outer = (node_at(a.program.body, path[:k]) for k in range(1, len(path)))
    around = prod(s.size for s in outer if s.kind == "u")
    copies = around * scope.size * _unrolled_inside(scope)
    if copies > MAX_COPIES:
        return (f"unrolled with the `:u` scopes around and inside it, the scope would write out {copies} copies of "
                f"a body; at most {MAX_COPIES} are")
    return nesting_problem(a, path, "u")


def _unrolled_inside(scope: Scope) -> int:
    """The most copies of a body that the `:u` scopes inside `scope` write out along one path."""
    return max(((child.size if child.kind == "u" else 1) * _unrolled_inside(child)
                for child in scope.body if isinstance(child, Scope)), default=1)


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    return with_kind(a, path, "u")


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

8 3 y[{0},{1}] = x[{0},{1}] * 2
""",
        "unroll_scope(op=y, depth=1)",
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

8 3:u y[{0},{1}] = x[{0},{1}] * 2
""",
    ),
    (
        # A reduction's scope unrolls too: the updates keep their order.
        """kernel k(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap

3 5 c[{0},{1}] = 0
3 5 4 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""",
        "unroll_scope(op=c#2, depth=2)",
        """kernel k(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap

3 5 c[{0},{1}] = 0
3 5 4:u c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # 64 iterations are more than the 32 that are unrolled.
        """kernel k(x) -> y

x f32 [64] heap
y f32 [64] heap

64 y[{0}] = x[{0}] * 2
""",
        "unroll_scope(op=y, depth=0)",
    ),
    (
        # 16 x 8 copies of the body: more than 64.
        """kernel k(x) -> y

x f32 [16, 8] heap
y f32 [16, 8] heap

16 8:u y[{0},{1}] = x[{0},{1}] * 2
""",
        "unroll_scope(op=y, depth=0)",
    ),
    (
        # The `:b` scope would end up inside a `:u`.
        """kernel k(x) -> y

x f32 [4, 2, 8] heap
y f32 [4, 2, 8] heap

4:g 2 8:b y[{0},{1},{2}] = x[{0},{1},{2}] * 2
""",
        "unroll_scope(op=y, depth=1)",
    ),
]
