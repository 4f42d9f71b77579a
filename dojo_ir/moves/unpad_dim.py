"""unpad_dim: shrink a dimension of a temporary buffer to what is used.

    t f32 [P] heap        ->      t f32 [N] heap      (every index < N)

`pad_dim`'s inverse: `unpad_dim(buffer=t, dim=k, size=N)` declares dimension
k with extent N; the accesses do not change. It is offered for N one more
than the greatest index that any access to any array of t can reach in
dimension k (at least 1), when that is less than the extent.

Legal when t is a temporary (the layout of inputs and outputs is the
kernel's interface), dimension k is stored whole (the extent of a folded
`D:K` is not storage), and that greatest index is below N < P: every index
stays in range and still names the element it named.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..affine import affine
from ..analysis import Analysis
from ..tree import Buffer, Dim, Program
from .base import BUFFER, DIM, EVERY_TARGET, Move, Param, Resolved
from .buffers import bad_dim, buffer_accesses, buffer_move, interface, temporaries, with_dim

NAME = "unpad_dim"
TITLE = "Shrink the dimension to its use"
ARGS = (BUFFER, DIM, Param("size", "size", low=1))
TARGETS = EVERY_TARGET


def _used(a: Analysis, buffer: Buffer, k: int) -> int:
    """The least extent of dimension k that holds every index its accesses reach."""
    reach = (affine(x.index[k]).bounds([s.size for s in site.chain])[1] for site, x in buffer_accesses(a, buffer))
    return max(reach, default=0) + 1


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for k, dim in enumerate(buffer.dims):
            used = _used(a, buffer, k)
            if dim.stored is None and used < dim.size:
                yield buffer_move(NAME, buffer, dim=k, size=used)


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    k, size = at.arg("dim"), at.arg("size")
    reason = interface(a.program, buffer) or bad_dim(buffer, k)
    if reason:
        return reason
    dim = buffer.dims[k]
    if dim.stored is not None:
        return f"dimension {k} of `{buffer.name}` is stored as `{dim}`; its extent is not storage"
    used = _used(a, buffer, k)
    if not used <= size < dim.size:
        if used == dim.size:
            return f"the accesses reach index {used - 1}, the last of dimension {k} of `{buffer.name}`"
        return f"the size must be {used} (the accesses reach index {used - 1}) to {dim.size - 1}"
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    return with_dim(a.program, buffer, at.arg("dim"), Dim(at.arg("size")))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [8] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
""",
        "unpad_dim(buffer=t, dim=0, size=5)",
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [5] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
""",
    ),
    (
        # The accesses reach index 20 (`{1}+1` with {1} up to 19).
        """kernel k(x) -> y

x f32 [3, 20] heap
y f32 [3, 20] heap
e f32 [3, 32] heap

3 20 e[{0},{1}+1] = exp(x[{0},{1}])
3 20 y[{0},{1}] = e[{0},{1}+1] + 1
""",
        "unpad_dim(buffer=e, dim=1, size=21)",
        """kernel k(x) -> y

x f32 [3, 20] heap
y f32 [3, 20] heap
e f32 [3, 21] heap

3 20 e[{0},{1}+1] = exp(x[{0},{1}])
3 20 y[{0},{1}] = e[{0},{1}+1] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # y reads t[{0}+3], up to index 7: the extent 8 is all used.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [8] heap

8 t[{0}] = 1
5 y[{0}] = t[{0}+3] + x[{0}]
""",
        "unpad_dim(buffer=t, dim=0, size=5)",
    ),
    (
        # y is the kernel's output: its layout is the interface.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [8] heap

5 y[{0}] = exp(x[{0}])
""",
        "unpad_dim(buffer=y, dim=0, size=5)",
    ),
]
