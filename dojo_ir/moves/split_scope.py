"""split_scope: tile a scope of size N into N/f tiles of f iterations, and a tail of N mod f.

    N  x[{0}] = ...          ->      N/f f  x[{0}*f+{1}] = ...
                                     N%f    x[{0}+N/f*f] = ...    (when f does not divide N)

`split_scope(op=X, depth=d, factor=f)` takes any factor 1 < f < N of a
sequential scope. `{d}` becomes `{d}*f+{d+1}` and deeper references shift by
one. When f does not divide N, the last N mod f iterations (the tail) run in
a second scope of the same place, right after the first: a copy of the body,
without its comments, with `{d}` shifted to `{d}+(N/f)*f` (N/f rounded down)
and deeper references unchanged, as the tail has no extra scope. The format
has no conditionals, so a tail cannot be a partial last tile. Legal on any
sequential scope, as the iterations run in the same order, except that a
tail may not copy a parallel or GPU scope (`:p :g :b :w`) whose iterations
each hold a temporary of their own (see `mapping.py`): used by both copies,
the temporary would no longer be private to either, and its iterations
could race on it.

The listing offers the divisors of N, every factor from 2 to 16 and the
powers of two below N (so a scope of 1024 lists 20 splits, not 1022); any
other factor is as legal when written or replayed.

The inverse is `merge_scopes`, which takes the tail back in when it follows
the tiled scope unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import isqrt

from ..affine import Affine
from ..analysis import Analysis
from ..paths import TreePath, iter_paths, node_at, splice, uncommented, with_body
from ..refs import ref, shifted, substitute
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Param, Resolved
from .mapping import OWN_MEMORY, private_buffers

NAME = "split_scope"
TITLE = "Tile the scope"
ARGS = (OP, DEPTH, Param("factor", "factor", low=2))
TARGETS = EVERY_TARGET


# The factors the listing offers besides the divisors: every small one and
# every power of two, the tiles a person or a pass asks for.
SMALL_FACTORS = 16


def divisors(n: int) -> list[int]:
    """The divisors of n strictly between 1 and n, in increasing order."""
    small = [f for f in range(2, isqrt(n) + 1) if n % f == 0]
    return small + [n // f for f in reversed(small) if n // f != f]


def listed_factors(n: int) -> list[int]:
    """The factors the listing offers for a scope of n: its divisors, 2 to 16
    and the powers of two below n, in increasing order."""
    powers = (1 << k for k in range(1, (n - 1).bit_length()))
    return sorted({*divisors(n), *range(2, min(SMALL_FACTORS, n - 1) + 1), *powers})


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind:
            label, depth = a.locate(path)
            line = a.first_site(path).line
            for factor in listed_factors(node.size):
                yield Move(NAME, (("op", label), ("depth", depth), ("factor", factor)), line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    factor = at.arg("factor")
    if scope.kind:
        return f"the scope is mapped (`{scope.token}`); only a sequential scope can be split"
    if not 1 < factor < scope.size:
        return f"the factor must lie strictly between 1 and the scope's size, {scope.size}"
    return _shared_by_a_tail(a, path) if scope.size % factor else None


def _shared_by_a_tail(a: Analysis, path: TreePath) -> str | None:
    """Why a tail may not copy the scope at `path`: a mapped scope inside it
    whose iterations hold a temporary of their own, or None."""
    key = ("split_scope: shared by a tail", path)
    if key not in a.memo:
        a.memo[key] = None
        for inner, node in iter_paths(node_at(a.program.body, path).body, path):
            if isinstance(node, Scope) and node.kind in OWN_MEMORY:
                private = private_buffers(a, inner, OWN_MEMORY[node.kind])
                if private:
                    label, depth = a.locate(inner)
                    a.memo[key] = (f"each iteration of the `{node.token}` scope at depth {depth} around `{label}` "
                                   f"holds its own `{min(private)}`; the tail would copy that scope and use "
                                   f"`{min(private)}` too, so it would no longer be private; split by a divisor "
                                   f"of the size, or unmap that scope first")
                    break
    return a.memo[key]


def rewrite(a: Analysis, at: Resolved) -> Program:
    path, scope = at.path, at.scope
    depth, factor = len(path) - 1, at.arg("factor")
    tiles, left = divmod(scope.size, factor)

    def sub(d: int) -> Affine:
        if d < depth:
            return ref(d)
        return ref(depth).scale(factor) + ref(depth + 1) if d == depth else ref(d + 1)

    inner = Scope(factor, "", substitute(scope.body, sub))
    parts = (Scope(tiles, "", (inner,)),)
    if left:
        # the comments stay with the original, not with its copy
        parts += (Scope(left, "", uncommented(shifted(scope.body, depth, tiles * factor))),)
    return with_body(a.program, splice(a.program.body, path, parts))


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
    (
        # 10 is not a multiple of 4: rows 8 and 9 run in a tail after the
        # tiles. The deeper scope's `{1}` is `{2}` in the tiles and stays
        # `{1}` in the tail; the comment stays with the original.
        """kernel k(x) -> y, z

x f32 [10, 3] heap
y f32 [10, 3] heap
z f32 [10] heap

# each row times its column
10 3 y[{0},{1}] = x[{0},{1}] * {1}
|  z[{0}] = {0}
|  3 z[{0}] += y[{0},{1}]
""",
        "split_scope(op=y, depth=0, factor=4)",
        """kernel k(x) -> y, z

x f32 [10, 3] heap
y f32 [10, 3] heap
z f32 [10] heap

# each row times its column
2 4 3 y[{0}*4+{1},{2}] = x[{0}*4+{1},{2}] * {2}
| | z[{0}*4+{1}] = {0} * 4 + {1}
| | 3 z[{0}*4+{1}] += y[{0}*4+{1},{2}]
2 3 y[{0}+8,{1}] = x[{0}+8,{1}] * {1}
| z[{0}+8] = {0} + 8
| 3 z[{0}+8] += y[{0}+8,{1}]
""",
    ),
    (
        # A tail of one iteration is a scope of size 1.
        """kernel k(x) -> y

x f32 [7] heap
y f32 [7] heap

7 y[{0}] = x[{0}] + {0}
""",
        "split_scope(op=y, depth=0, factor=3)",
        """kernel k(x) -> y

x f32 [7] heap
y f32 [7] heap

2 3 y[{0}*3+{1}] = x[{0}*3+{1}] + ({0} * 3 + {1})
1 y[{0}+6] = x[{0}+6] + ({0} + 6)
""",
    ),
]

NOT_APPLICABLE = [
    (
        # A factor of the whole size would leave a single tile.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

8 y[{0}] = x[{0}]
""",
        "split_scope(op=y, depth=0, factor=8)",
    ),
    (
        # A mapped scope must be unmapped first.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

8:u y[{0}] = x[{0}]
""",
        "split_scope(op=y, depth=0, factor=3)",
    ),
    (
        # Each thread of the `:p` scope has its own row `t`; a tail would
        # copy the scope, and the threads of the two copies would share it.
        """kernel k(x) -> y

x f32 [10, 4, 8] heap
y f32 [10, 4, 8] heap
t f32 [10:1, 4:1, 8] stack

10 4:p 8 t[{0},{1},{2}] = x[{0},{1},{2}] * 2
|  |   8 y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
        "split_scope(op=t, depth=0, factor=4)",
    ),
]
