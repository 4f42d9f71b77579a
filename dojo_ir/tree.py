"""The kernel as an immutable tree.

A program is a kernel line, buffer declarations and a body. The body is an
ordered tree whose inner nodes are one-dimensional iteration scopes and whose
leaves are operations. Every node is a frozen, hashable dataclass that carries
the span it was parsed from; spans never take part in equality or hashing, so
two trees are equal exactly when they print the same canonical text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from math import prod

DTYPES = ("f32", "f64", "i32", "i64")
FLOAT_DTYPES = ("f32", "f64")
DTYPE_BYTES = {"f32": 4, "f64": 8, "i32": 4, "i64": 8}
LOCATIONS = ("heap", "stack", "shared")
SCOPE_KINDS = ("u", "p", "v", "g", "b", "w")
ASSIGNS = ("=", "+=", "*=", "max=", "min=")
REDUCTIONS = ("+=", "*=", "max=", "min=")
FUNCTIONS = {"exp": 1, "log": 1, "sqrt": 1, "abs": 1, "tanh": 1, "erf": 1, "max": 2, "min": 2}
FLOAT_ONLY_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "erf")
MAX_INTEGER = (1 << 63) - 1  # the largest extent, size or integer a program may hold: C's int64_t
KEYWORDS = frozenset(("kernel", "inf", *DTYPES, *LOCATIONS, *FUNCTIONS))


@dataclass(frozen=True, slots=True)
class Span:
    """A range of source text: 1-based line and column, end column exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"

    def join(self, other: Span | None) -> Span:
        if other is None:
            return self
        return Span(self.line, self.col, other.end_line, other.end_col)


def _span() -> Span | None:
    return field(default=None, compare=False, repr=False)


# -- expressions ------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    """A number literal; it keeps the text it was written with (`1e-5`, `inf`)."""

    text: str
    span: Span | None = _span()

    @property
    def is_integer(self) -> bool:
        return self.text.isdigit()


@dataclass(frozen=True)
class Ref:
    """`{d}`: the iteration variable of the enclosing scope at depth d."""

    depth: int
    span: Span | None = _span()


@dataclass(frozen=True)
class Access:
    """`array[index, ...]`: one element of an array; `array[]` for a scalar."""

    array: str
    index: tuple[Expr, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class Name:
    """A bare name where a value was expected; only ever an error, kept so the
    checker can say what to write instead."""

    name: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Unary:
    op: str  # "-"
    operand: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Binary:
    op: str  # "+", "-", "*", "/"
    left: Expr
    right: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]
    span: Span | None = _span()


