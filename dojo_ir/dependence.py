"""Dependence analysis of affine accesses.

Two accesses conflict when some instance of the first and some instance of
the second touch the same element of the same buffer (arrays that share a
buffer share its storage). Each instance is a point of its operation's
iteration box; the question becomes an integer feasibility problem
(`solve.py`) with one variable per enclosing scope of each side.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache

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
    accumulator: bool = False

    @cached_property
    def forms(self) -> tuple[Affine, ...]:
        return tuple(affine(i) for i in self.access.index)

    @cached_property
    def sizes(self) -> tuple[int, ...]:
        return tuple(s.size for s in self.chain)


def touches(op: Op, chain: tuple[Scope, ...]) -> list[Touch]:
    found = [Touch(op, op.target, chain, write=True)]
    if op.reduction:
        found.append(Touch(op, op.target, chain, write=False, accumulator=True))
    found.extend(Touch(op, a, chain, write=False) for a in op.reads)
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


def _overwritten(read: Touch, read_path, writes) -> bool:
    """Is the element `read` reads always written earlier in the same
    iteration of every scope the two share, by a plain `=` (`writes` are the
    writes to its buffer)? Then its value never comes from an earlier
    iteration: a temporary reused each time."""
    used = {d for f in read.forms for d in f.depths}
    for path, w in writes:
        if path < read_path and not w.op.reduction and w.forms == read.forms:
            shared = _common(path, read_path)
            if all(d < shared for d in used):
                return True
    return False


def carried_flows(program: Program) -> Iterator[Flow]:
    """Every pair of accesses through which a value can flow from one
    iteration of a scope to a later iteration of the same scope. A read whose
    element the same iteration always writes first carries nothing.
    Undecidable pairs (the solver's budget ran out) are not reported."""
    buffer_of = program.buffer_of
    placed = [(path, t) for path, op, chain in walk_op_paths(program.body) for t in touches(op, chain)]
    for scope_path, (scope, above) in zip(_scope_paths(program.body), walk_scopes(program.body), strict=True):
        depth = len(above)
        directions = ("=",) * depth + ("<",)
        inside = [(path, t) for path, t in placed if path[: depth + 1] == scope_path]
        writes: dict[str, list[tuple[tuple[int, ...], Touch]]] = {}
        for path, t in inside:
            if t.write:
                writes.setdefault(buffer_of[t.access.array].name, []).append((path, t))
        for read_path, r in inside:
            buffer = buffer_of[r.access.array]
            candidates = writes.get(buffer.name, ()) if not r.write else ()
            flows = [w for _, w in candidates if conflict(w, r, buffer, directions)]
            if not flows or _overwritten(r, read_path, candidates):
                continue
            for w in flows:
                carried = r.accumulator and w.op.reduction in (None, r.op.reduction)
                yield Flow(scope, depth, w.access, r.access, w.op, r.op, carried)


def _scope_paths(nodes, path: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    """The path of every scope, in the pre-order of `walk_scopes`."""
    for i, node in enumerate(nodes):
        if isinstance(node, Scope):
            yield path + (i,)
            yield from _scope_paths(node.body, path + (i,))
