"""unmap_scope: make a mapped scope sequential again.

    N:k  A      ->      N  A      (k one of u p v g b w)

`unmap_scope(op=X, depth=d)` undoes `unroll_scope`, `parallelize_scope`,
`vectorize_scope` and `map_gpu` on the scope at depth d around operation X.
Running iterations in order is always one of the orders a mapped scope allows,
so the meaning is kept. Legal unless something inside would break a rule of
`mapping.py` that the program keeps now: unmapping the only `:g` above a
`:b`, or the only `:b` above a `:w` or above an access to a `shared` buffer,
is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..paths import iter_paths
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .mapping import nesting_problem, with_kind

NAME = "unmap_scope"
TITLE = "Make the scope sequential"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and node.kind:
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    if not scope.kind:
        return "the scope is already sequential"
    return nesting_problem(a, path, "")


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    return with_kind(a, path, "")


EXAMPLES = [
    (
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8:b 4:v z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
        "unmap_scope(op=z, depth=2)",
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8:b 4 z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
    ),
    (
        # Another `:b` stays above the `:w`.
        """kernel k(x) -> y

x f32 [2, 4, 2, 8] heap
y f32 [2, 4, 2, 8] heap

2:g 4:b 2:b 8:w y[{0},{1},{2},{3}] = x[{0},{1},{2},{3}] + 1
""",
        "unmap_scope(op=y, depth=1)",
        """kernel k(x) -> y

x f32 [2, 4, 2, 8] heap
y f32 [2, 4, 2, 8] heap

2:g 4 2:b 8:w y[{0},{1},{2},{3}] = x[{0},{1},{2},{3}] + 1
""",
    ),
    (
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4:p 8:u y[{0},{1}] = x[{0},{1}] * 2
""",
        "unmap_scope(op=y, depth=0)",
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4 8:u y[{0},{1}] = x[{0},{1}] * 2
""",
    ),
]

NOT_APPLICABLE = [
    (
        # The `:b` scope would be left without a `:g` above it.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4:g 8:b y[{0},{1}] = x[{0},{1}] * 2
""",
        "unmap_scope(op=y, depth=0)",
    ),
    (
        # `t` is in shared memory, which is only reachable inside a `:b`.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8] shared

4:g 8:b t[{0},{1}] = exp(x[{0},{1}])
|   |   y[{0},{1}] = t[{0},{1}] * 2
""",
        "unmap_scope(op=t, depth=1)",
    ),
    (
        # The scope is sequential already.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap

4 y[{0}] = x[{0}]
""",
        "unmap_scope(op=y, depth=0)",
    ),
]
