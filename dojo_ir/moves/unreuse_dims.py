"""unreuse_dims: store a folded dimension of a temporary buffer whole again.

    t f32 [N:K] heap                   t f32 [N] heap
    N  t[{0}] = ...            ->      N  t[{0}] = ...
    |  y[{0}] = t[{0}] ...             |  y[{0}] = t[{0}] ...

`reuse_dims(buffer=t, dim=k)`'s inverse: dimension k, declared `D:K`, is
declared `D`, so every index has an element of its own again. The accesses
do not change.

Legal when t is a temporary, dimension k is folded, and each element of
dimension k is produced and consumed within one iteration, exactly as
`reuse_dims` asks: every access to t indexes dimension k by one affine form
g, all of them lie inside one scope at the deepest depth d that g refers to,
and g, with the other dimensions indexed alike by the scopes at depths 0 to d
only, is injective over the box of those scopes. Each
iteration then reads the values it wrote itself, whether the elements it
touches share storage with other iterations' or not. (A read of an element
that the iteration has not written is undefined by FORMAT.md, though through
`D:K` storage it would see another iteration's element; the checker does not
look for such reads.) Whether those scopes are mapped does not matter here:
more storage never makes iterations share an element. When the accesses do
not meet this (Figure 6, bottom), the folded storage carries values from one
iteration to another, and storing the dimension whole would change what is
read.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..tree import Dim, Program
from .base import BUFFER, DIM, EVERY_TARGET, Move, Resolved
from .buffers import bad_dim, buffer_move, interface, temporaries, with_dim
from .examples import FUSED_PAIR
from .reuse_dims import one_iteration

NAME = "unreuse_dims"
TITLE = "Store the dimension whole"
ARGS = (BUFFER, DIM)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for k, dim in enumerate(buffer.dims):
            if dim.stored is not None:
                yield buffer_move(NAME, buffer, dim=k)


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    k = at.arg("dim")
    reason = interface(a.program, buffer) or bad_dim(buffer, k)
    if reason:
        return reason
    if buffer.dims[k].stored is None:
        return f"dimension {k} of `{buffer.name}` is stored whole already"
    return one_iteration(a, buffer, k, one_at_a_time=False)


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    k = at.arg("dim")
    return with_dim(a.program, buffer, k, Dim(buffer.dims[k].size))


EXAMPLES = [
    (
        # Figure 6, top, undone.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4:1] heap

4 t[{0}] = exp(x[{0}])
| y[{0}] = t[{0}] + 1
""",
        "unreuse_dims(buffer=t, dim=0)",
        FUSED_PAIR,
    ),
    (
        # Two stored rows (`3:2`) or all three: each row is used within its own iteration.
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3:2, 5] heap

3 5 e[{0},{1}] = exp(x[{0},{1}])
| 5 y[{0},{1}] = e[{0},{1}] + 1
""",
        "unreuse_dims(buffer=e, dim=0)",
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3, 5] heap

3 5 e[{0},{1}] = exp(x[{0},{1}])
| 5 y[{0},{1}] = e[{0},{1}] + 1
""",
    ),
    (
        # A tile that stage_reads made, stored once per outer iteration again:
        # dimension 0 tells those apart, `{1}` the inner ones.
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2:1, 3:1, 4] heap

2 3 4 t[{0},{1},{2}] = exp(x[{0},{1},{2}])
| | | y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
        "unreuse_dims(buffer=t, dim=1)",
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2:1, 3, 4] heap

2 3 4 t[{0},{1},{2}] = exp(x[{0},{1},{2}])
| | | y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # Figure 6, bottom: the one stored element carries exp(x[3]) to every
        # y[i]; storing t whole would give y[i] = exp(x[i]) + 1 instead.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4:1] heap

4 t[{0}] = exp(x[{0}])
4 y[{0}] = t[{0}] + 1
""",
        "unreuse_dims(buffer=t, dim=0)",
    ),
    (
        # Dimension 0 of t is stored whole already.
        FUSED_PAIR,
        "unreuse_dims(buffer=t, dim=0)",
    ),
]
