"""Facts about one program that moves and code generation ask for again and
again: its operations with their labels and places, and dependence questions
about its subtrees.

An operation's label is the array it writes (`e`), or, when several
operations write that array, the array and the operation's rank among them in
execution order (`e#2`). Labels depend only on the tree, never on the text's
layout, so they survive printing the program again; moves name their
locations with them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from .dependence import Touch, conflict, touches
from .paths import TreePath
from .tree import Op, Program, Scope, walk_op_paths


@dataclass(frozen=True)
class Site:
    """One operation with everything needed to know about where it is."""

    label: str  # `e` or `e#2`
    path: TreePath
    op: Op
    chain: tuple[Scope, ...]

    @property
    def line(self) -> int | None:
        return self.op.span.line if self.op.span else None


class Analysis:
    """Facts about one program, computed once and shared by every question.
    Cheap to build; the expensive parts are computed on demand. `memo` keeps
    what its users derive from these facts for as long as the facts hold."""

    def __init__(self, program: Program):
        self.program = program
        self.memo: dict = {}

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
        """Each site by its label; `e#1` also names the only operation writing `e`."""
        labels = {s.label: s for s in self.sites}
        for s in self.sites:
            labels.setdefault(f"{s.op.target.array}#1", s)
        return labels

    def first_site(self, path: TreePath) -> Site:
        """The first operation (in execution order) inside the node at `path`."""
        return self._first_sites[path]

    @cached_property
    def _first_sites(self) -> dict[TreePath, Site]:
        # every candidate of every move names its node by its first operation: looked up, not searched
        first: dict[TreePath, Site] = {}
        for site in self.sites:
            for depth in range(1, len(site.path) + 1):
                first.setdefault(site.path[:depth], site)
        return first

    def locate(self, path: TreePath) -> tuple[str, int | None]:
        """How the node at `path` is named: (op label, depth or None for an op)."""
        site = self.first_site(path)
        return site.label, (None if len(path) == len(site.path) else len(path) - 1)

    def lines_of(self, path: TreePath) -> tuple[int, int] | None:
        """The first and last line of the operations inside the node at `path`;
        None for a tree that was not parsed from text."""
        found = self._node_lines.get(path, False)
        if found is False:
            inside = [s.line for s in self.sites if s.path[: len(path)] == path and s.line is not None]
            found = self._node_lines[path] = (min(inside), max(inside)) if inside else None
        return found

    @cached_property
    def _node_lines(self) -> dict[TreePath, tuple[int, int] | None]:
        return {}

    @cached_property
    def _touches(self) -> list[tuple[TreePath, Touch]]:
        return [(s.path, t) for s in self.sites for t in touches(s.op, s.chain)]

    def touches_in(self, path: TreePath) -> list[Touch]:
        """Every access of every operation inside the node at `path`."""
        found = self._touches_in.get(path)
        if found is None:
            n = len(path)
            found = self._touches_in[path] = [t for p, t in self._touches if p[:n] == path]
        return found

    @cached_property
    def _touches_in(self) -> dict[TreePath, list[Touch]]:
        return {}

    def placed_touches_in(self, path: TreePath) -> list[tuple[TreePath, Touch]]:
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
