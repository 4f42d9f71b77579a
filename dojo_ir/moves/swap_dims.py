"""swap_dims: exchange two neighbouring dimensions of a temporary buffer.

    t f32 [N, M] heap                  t f32 [M, N] heap
    N M  t[{0},{1}] = ...      ->      N M  t[{1},{0}] = ...

`swap_dims(buffer=t, dim=k)` exchanges dimensions k and k+1 in the
declaration (a folded `D:K` moves with its dimension) and in every access to
every array of t. Each element keeps its value under its new name, so the
move is always legal on a temporary; the layout of inputs and outputs is the
kernel's interface. The move is its own inverse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..analysis import Analysis
from ..paths import map_ops, with_body
from ..tree import Access, Binary, Call, Expr, Op, Program, Unary
from .base import BUFFER, DIM, EVERY_TARGET, Move, Resolved
from .buffers import bad_dim, buffer_move, interface, temporaries, with_buffer

NAME = "swap_dims"
TITLE = "Exchange with the next dimension"
ARGS = (BUFFER, DIM)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for k in range(len(buffer.dims) - 1):
            yield buffer_move(NAME, buffer, dim=k)


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    return interface(a.program, buffer) or bad_dim(buffer, at.arg("dim"), len(buffer.dims) - 1)


def _swapped(items: tuple, k: int) -> tuple:
    return items[:k] + (items[k + 1], items[k]) + items[k + 2:]


def _swap(expr: Expr, arrays: frozenset[str], k: int) -> Expr:
    """`expr` with indices k and k+1 exchanged in every access to `arrays`."""
    if isinstance(expr, Access):
        return replace(expr, index=_swapped(expr.index, k)) if expr.array in arrays else expr
    if isinstance(expr, Unary):
        return replace(expr, operand=_swap(expr.operand, arrays, k))
    if isinstance(expr, Binary):
        return replace(expr, left=_swap(expr.left, arrays, k), right=_swap(expr.right, arrays, k))
    if isinstance(expr, Call):
        return replace(expr, args=tuple(_swap(x, arrays, k) for x in expr.args))
    return expr


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    k = at.arg("dim")
    arrays = frozenset(buffer.array_names)

    def swap_op(op: Op) -> Op:
        return replace(op, target=_swap(op.target, arrays, k), value=_swap(op.value, arrays, k))

    program = with_buffer(a.program, replace(buffer, dims=_swapped(buffer.dims, k)))
    return with_body(program, map_ops(program.body, swap_op))


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3, 5] heap

3 5 e[{0},{1}] = exp(x[{0},{1}])
3 5 y[{0},{1}] = e[{0},{1}] + 1
""",
        "swap_dims(buffer=e, dim=0)",
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [5, 3] heap

3 5 e[{1},{0}] = exp(x[{0},{1}])
3 5 y[{0},{1}] = e[{1},{0}] + 1
""",
    ),
    (
        # Both arrays of the buffer change, and the folded dimension moves along.
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2, 3:1, 4] heap -> a, b

2 3 4 a[{0},{1},{2}] = exp(x[{0},{1},{2}])
| | 4 b[{0},{1},{2}] = a[{0},{1},{2}] * 2
| | 4 y[{0},{1},{2}] = b[{0},{1},{2}] + 1
""",
        "swap_dims(buffer=t, dim=1)",
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2, 4, 3:1] heap -> a, b

2 3 4 a[{0},{2},{1}] = exp(x[{0},{1},{2}])
| | 4 b[{0},{2},{1}] = a[{0},{2},{1}] * 2
| | 4 y[{0},{1},{2}] = b[{0},{2},{1}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # y is the kernel's output: its layout is the interface.
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap

3 5 y[{0},{1}] = exp(x[{0},{1}])
""",
        "swap_dims(buffer=y, dim=0)",
    ),
    (
        # Dimension 1 is e's last: there is no dimension 2 to exchange it with.
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3, 5] heap

3 5 e[{0},{1}] = exp(x[{0},{1}])
3 5 y[{0},{1}] = e[{0},{1}] + 1
""",
        "swap_dims(buffer=e, dim=1)",
    ),
]
