"""What the moves on buffers share: placing a move on a buffer, which buffers
may change layout, and rewriting a declaration."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from ..analysis import Analysis, Site
from ..tree import KEYWORDS, Access, Buffer, Dim, Expr, Program, map_accesses
from .base import Move


def buffer_move(name: str, buffer: Buffer, **args: str | int) -> Move:
    """The move `name(buffer=..., **args)`, placed on the buffer's declaration line."""
    return Move(name, (("buffer", buffer.name), *args.items()), buffer.span.line if buffer.span else None)


def interface(program: Program, buffer: Buffer) -> str | None:
    """Why the layout of `buffer` may not change, if it holds a kernel input or output."""
    for array in buffer.array_names:
        if array in program.inputs or array in program.outputs:
            return (f"`{array}` is a kernel input or output, whose layout is the kernel's interface; "
                    "only temporaries can be rearranged")
    return None


def temporaries(program: Program) -> Iterator[Buffer]:
    return (b for b in program.buffers if interface(program, b) is None)


def bad_dim(buffer: Buffer, dim: int, count: int | None = None) -> str | None:
    """Why `dim` does not name one of the first `count` (default: all) dimensions of `buffer`."""
    count = len(buffer.dims) if count is None else count
    if dim < count:
        return None
    if count <= 0:
        return f"`{buffer.name}` has no such dimension"
    return f"dim must be 0 to {count - 1} for `{buffer.name}`"


def buffer_accesses(a: Analysis, buffer: Buffer) -> list[tuple[Site, Access]]:
    """Every access to every array of `buffer`, with the operation it is in."""
    arrays = set(buffer.array_names)
    return [(s, x) for s in a.sites for x in (s.op.target, *s.op.reads) if x.array in arrays]


def with_dim(program: Program, buffer: Buffer, k: int, dim: Dim) -> Program:
    """`program` with dimension k of `buffer` declared as `dim`."""
    dims = buffer.dims[:k] + (dim,) + buffer.dims[k + 1:]
    return with_buffer(program, replace(buffer, dims=dims))


def fresh_name(program: Program, stem: str) -> str:
    """`stem`, or `stem2`, `stem3`, ... when the name is taken by an array, a buffer or a keyword."""
    taken = set(program.buffer_of) | {b.name for b in program.buffers} | KEYWORDS
    name, n = stem, 1
    while name in taken:
        n += 1
        name = f"{stem}{n}"
    return name


def declared(program: Program, buffer: Buffer) -> Program:
    """`program` with `buffer` declared after the others."""
    return replace(program, buffers=program.buffers + (buffer,))


def undeclared(program: Program, buffer: Buffer) -> Program:
    """`program` without the declaration of `buffer`."""
    return replace(program, buffers=tuple(b for b in program.buffers if b is not buffer))


def with_buffer(program: Program, buffer: Buffer) -> Program:
    """`program` with the declaration of the buffer of that name replaced."""
    return replace(program, buffers=tuple(buffer if b.name == buffer.name else b for b in program.buffers))


def with_reads(expr: Expr, array: str, change: Callable[[Access], Access]) -> Expr:
    """`expr` with every access to `array` replaced by `change` of it."""
    return map_accesses(expr, lambda access: change(access) if access.array == array else access)
