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
from functools import lru_cache

from .affine import Affine, affine
from .solve import Constraint, feasible
from .tree import Access, Buffer, Op, Program, Scope, walk_ops, walk_scopes


@dataclass(frozen=True)
class Touch:
    """One access of an operation: its target (a write), a read, or the read
    of the accumulator that a reduction implies."""

    op: Op
    access: Access
    chain: tuple[Scope, ...]
    write: bool
    accumulator: bool = False


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
    return _conflict(
        tuple(affine(i) for i in first.access.index),
        tuple(s.size for s in first.chain),
        tuple(affine(i) for i in second.access.index),
        tuple(s.size for s in second.chain),
        tuple(d.stored if storage else None for d in buffer.dims),
        directions,
    )


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


def carried_flows(program: Program) -> Iterator[Flow]:
    """Every pair of accesses through which a value can flow from one
    iteration of a scope to a later iteration of the same scope. Undecidable
    pairs (the solver's budget ran out) are not reported."""
    buffer_of = program.buffer_of
    for scope, above in walk_scopes(program.body):
        depth = len(above)
        inside = [t for op, chain in walk_ops(scope.body, above + (scope,)) for t in touches(op, chain)]
        writes = [t for t in inside if t.write]
        reads = [t for t in inside if not t.write]
        for w in writes:
            buffer = buffer_of[w.access.array]
            for r in reads:
                if buffer_of[r.access.array] is not buffer:
                    continue
                if conflict(w, r, buffer, ("=",) * depth + ("<",)):
                    carried = r.accumulator and w.op.reduction in (None, r.op.reduction)
                    yield Flow(scope, depth, w.access, r.access, w.op, r.op, carried)
