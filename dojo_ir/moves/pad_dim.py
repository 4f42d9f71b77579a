"""pad_dim: enlarge a dimension of a temporary buffer.

    t f32 [N] heap        ->      t f32 [P] heap      (P > N)

`pad_dim(buffer=t, dim=k, size=P)` declares dimension k with extent P; the
accesses do not change. It is offered for P the least multiple of 8, 16, 32
and 64 that exceeds N (each distinct value once), so that rows start on
vector and cache-line boundaries and vector code can run over whole vectors.

Legal when t is a temporary (the layout of inputs and outputs is the
kernel's interface), dimension k is stored whole (a folded `D:K` keeps K
elements whatever D is, so padding it changes nothing), and P > N. Every
index stays in range and still names the element it named, so nothing
changes but where the elements lie. The inverse is `unpad_dim`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..tree import Dim, Program
from .base import BUFFER, DIM, EVERY_TARGET, Move, Param, Resolved
from .buffers import bad_dim, buffer_move, interface, temporaries, with_dim

NAME = "pad_dim"
TITLE = "Pad the dimension"
ARGS = (BUFFER, DIM, Param("size", "size", low=1))
TARGETS = EVERY_TARGET

MULTIPLES = (8, 16, 32, 64)


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for k, dim in enumerate(buffer.dims):
            if dim.stored is None:
                for size in sorted({-(-dim.size // m) * m for m in MULTIPLES} - {dim.size}):
                    yield buffer_move(NAME, buffer, dim=k, size=size)


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    k, size = at.arg("dim"), at.arg("size")
    reason = interface(a.program, buffer) or bad_dim(buffer, k)
    if reason:
        return reason
    dim = buffer.dims[k]
    if dim.stored is not None:
        return f"dimension {k} of `{buffer.name}` is stored as `{dim}`; padding it would store nothing more"
    if size <= dim.size:
        return f"the size must exceed the extent {dim.size} of dimension {k} of `{buffer.name}`"
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    return with_dim(a.program, buffer, at.arg("dim"), Dim(at.arg("size")))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [5] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
""",
        "pad_dim(buffer=t, dim=0, size=8)",
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [8] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
""",
    ),
    (
        # Rows of 20 padded to 32 elements; the row dimension stays.
        """kernel k(x) -> y

x f32 [3, 20] heap
y f32 [3, 20] heap
e f32 [3, 20] heap

3 20 e[{0},{1}] = exp(x[{0},{1}])
3 20 y[{0},{1}] = e[{0},{1}] + 1
""",
        "pad_dim(buffer=e, dim=1, size=32)",
        """kernel k(x) -> y

x f32 [3, 20] heap
y f32 [3, 20] heap
e f32 [3, 32] heap

3 20 e[{0},{1}] = exp(x[{0},{1}])
3 20 y[{0},{1}] = e[{0},{1}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # y is the kernel's output: its layout is the interface.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap

5 y[{0}] = exp(x[{0}])
""",
        "pad_dim(buffer=y, dim=0, size=8)",
    ),
    (
        # Dimension 0 of t keeps one element whatever its extent.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [5:1] heap

5 t[{0}] = exp(x[{0}])
| y[{0}] = t[{0}] + 1
""",
        "pad_dim(buffer=t, dim=0, size=8)",
    ),
    (
        # Padding makes a dimension larger, never smaller.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [5] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
""",
        "pad_dim(buffer=t, dim=0, size=4)",
    ),
]
