"""Interchange: loop nests reordered so that the innermost scope walks memory contiguously."""

from __future__ import annotations

from codegen.targets import Target

from .state import State, lanes, op_bytes, sites, strided, vector_along


def interchange(state: State, target: Target) -> None:
    """In every perfect loop nest around one operation, move the scope along which most of its
    accesses are contiguous innermost, when it beats the innermost one; but first a scope that
    makes a vector of at least half the target's lanes (`vector_along`) over one narrower: a
    2x2 pool window innermost is a vector of 2, its output's row one of 16 whose reads are
    strided."""
    for label in [s.label for s in sites(state)]:
        site = state.analysis.by_label.get(label)
        if site is None or len(site.chain) < 2:
            continue
        chain, op = site.chain, site.op
        inner = len(chain) - 1
        half = lanes(target, op_bytes(state.program, op)) // 2
        cost = [(not (chain[d].size >= half and vector_along(op, d)), strided(op, d)) for d in range(len(chain))]
        best = min(range(len(chain)), key=lambda d: (cost[d], -d))
        if cost[best] >= cost[inner] or any(s.kind for s in chain[best:]):
            continue
        # bubble the scope at `best` inward; stop at the first interchange that is not legal
        for depth in range(best, inner):
            if not state.play(f"swap_scopes(op={label}, depth={depth})"):
                break
