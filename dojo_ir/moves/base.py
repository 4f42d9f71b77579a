"""What every move shares: its text form, its declared arguments, and how it
names the nodes it acts on.

A move is a name and keyword arguments, written `join_scopes(op=e, depth=0)`.
Each move module declares its arguments in `ARGS`, in their canonical order:
each argument's key, the kind of thing it names and the values it takes.
Its location names tree nodes the way a person does: an operation by its
label (the array it writes, `op=e`, or `op=e#2` for the second operation
writing `e`, counted in execution order; see `dojo_ir.analysis`), a scope by
an operation inside it and the scope's depth in that operation's chain, a
buffer by its name. These names depend only on the tree, never on the text's
layout, so a move stays valid when the file is printed again.

As Exo's argument processors turn a pattern string into a cursor before the
scheduling op runs, `resolve` turns a move's names into the nodes they name
(`Resolved`) once; a move's `why_not` and `rewrite` receive those nodes and
never look a name up themselves. A move also declares the targets it serves
(`Targets`), which is all a search reads to leave it out for a target.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..analysis import Analysis, Site
from ..errors import NOWHERE, DojoError
from ..paths import TreePath
from ..tree import Buffer, Scope, Span

# The largest integer any argument takes: sizes and factors are extents, which
# the generated code counts in 64-bit integers.
LARGEST = 2**63 - 1


class IllegalMove(DojoError):
    """A move that cannot be applied: malformed, or not legal here; the message says why."""


@dataclass(frozen=True)
class Move:
    """A named transformation at one location. Equality is by text; `line`
    (the line of the node it acts on, where known) is for people."""

    name: str
    args: tuple[tuple[str, str | int], ...]
    line: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.args)})"

    def arg(self, key: str):
        for k, v in self.args:
            if k == key:
                return v
        raise IllegalMove.at(NOWHERE, f"`{self}` needs the argument `{key}`", self.name)


@dataclass(frozen=True)
class Param:
    """One declared argument of a move: its key, the kind of thing it names
    (op, depth, buffer, array, dim, factor, size, location or kind), and its values:
    integers from `low` up to LARGEST, or one of `choices`, or else names
    (an operation label for `op`, a plain name otherwise)."""

    key: str
    kind: str
    low: int | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False

    def describe(self) -> str:
        what = _KIND_WORDS[self.kind]
        if self.low is not None:
            return f"{what}, an integer {self.low} or more"
        if self.choices:
            return f"{what}, one of {_one_of(self.choices)}"
        return what

    def read(self, text: str) -> str | int | None:
        """The value `text` stands for, or None if this argument does not take it."""
        if self.low is not None:
            # Count the digits before converting: Python refuses to convert
            # more than 4,300 of them, and no extent has more than 19.
            if not text.isascii() or not text.isdigit() or len(text.lstrip("0")) > len(str(LARGEST)):
                return None
            value = int(text)
            return value if self.low <= value <= LARGEST else None
        if self.choices:
            return text if text in self.choices else None
        return text if (_LABEL if self.kind == "op" else _NAME).fullmatch(text) else None

    def accepts(self, value: str | int) -> bool:
        """Whether this argument takes `value`, as a Move built by hand holds it."""
        if isinstance(value, int):  # compared, not printed: printing a huge one raises
            return self.low is not None and self.low <= value <= LARGEST
        return self.low is None and self.read(value) == value


_KIND_WORDS = {
    "op": "an operation label (`e`, or `e#2`)",
    "buffer": "a buffer name",
    "array": "an array name",
    "depth": "a scope depth",
    "dim": "a dimension",
    "factor": "a factor",
    "size": "a size",
    "location": "a memory",
    "kind": "a scope kind",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(#[1-9][0-9]{0,8})?")

OP = Param("op", "op")
DEPTH = Param("depth", "depth", low=0)
BUFFER = Param("buffer", "buffer")
DIM = Param("dim", "dim", low=0)


def _one_of(words: tuple[str, ...]) -> str:
    return f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else words[0]


# -- the text form -------------------------------------------------------------

_MOVE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_ARG = re.compile(r"(\s*)([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\S+?)\s*$", re.DOTALL)


def _error(start: int, end: int, message: str, rule: str = "move") -> IllegalMove:
    """An error on characters start:end (0-based) of a one-line move text."""
    return IllegalMove.at(Span(1, start + 1, 1, max(end, start + 1) + 1), message, rule)


def read_move(text: str, declared: Mapping[str, tuple[Param, ...]]) -> Move:
    """`name(key=value, ...)` to a Move, its arguments checked against the
    move's declaration (`declared[name]`) and put in the declared order.
    IllegalMove otherwise, with the column of the culprit in `text` (line 1);
    a caller that read the text from somewhere else shifts it there."""
    match = _MOVE.match(text)
    if not match:
        shown = text.strip() if len(text) < 200 else text.strip()[:200] + "..."
        raise _error(0, len(text), f"`{shown}` is not a move; expected `name(key=value, ...)`")
    name = match.group(1)
    params = declared.get(name)
    if params is None:
        raise _error(match.start(1), match.end(1),
                     f"unknown move `{name[:100]}`; the moves are {', '.join(sorted(declared))}")
    by_key = {p.key: p for p in params}
    given: dict[str, str | int] = {}
    inside, start = match.group(2), match.start(2)
    for part in inside.split(",") if inside.strip() else ():
        end = start + len(part)
        if not part.strip():
            raise _error(start, end, f"an empty argument in `{name}(...)`; expected `key=value`")
        arg = _ARG.match(part)
        if not arg:
            lead = len(part) - len(part.lstrip())
            raise _error(start + lead, start + len(part.rstrip()), f"`{part.strip()[:100]}` is not `key=value`")
        key, value = arg.group(2), arg.group(3)
        key_at, value_at = start + arg.start(2), start + arg.start(3)
        param = by_key.get(key)
        if param is None:
            raise _error(key_at, key_at + len(key), f"`{name}` has no argument `{key[:100]}`; its arguments are "
                         f"{', '.join(by_key)}")
        if key in given:
            raise _error(key_at, key_at + len(key), f"`{key}` is given twice")
        read = param.read(value)
        if read is None:
            raise _error(value_at, value_at + len(value), _bad_value(param, value))
        given[key] = read
        start = end + 1
    for param in params:
        if param.key not in given and not param.optional:
            close = match.end(2)
            raise _error(close, close + 1, f"`{name}` needs the argument `{param.key}`: {param.describe()}")
    return Move(name, tuple((p.key, given[p.key]) for p in params if p.key in given))


def _bad_value(param: Param, value: str) -> str:
    shown = f"`{value}`" if len(value) <= 40 else f"a value of {len(value)} characters"
    if param.low is not None and value.isascii() and value.isdigit() and int(value.lstrip("0")[:20] or 0) >= param.low:
        return f"`{param.key}` is out of range: {param.describe()}, at most {LARGEST}; got {shown}"
    return f"`{param.key}` must be {param.describe()}; got {shown}"


def check_args(move: Move, params: tuple[Param, ...]) -> None:
    """IllegalMove unless `move`'s arguments are those `params` declare, in
    their order, each with a value it takes (a Move built by hand rather than
    by parse_move)."""
    keys = [p.key for p in params if any(k == p.key for k, _ in move.args)]
    by_key = {p.key: p for p in params}
    for key, value in move.args:
        if key not in by_key:
            raise IllegalMove.at(NOWHERE, f"`{move.name}` has no argument `{key}`; its arguments are "
                                 f"{', '.join(by_key)}", "move")
        if not by_key[key].accepts(value):
            raise IllegalMove.at(NOWHERE, f"`{move.name}`: `{key}` must be {by_key[key].describe()}, "
                                 f"at most {LARGEST}", "move")
    if [k for k, _ in move.args] != keys:
        raise IllegalMove.at(NOWHERE, f"`{move}`: the arguments are not in the declared order, "
                             f"{', '.join(by_key)}, or one is given twice", "move")
    for param in params:
        if param.key not in keys and not param.optional:
            raise IllegalMove.at(NOWHERE, f"`{move}` needs the argument `{param.key}`: {param.describe()}", "move")


# -- the nodes a move names ----------------------------------------------------


class Resolved(NamedTuple):
    """A move with the nodes its arguments name, looked up once in one program:
    `site`, the operation `op=` names; `path`, the node the move acts on (the
    scope `op=, depth=` names, else that operation); `scope`, that scope;
    `buffer`, the buffer a `buffer` argument names or the one holding the
    array an `array` argument names. What the move has no argument for is
    None, and so is the buffer of an array that is not there: that a scope
    reads no such array is the move's reason, not a malformed move. (A named
    tuple: one is built for every candidate the move finder checks.)"""

    move: Move
    site: Site | None = None
    path: TreePath | None = None
    scope: Scope | None = None
    buffer: Buffer | None = None

    def arg(self, key: str):
        return self.move.arg(key)


def resolve(a: Analysis, move: Move, params: tuple[Param, ...]) -> Resolved:
    """`move`, its arguments declared by `params` (an `op` before its `depth`),
    with the nodes they name in `a`'s program; IllegalMove, naming the move,
    when one names nothing there."""
    given = dict(move.args)
    site = path = scope = buffer = None
    for param in params:
        if param.key not in given:
            continue
        kind, value = param.kind, given[param.key]
        if kind == "op":
            site = _site(a, move, str(value))
            path = site.path
        elif kind == "depth":
            path, scope = _scope(a, move, site, value)
        elif kind == "buffer":
            buffer = _declared(a, move, str(value))
        elif kind == "array":
            buffer = a.program.buffer_of.get(str(value))
    return Resolved(move, site, path, scope, buffer)


def _site(a: Analysis, move: Move, label: str) -> Site:
    found = a.by_label.get(label)
    if found is None:
        known = ", ".join(s.label for s in a.sites)
        raise IllegalMove.at(NOWHERE, f"`{move}`: no operation `{label}`; the operations are {known}", move.name)
    return found


def _scope(a: Analysis, move: Move, site: Site, depth: int) -> tuple[TreePath, Scope]:
    if depth >= len(site.chain):
        raise IllegalMove.at(NOWHERE, f"`{move}`: operation `{site.label}` has "
                             f"{len(site.chain)} scope(s) around it, so depth is 0 to {len(site.chain) - 1}",
                             move.name)
    return site.path[: depth + 1], site.chain[depth]


def _declared(a: Analysis, move: Move, name: str) -> Buffer:
    found = next((b for b in a.program.buffers if b.name == name), None)
    if found is None:
        known = ", ".join(b.name for b in a.program.buffers)
        raise IllegalMove.at(NOWHERE, f"`{move}`: no buffer `{name}`; the buffers are {known}", move.name)
    return found


@dataclass(frozen=True)
class Targets:
    """The targets a move serves: CPUs (C code), GPUs (CUDA and HIP), and the
    values of its arguments that only a GPU has (`location=shared`: a CPU has
    no shared memory)."""

    cpu: bool = True
    gpu: bool = True
    gpu_only: tuple[tuple[str, str], ...] = ()

    def serve(self, move: Move, language: str) -> bool:
        """Whether a target whose code is in `language` ("c", "cuda", "hip") can use `move`."""
        if language != "c":
            return self.gpu
        if not self.gpu_only:  # asked of every candidate a search lists: the common case stays cheap
            return self.cpu
        return self.cpu and not any(pair in self.gpu_only for pair in move.args)

    def describe(self) -> str:
        served = "CPUs and GPUs" if self.cpu and self.gpu else "CPUs only" if self.cpu else "GPUs only"
        only = ", ".join(f"`{key}={value}`" for key, value in self.gpu_only)
        return f"{served} ({only} on GPUs only)" if only else served


EVERY_TARGET = Targets()
CPU_ONLY = Targets(gpu=False)
GPU_ONLY = Targets(cpu=False)


def site_of(a: Analysis, move: Move) -> Site:
    """The operation a move names with `op=...`."""
    return _site(a, move, str(move.arg("op")))


def scope_of(a: Analysis, move: Move) -> tuple[Site, TreePath, Scope]:
    """The scope a move names with `op=..., depth=...`."""
    site = site_of(a, move)
    return (site, *_scope(a, move, site, move.arg("depth")))


def move_lines(a: Analysis, move: Move) -> tuple[int, int] | None:
    """The lines of the node a move acts on (first, last): a scope spans
    its operations' lines, a buffer its declaration. None for a tree that
    was not parsed from text, or a location that is not there."""
    args = dict(move.args)
    # a move on a scope may name a buffer too (stage_reads); it acts on the scope
    if "buffer" in args and "op" not in args:
        buffer = next((b for b in a.program.buffers if b.name == args["buffer"]), None)
        return (buffer.span.line, buffer.span.line) if buffer is not None and buffer.span else None
    site = a.by_label.get(str(args.get("op")))
    if site is None:
        return None
    depth = args.get("depth")
    if isinstance(depth, int) and depth >= len(site.chain):
        return None
    return a.lines_of(site.path if not isinstance(depth, int) else site.path[: depth + 1])
