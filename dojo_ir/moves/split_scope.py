"""split_scope: tile a scope of size N into N/f outer and f inner iterations.

    N  x[{0}] = ...          ->      N/f f  x[{0}*f+{1}] = ...

`split_scope(op=X, depth=d, factor=f)` for every divisor 1 < f < N of a
sequential scope. `{d}` becomes `{d}*f+{d+1}` and deeper references shift by
one. Always legal: the iterations run in the same order. The inverse is
`merge_scopes`.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import isqrt

from ..analysis import Analysis
from ..paths import iter_paths, splice, with_body
from ..refs import ref, substitute
from ..tree import Program, Scope
from .base import DEPTH, OP, Move, Param, scope_of

NAME = "split_scope"
TITLE = "Tile the scope"
ARGS = (OP, DEPTH, Param("factor", "factor", low=2))


def divisors(n: int) -> list[int]:
    """The divisors of n strictly between 1 and n, in increasing order."""
    small = [f for f in range(2, isqrt(n) + 1) if n % f == 0]
    return small + [n // f for f in reversed(small) if n // f != f]


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind:
            label, depth = a.locate(path)
            line = a.first_site(path).line
            for factor in divisors(node.size):
                yield Move(NAME, (("op", label), ("depth", depth), ("factor", factor)), line)


def why_not(a: Analysis, move: Move) -> str | None:
    _, _, scope = scope_of(a, move)
    factor = move.arg("factor")
    if scope.kind:
        return f"the scope is mapped (`{scope.token}`); only a sequential scope can be split"
    if not 1 < factor < scope.size or scope.size % factor:
        return f"the factor must divide {scope.size} and lie strictly between 1 and {scope.size}"
    return None


def rewrite(a: Analysis, move: Move) -> Program:
    _, path, scope = scope_of(a, move)
    depth, factor = len(path) - 1, move.arg("factor")

    def sub(d: int):
        if d < depth:
            return ref(d)
        return ref(depth).scale(factor) + ref(depth + 1) if d == depth else ref(d + 1)

    inner = Scope(factor, "", substitute(scope.body, sub))
    return with_body(a.program, splice(a.program.body, path, (Scope(scope.size // factor, "", (inner,)),)))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

8 3 y[{0},{1}] = x[{0},{1}] * {0}
""",
        "split_scope(op=y, depth=0, factor=4)",
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

2 4 3 y[{0}*4+{1},{2}] = x[{0}*4+{1},{2}] * ({0} * 4 + {1})
""",
    ),
]

NOT_APPLICABLE = [
    (
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

8 y[{0}] = x[{0}]
""",
        "split_scope(op=y, depth=0, factor=3)",
    ),
]
