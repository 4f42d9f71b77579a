"""Dependence analysis of affine accesses.

Two accesses conflict when some instance of the first and some instance of
the second touch the same element of the same buffer (arrays that share a
buffer share its storage). Each instance is a point of its operation's
iteration box; the question becomes an integer feasibility problem
(`solve.py`) with one variable per enclosing scope of each side.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from .affine import Affine, affine
from .solve import Constraint, feasible
from .tree import Access, Buffer, Op, Program, Scope, walk_op_paths, walk_scopes


@dataclass(frozen=True)
class Touch:
    """One access of an operation: its target (a write), a read, or the read
    of the accumulator that a reduction implies."""

    op: Op
    access: Access
    chain: tuple[Scope, ...]
    write: bool
    accumulator: bool
    forms: tuple[Affine, ...]  # the access's index as affine forms
    sizes: tuple[int, ...]  # the extents of the scopes of `chain`


def touches(op: Op, chain: tuple[Scope, ...]) -> list[Touch]:
    # Computed here rather than on demand: every dependence question asks for them, and a
    # cached_property takes a lock shared by all instances on Python 3.11.
    sizes = tuple(s.size for s in chain)

    def touch(access: Access, write: bool, accumulator: bool = False) -> Touch:
        return Touch(op, access, chain, write, accumulator, tuple(affine(i) for i in access.index), sizes)

    found = [touch(op.target, write=True)]
    if op.reduction:
        found.append(touch(op.target, write=False, accumulator=True))
    found.extend(touch(a, write=False) for a in op.reads)
    return found


def conflict(first: Touch, second: Touch, buffer: Buffer, directions: tuple[str, ...],
             storage: bool = False) -> bool | None:
    """Can an instance of `first` and an instance of `second` touch the same
    element of `buffer`, with their iteration variables related by
    `directions`? `directions[d]` relates the two variables at depth d
    (both chains must be at least that deep): `=`, `<` (first's is less),
    `>` or `*` (any). With `storage`, `D:K` dimensions compare stored
    elements (i mod K), so folded storage may make distinct logical elements
    collide. None means the analysis could not decide."""
    folds = tuple(d.stored for d in buffer.dims) if storage else (None,) * len(buffer.dims)
    return _conflict(first.forms, first.sizes, second.forms, second.sizes, folds, directions)


@lru_cache(maxsize=65536)
def _conflict(first: tuple[Affine, ...], first_sizes: tuple[int, ...], second: tuple[Affine, ...],
              second_sizes: tuple[int, ...], folds: tuple[int | None, ...], directions: tuple[str, ...]) -> bool | None:
    # Kernels repeat the same index patterns on many arrays, so the question
    # is asked in terms of index forms and extents only, and cached.
    n_first = len(first_sizes)
    bounds = [(0, size - 1) for size in first_sizes + second_sizes]
    constraints: list[Constraint] = []
    for depth, relation in enumerate(directions):
        a, b = depth, n_first + depth
        if relation == "=":
            constraints.append(Constraint(((a, 1), (b, -1)), 0, True))
        elif relation == "<":
            constraints.append(Constraint(((a, 1), (b, -1)), 1, False))
        elif relation == ">":
            constraints.append(Constraint(((b, 1), (a, -1)), 1, False))
    for fold, fa, fb in zip(folds, first, second, strict=True):
        coefs = dict(fa.terms)
        for depth, c in fb.terms:
            coefs[n_first + depth] = coefs.get(n_first + depth, 0) - c
        const = fa.const - fb.const
        if fold is not None:
            # a - b = K * t for some integer t: the same stored slot.
            low_a, high_a = fa.bounds(first_sizes)
            low_b, high_b = fb.bounds(second_sizes)
            slot = len(bounds)
            bounds.append(((low_a - high_b) // fold - 1, (high_a - low_b) // fold + 1))
            coefs[slot] = -fold
        terms = tuple((v, c) for v, c in coefs.items() if c)
        if not terms:
            if const:
                return False
            continue
        constraints.append(Constraint(terms, const, True))
    return feasible(bounds, constraints)


@dataclass(frozen=True)
class Flow:
    """An element written by `write` in one iteration of `scope` and read by
    `read` in a later iteration of it."""

    scope: Scope
    depth: int
    write: Access
    read: Access
    write_op: Op
    read_op: Op
    reduction_carried: bool  # the read is a reduction's accumulator, fed by the same operator or a plain write


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) - 1 and a[n] == b[n]:
        n += 1
    return n


Steps = tuple[int, ...]  # child indices from the root to an operation


@dataclass
class _Writes:
    """The writes inside one scope, indexed so that each read is answered
    without looking at every write (which made checking long files quadratic).
    Writes with the same index forms and extents conflict with a read alike,
    so one question is asked per such group."""

    # buffer -> (index forms, extents) -> reduction operator (None: `=`) -> the first such write
    first: dict[str, dict[tuple, dict[str | None, tuple[Steps, Touch]]]]
    # (buffer, index forms) -> paths of the plain `=` writes, in program order
    plain: dict[tuple[str, tuple[Affine, ...]], list[Steps]]

    @classmethod
    def of(cls, inside: list[tuple[Steps, Touch]], buffer_of: dict[str, Buffer]) -> _Writes:
        first: dict[str, dict[tuple, dict[str | None, tuple[Steps, Touch]]]] = {}
        plain: dict[tuple[str, tuple[Affine, ...]], list[Steps]] = {}
        for path, t in inside:
            if t.write:
                buffer = buffer_of[t.access.array].name
                group = first.setdefault(buffer, {}).setdefault((t.forms, t.sizes), {})
                group.setdefault(t.op.reduction, (path, t))
                if not t.op.reduction:
                    plain.setdefault((buffer, t.forms), []).append(path)
        return cls(first, plain)

    def overwritten(self, buffer: str, read: Touch, read_path: Steps) -> bool:
        """Is the element `read` reads always written earlier in the same
        iteration of every scope the two share, by a plain `=`? Then its value
        never comes from an earlier iteration: a temporary reused each time."""
        paths = self.plain.get((buffer, read.forms), [])
        before = bisect_left(paths, read_path)
        if not before:
            return False
        # of the earlier writes, the last shares the most enclosing scopes with the read
        shared = _common(paths[before - 1], read_path)
        return all(d < shared for f in read.forms for d in f.depths)


def carried_flows(program: Program) -> Iterator[Flow]:
    """Every read into which a value can flow from one iteration of a scope to
    a later iteration of the same scope, once per scope around it, with the
    first write it can come from other than into a reduction's accumulator
    (or, when there is none, the first write it can come from at all). A
    read whose element the same iteration always writes first carries
    nothing. Undecidable pairs (the solver's budget ran out) are not
    reported."""
    buffer_of = program.buffer_of
    placed = [(path, t) for path, op, chain in walk_op_paths(program.body) for t in touches(op, chain)]
    paths = [path for path, _ in placed]
    for scope_path, (scope, above) in zip(_scope_paths(program.body), walk_scopes(program.body), strict=True):
        depth = len(above)
        directions = ("=",) * depth + ("<",)
        # `placed` is in pre-order, which orders paths as tuples: the touches
        # inside the scope are one run of it, found by bisection
        after = scope_path[:-1] + (scope_path[-1] + 1,)
        inside = placed[bisect_left(paths, scope_path):bisect_left(paths, after)]
        writes = _Writes.of(inside, buffer_of)
        for read_path, r in inside:
            if r.write:
                continue
            buffer = buffer_of[r.access.array]
            found = [
                (path, w)
                for group in writes.first.get(buffer.name, {}).values()
                if conflict(next(iter(group.values()))[1], r, buffer, directions)
                for path, w in group.values()
            ]
            if not found or writes.overwritten(buffer.name, r, read_path):
                continue
            uncarried = [(path, w) for path, w in found if not _carried(w, r)]
            _, w = min(uncarried or found, key=lambda pair: pair[0])
            yield Flow(scope, depth, w.access, r.access, w.op, r.op, _carried(w, r))


def _carried(write: Touch, read: Touch) -> bool:
    """Whether the flow feeds a reduction's accumulator through the same operator or a plain write."""
    return read.accumulator and write.op.reduction in (None, read.op.reduction)


def _scope_paths(nodes, path: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    """The path of every scope, in the pre-order of `walk_scopes`."""
    for i, node in enumerate(nodes):
        if isinstance(node, Scope):
            yield path + (i,)
            yield from _scope_paths(node.body, path + (i,))
