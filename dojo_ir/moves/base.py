"""What every move shares: its text form, locations, and tree surgery.

A move is a name and keyword arguments, written `join_scopes(op=e, depth=0)`.
Its location names tree nodes the way a person does: an operation by the
array it writes (`op=e`, or `op=e#2` for the second operation writing `e`,
counted in execution order), a scope by an operation inside it and the scope's
depth in that operation's chain, a buffer by its name. These names depend
only on the tree, never on the text's layout, so a move stays valid when the
file is printed again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..dependence import Touch, conflict, touches
from ..errors import DojoError
from ..tree import Node, Op, Program, Scope, Span, walk_op_paths

Path = tuple[int, ...]  # child indices from the root body down to a node


class IllegalMove(DojoError):
    """A move that cannot be applied here; the message says why."""


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


NOWHERE = Span(1, 1, 1, 1)
_MOVE = re.compile(r"\s*([a-z_][a-z0-9_]*)\s*\((.*)\)\s*$")
_ARG = re.compile(r"\s*([a-z_]+)\s*=\s*([A-Za-z0-9_#]+)\s*$")


def parse_move(text: str) -> Move:
    """`name(key=value, ...)` to a Move; integers become ints."""
    match = _MOVE.match(text)
    if not match:
        raise DojoError.at(NOWHERE, f"`{text.strip()}` is not a move; expected `name(key=value, ...)`", "move")
    args = []
    for part in filter(str.strip, match.group(2).split(",")):
        arg = _ARG.match(part)
        if not arg:
            raise DojoError.at(NOWHERE, f"`{part.strip()}` in `{text.strip()}` is not `key=value`", "move")
        value = arg.group(2)
        args.append((arg.group(1), int(value) if value.isdigit() else value))
    return Move(match.group(1), tuple(args))


# -- the tree as seen by the moves ------------------------------------------


@dataclass(frozen=True)
class Site:
    """One operation with everything a move needs to know about where it is."""

    label: str  # `e` or `e#2`
    path: Path
    op: Op
    chain: tuple[Scope, ...]

    @property
    def line(self) -> int | None:
        return self.op.span.line if self.op.span else None


class Analysis:
    """Facts about one program, computed once and shared by every move's
    `find`: the operations and their labels, and dependence questions about
    subtrees. Cheap to build; the expensive parts are computed on demand."""

    def __init__(self, program: Program):
        self.program = program

    @cached_property
    def sites(self) -> list[Site]:
        found = list(walk_op_paths(self.program.body))
        writers = Counter(op.target.array for _, op, _ in found)
        seen: Counter[str] = Counter()
        labelled = []
        for path, op, chain in found:
            array = op.target.array
            seen[array] += 1
            labelled.append(Site(array if writers[array] == 1 else f"{array}#{seen[array]}", path, op, chain))
        return labelled

    @cached_property
    def by_label(self) -> dict[str, Site]:
        labels = {s.label: s for s in self.sites}
        for s in self.sites:
            labels.setdefault(f"{s.op.target.array}#1", s)
        return labels

    def site(self, move: Move) -> Site:
        label = str(move.arg("op"))
        found = self.by_label.get(label)
        if found is None:
            known = ", ".join(s.label for s in self.sites)
            raise IllegalMove.at(NOWHERE, f"`{move}`: no operation `{label}`; the operations are {known}", move.name)
        return found

    def scope(self, move: Move) -> tuple[Site, Path, Scope]:
        """The scope a move names with `op=..., depth=...`."""
        site = self.site(move)
        depth = move.arg("depth")
        if not isinstance(depth, int) or depth >= len(site.chain):
            raise IllegalMove.at(NOWHERE, f"`{move}`: operation `{site.label}` has "
                                 f"{len(site.chain)} scope(s) around it, so depth is 0 to {len(site.chain) - 1}",
                                 move.name)
        return site, site.path[: depth + 1], site.chain[depth]

    def first_site(self, path: Path) -> Site:
        """The first operation (in execution order) inside the node at `path`."""
        return self._first_sites[path]

    @cached_property
    def _first_sites(self) -> dict[Path, Site]:
        # every candidate of every move names its node by its first operation: looked up, not searched
        first: dict[Path, Site] = {}
        for site in self.sites:
            for depth in range(1, len(site.path) + 1):
                first.setdefault(site.path[:depth], site)
        return first

    def locate(self, path: Path) -> tuple[str, int | None]:
        """How a move names the node at `path`: (op label, depth or None for an op)."""
        site = self.first_site(path)
        return site.label, (None if len(path) == len(site.path) else len(path) - 1)

    def lines(self, move: Move) -> tuple[int, int] | None:
        """The lines of the node a move acts on (first, last): a scope spans
        its operations' lines, a buffer its declaration. None for a tree that
        was not parsed from text."""
        args = dict(move.args)
        if "buffer" in args:
            buffer = next((b for b in self.program.buffers if b.name == args["buffer"]), None)
            return (buffer.span.line, buffer.span.line) if buffer is not None and buffer.span else None
        site = self.by_label.get(str(args.get("op")))
        if site is None:
            return None
        depth = args.get("depth")
        return self._lines_of(site.path if not isinstance(depth, int) else site.path[: depth + 1])

    def _lines_of(self, path: Path) -> tuple[int, int] | None:
        found = self._node_lines.get(path, False)
        if found is False:
            inside = [s.line for s in self.sites if s.path[: len(path)] == path and s.line is not None]
            found = self._node_lines[path] = (min(inside), max(inside)) if inside else None
        return found

    @cached_property
    def _node_lines(self) -> dict[Path, tuple[int, int] | None]:
        return {}

    def candidates(self, kind) -> list[Move]:
        """`kind.candidates(self)`, remembered (the editor filters them per line)."""
        known = self._candidates.get(kind.NAME)
        if known is None:
            known = self._candidates[kind.NAME] = list(kind.candidates(self))
        return known

    @cached_property
    def _candidates(self) -> dict[str, list[Move]]:
        return {}

    def legal(self, kind, move: Move) -> bool:
        """Whether `kind` (a move module) allows `move` here; remembered, as
        the editor asks again for the moves of the scopes around each line."""
        known = self._legal.get(move)
        if known is None:
            known = self._legal[move] = kind.why_not(self, move) is None
        return known

    @cached_property
    def _legal(self) -> dict[Move, bool]:
        return {}

    @cached_property
    def _touches(self) -> list[tuple[Path, Touch]]:
        return [(s.path, t) for s in self.sites for t in touches(s.op, s.chain)]

    def touches_in(self, path: Path) -> list[Touch]:
        """Every access of every operation inside the node at `path`."""
        found = self._touches_in.get(path)
        if found is None:
            n = len(path)
            found = self._touches_in[path] = [t for p, t in self._touches if p[:n] == path]
        return found

    @cached_property
    def _touches_in(self) -> dict[Path, list[Touch]]:
        return {}

    def placed_touches_in(self, path: Path) -> list[tuple[Path, Touch]]:
        """`touches_in` with the path of each touch's operation, which tells
        equal operations in different places apart."""
        n = len(path)
        return [(p, t) for p, t in self._touches if p[:n] == path]

    def depends(self, first: list[Touch], second: list[Touch], directions: tuple[str, ...],
                reorderable_reductions: bool = True, private: frozenset[str] = frozenset()) -> bool:
        """Could an access in `first` and one in `second` touch the same
        stored element (at least one writing), with the two instances'
        iteration variables related by `directions` (one of `= < > *` per
        depth, first's variable against second's)? Undecided counts as yes.
        With `reorderable_reductions`, two updates of the same reduction
        operator do not count: reordering them only reassociates. Buffers
        named in `private` are compared by logical element, not stored slot:
        the caller gives each iteration its own copy of them."""
        buffer_of = self.program.buffer_of
        # Only accesses of one buffer can conflict: pairing each access with those of its own buffer
        # keeps a scope of many operations (a fission's two parts) from pairing every access with every other.
        by_buffer: dict[str, list[Touch]] = {}
        for b in second:
            by_buffer.setdefault(buffer_of[b.access.array].name, []).append(b)
        for a in first:
            buffer = buffer_of[a.access.array]
            for b in by_buffer.get(buffer.name, ()):
                if not (a.write or b.write):
                    continue
                if reorderable_reductions and _same_reduction(a, b):
                    continue
                if conflict(a, b, buffer, directions, storage=buffer.name not in private) is not False:
                    return True
        return False


def _same_reduction(a: Touch, b: Touch) -> bool:
    """Both are the accumulator of reductions with the same operator."""
    return (a.op.reduction is not None and a.op.reduction == b.op.reduction
            and (a.write or a.accumulator) and (b.write or b.accumulator))


# -- tree surgery ------------------------------------------------------------


def node_at(body: tuple[Node, ...], path: Path) -> Node:
    node: Node = body[path[0]]
    for i in path[1:]:
        assert isinstance(node, Scope)
        node = node.body[i]
    return node


def splice(body: tuple[Node, ...], path: Path, nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """`body` with the node at `path` replaced by `nodes` (zero or more)."""
    i = path[0]
    if len(path) == 1:
        return body[:i] + nodes + body[i + 1:]
    scope = body[i]
    assert isinstance(scope, Scope)
    return body[:i] + (replace(scope, body=splice(scope.body, path[1:], nodes)),) + body[i + 1:]


def with_body(program: Program, body: tuple[Node, ...]) -> Program:
    return replace(program, body=body)


def iter_paths(body: tuple[Node, ...], path: Path = ()) -> Iterator[tuple[Path, Node]]:
    """Every node with its path, in pre-order."""
    for i, node in enumerate(body):
        yield path + (i,), node
        if isinstance(node, Scope):
            yield from iter_paths(node.body, path + (i,))
