"""swap_ops: exchange a node with the next node of the same body.

    A              B
    B      ->      A

`swap_ops(op=X)` names the operation X; `swap_ops(op=X, depth=d)` names the
scope at depth d around X. Either node may be an operation or a scope, and
neither changes inside, so every `{d}` keeps its meaning.

Legal when no element is touched by both nodes (one touch a write) within
one iteration of every scope around them: their order matters only there,
since each iteration of an enclosing scope still runs both before the next
begins. Two updates of the same reduction operator may be reordered (that
only reassociates). The move is its own inverse: swap the node that moved
first back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..analysis import Analysis
from ..paths import TreePath, iter_paths, node_at, splice, with_body
from ..tree import Node, Program
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .examples import FUSED_SOFTMAX

NAME = "swap_ops"
TITLE = "Swap with the next statement"
ARGS = (OP, replace(DEPTH, optional=True))
TARGETS = EVERY_TARGET


def _siblings(a: Analysis, path: TreePath) -> tuple[Node, ...]:
    return a.program.body if len(path) == 1 else node_at(a.program.body, path[:-1]).body


def candidates(a: Analysis) -> Iterator[Move]:
    for path, _ in iter_paths(a.program.body):
        if path[-1] + 1 < len(_siblings(a, path)):
            label, depth = a.locate(path)
            args = (("op", label),) if depth is None else (("op", label), ("depth", depth))
            yield Move(NAME, args, a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path = at.path
    if path[-1] + 1 >= len(_siblings(a, path)):
        return "nothing follows it in the same body"
    following = path[:-1] + (path[-1] + 1,)
    if a.depends(a.touches_in(path), a.touches_in(following), ("=",) * (len(path) - 1)):
        return "both touch the same element (at least one writing it) in one iteration, so their order matters"
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    first, second = _siblings(a, path)[path[-1]: path[-1] + 2]
    body = splice(a.program.body, path[:-1] + (path[-1] + 1,), (first,))
    return with_body(a.program, splice(body, path, (second,)))


EXAMPLES = [
    (
        # A fused softmax row: the sum's initialisation moves before the
        # exponentials, which neither read nor write `s`.
        FUSED_SOFTMAX,
        "swap_ops(op=e, depth=1)",
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| s[{0}] = 0
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| 8 s[{0}] += e[{0},{1}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
""",
    ),
    (
        # Two operations in one iteration that touch different elements.
        """kernel k(x) -> y, z

x f32 [4] heap
y f32 [4] heap
z f32 [4] heap

4 y[{0}] = x[{0}] + 1
| z[{0}] = x[{0}] * 2
""",
        "swap_ops(op=y)",
        """kernel k(x) -> y, z

x f32 [4] heap
y f32 [4] heap
z f32 [4] heap

4 z[{0}] = x[{0}] * 2
| y[{0}] = x[{0}] + 1
""",
    ),
    (
        # Updates of one reduction operator only reassociate when reordered.
        """kernel k(x) -> s

x f32 [4] heap
s f32 [] heap

s[] = 0
4 s[] += x[{0}]
s[] += 1
""",
        "swap_ops(op=s#2, depth=0)",
        """kernel k(x) -> s

x f32 [4] heap
s f32 [] heap

s[] = 0
s[] += 1
4 s[] += x[{0}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # The exponentials read the row maximum that the scope before computes.
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 y[{0},{1}] = exp(x[{0},{1}] - m[{0}])
""",
        "swap_ops(op=m#2, depth=1)",
    ),
    (
        # `y` is the last node of its body: there is nothing to swap it with.
        """kernel k(x) -> y, z

x f32 [4] heap
y f32 [4] heap
z f32 [4] heap

4 z[{0}] = x[{0}] * 2
| y[{0}] = x[{0}] + 1
""",
        "swap_ops(op=y)",
    ),
    (
        # `max=` and `+=` on one element do not commute.
        """kernel k(x) -> s

x f32 [4] heap
s f32 [] heap

s[] = 0
4 s[] += x[{0}]
s[] max= 1
""",
        "swap_ops(op=s#2, depth=0)",
    ),
]
