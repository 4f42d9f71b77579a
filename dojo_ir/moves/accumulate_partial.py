"""accumulate_partial: reduce part of a sum in a register, then add it to the target.

    N  T[i] op= V              N  ACC[..] = identity
                       ->      |  M  ACC[..] op= V
                               |  T[i] op= ACC[..]

`accumulate_partial(op=X, depth=d)` is accumulate's other form: the
accumulator starts at the identity of X's operator (`0` for `+=`, `1` for
`*=`, `-inf` for `max=`, `inf` for `min=`) instead of the target's value, and
is folded into the target at the end with X's own operator. The target is
then only ever touched by reductions, so this is legal where accumulate's
plain load is not: inside a blocked reduction, where an earlier block of the
same sum wrote the element (matmul's `k` split into blocks outside the rows,
so that a block of `b` stays in cache while every row uses it):

    4 16 6 4:u 16:v c[..] += ..           4 16 6 4:u 16:v c_acc[..] = 0
      (k blocks, rows, k, tile)    ->     | | | 256 4:u 16:v c_acc[..] += ..
                                          | | | 4:u 16:v c[..] += c_acc[..]

Its tile, its accumulator buffer and the rest of its legality are
accumulate's (see there). Sums and products are reassociated (the partial
result is added to the target instead of continuing from it), as every
reordering of a reduction may; `max=` and `min=` are exact, and need a
floating-point target, whose identity is an infinity. The inverse is
`inline_accumulator`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..tree import Program
from .accumulate import check, reduction_scopes, transform
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .examples import MATMUL_IN_K_BLOCKS

NAME = "accumulate_partial"
TITLE = "Accumulate a partial result in a register"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    return reduction_scopes(a, NAME)


def why_not(a: Analysis, at: Resolved) -> str | None:
    return check(a, at, partial=True)


def rewrite(a: Analysis, at: Resolved) -> Program:
    return transform(a, at, partial=True)


EXAMPLES = [
    (
        # A block of the k scope, for a row and a tile of columns: the first
        # block of k wrote `c`, so only the partial form may keep it aside.
        MATMUL_IN_K_BLOCKS,
        "accumulate_partial(op=c#2, depth=2)",
        """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap
c_acc f32 [2:1, 4:1, 16] stack

4 16 c[{0},{1}] = 0
2 4 16 c_acc[{0},{1},{2}] = 0
| | 4 16 c_acc[{0},{1},{3}] += a[{1},{0}*4+{2}] * b[{0}*4+{2},{3}]
| | 16 c[{1},{2}] += c_acc[{0},{1},{2}]
""",
    ),
    (
        # A row maximum: the identity of `max=` is `-inf`.
        """kernel k(x) -> m

x f32 [4, 8] heap
m f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
""",
        "accumulate_partial(op=m#2, depth=1)",
        """kernel k(x) -> m

x f32 [4, 8] heap
m f32 [4] heap
m_acc f32 [4:1] stack

4 m[{0}] = -inf
| m_acc[{0}] = -inf
| 8 m_acc[{0}] max= x[{0},{1}]
| m[{0}] max= m_acc[{0}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # An integer maximum has no identity to start from.
        """kernel k(x) -> m

x i32 [4, 8] heap
m i32 [4] heap

4 m[{0}] = 0
| 8 m[{0}] max= x[{0},{1}]
""",
        "accumulate_partial(op=m#2, depth=1)",
    ),
    (
        # `t[{1}+{2}]` names one element in two iterations of the tile, so no
        # one element of an accumulator stands for it.
        """kernel k(x) -> t

x f32 [4, 4, 4] heap
t f32 [8] heap

8 t[{0}] = 0
4 4 4 t[{1}+{2}] += x[{0},{1},{2}]
""",
        "accumulate_partial(op=t#2, depth=0)",
    ),
]