Expr = Num | Ref | Access | Name | Unary | Binary | Call


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `expr`, in source order."""
    if isinstance(expr, Access):
        return expr.index
    if isinstance(expr, Unary):
        return (expr.operand,)
    if isinstance(expr, Binary):
        return (expr.left, expr.right)
    if isinstance(expr, Call):
        return expr.args
    return ()


def walk_expr(expr: Expr) -> Iterator[Expr]:
    """Every sub-expression of `expr`, itself first, in source order."""
    # iterative, so that no nesting depth can exhaust Python's stack
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def accesses(expr: Expr) -> Iterator[Access]:
    """The array accesses of an expression, outermost first, in source order."""
    return (e for e in walk_expr(expr) if isinstance(e, Access))


def map_leaves(expr: Expr, change: Callable[[Expr], Expr]) -> Expr:
    """`expr` with every leaf (an array access, a loop reference, a constant) replaced by `change`
    of it, the operators around them kept."""
    if isinstance(expr, Unary):
        return replace(expr, operand=map_leaves(expr.operand, change))
    if isinstance(expr, Binary):
        return replace(expr, left=map_leaves(expr.left, change), right=map_leaves(expr.right, change))
    if isinstance(expr, Call):
        return replace(expr, args=tuple(map_leaves(x, change) for x in expr.args))
    return change(expr)


def map_accesses(expr: Expr, change: Callable[[Access], Access]) -> Expr:
    """`expr` with every array access replaced by `change` of it."""
    return map_leaves(expr, lambda leaf: change(leaf) if isinstance(leaf, Access) else leaf)


# -- the body ---------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """`target ASSIGN value`: a leaf of the body. `comments` are the comment
    lines written before it; they travel with the operation."""

    target: Access
    assign: str
    value: Expr
    comments: tuple[str, ...] = ()
    span: Span | None = _span()

    @property
    def reduction(self) -> str | None:
        """The reduction operator (`+=`, ...), or None for a plain `=`."""
        return None if self.assign == "=" else self.assign

    @cached_property
    def reads(self) -> tuple[Access, ...]:
        """Every access this operation reads, not counting the accumulator
        read that a reduction implies."""
        found = [a for index in self.target.index for a in accesses(index)]
        found.extend(accesses(self.value))
        return tuple(found)


@dataclass(frozen=True)
class Scope:
    """A one-dimensional iteration scope of `size` iterations. `kind` is ""
    (sequential) or one of SCOPE_KINDS; its span is the size token on the line
    that opened it."""

    size: int
    kind: str
    body: tuple[Node, ...]
    span: Span | None = _span()

    @property
    def token(self) -> str:
        return f"{self.size}:{self.kind}" if self.kind else str(self.size)


Node = Scope | Op


# -- declarations -----------------------------------------------------------


@dataclass(frozen=True)
class Dim:
    """A buffer dimension of logical extent `size`; `stored` is K in `D:K`
    (only K elements are kept and index i means stored element i mod K)."""

    size: int
    stored: int | None = None
    span: Span | None = _span()

    @property
    def storage(self) -> int:
        return self.size if self.stored is None else self.stored

    def __str__(self) -> str:
        return f"{self.size}" if self.stored is None else f"{self.size}:{self.stored}"


@dataclass(frozen=True)
class Buffer:
    """`name dtype [dims] location [-> arrays]`. `arrays` is the list as
    written; empty means the buffer holds one array of its own name."""

    name: str
    dtype: str
    dims: tuple[Dim, ...]
    location: str
    arrays: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()
    span: Span | None = _span()
    dtype_span: Span | None = _span()
    location_span: Span | None = _span()

    @property
    def array_names(self) -> tuple[str, ...]:
        return self.arrays or (self.name,)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def storage_shape(self) -> tuple[int, ...]:
        return tuple(d.storage for d in self.dims)

    @property
    def storage_bytes(self) -> int:
        """The bytes the buffer takes as stored (folded dimensions at their stored sizes)."""
        return prod(self.storage_shape) * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Derivation:
    """Where a program comes from: the spec file (a path relative to this
    file) and the moves, in canonical text, that turn the spec into it."""

    spec: str
    moves: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()
    span: Span | None = _span()
    move_spans: tuple[Span, ...] | None = _span()


@dataclass(frozen=True)
class Program:
    """A whole `.dojo` file. `comments` stand before the kernel line and
    `trailing` after the last line of the body."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    body: tuple[Node, ...]
    comments: tuple[str, ...] = ()
    trailing: tuple[str, ...] = ()
    span: Span | None = _span()
    io_spans: tuple[Span, ...] | None = _span()  # of the names in `inputs + outputs`
    derivation: Derivation | None = None

    @cached_property
    def buffer_of(self) -> dict[str, Buffer]:
        """The buffer that holds each array, by array name."""
        return {array: b for b in self.buffers for array in b.array_names}

    @property
    def temporaries(self) -> tuple[str, ...]:
        io = set(self.inputs) | set(self.outputs)
        return tuple(a for a in self.buffer_of if a not in io)


def walk_ops(nodes: tuple[Node, ...], chain: tuple[Scope, ...] = ()) -> Iterator[tuple[Op, tuple[Scope, ...]]]:
    """Every operation in execution order, with the chain of scopes around it
    (outermost first): `{d}` in the operation names `chain[d]`."""
    for node in nodes:
        if isinstance(node, Op):
            yield node, chain
        else:
            yield from walk_ops(node.body, chain + (node,))


def walk_op_paths(nodes: tuple[Node, ...], path: tuple[int, ...] = (), chain: tuple[Scope, ...] = ()
                  ) -> Iterator[tuple[tuple[int, ...], Op, tuple[Scope, ...]]]:
    """Every operation in execution order with its path (child indices from
    the root) and its chain of scopes. Within one iteration of their common
    scopes, an operation with a smaller path runs first."""
    for i, node in enumerate(nodes):
        if isinstance(node, Op):
            yield path + (i,), node, chain
        else:
            yield from walk_op_paths(node.body, path + (i,), chain + (node,))


def walk_scopes(nodes: tuple[Node, ...], chain: tuple[Scope, ...] = ()) -> Iterator[tuple[Scope, tuple[Scope, ...]]]:
    """Every scope in pre-order, with the chain of scopes above it."""
    for node in nodes:
        if isinstance(node, Scope):
            yield node, chain
            yield from walk_scopes(node.body, chain + (node,))
