"""Parallelisation: the outermost parallel scope on the cores, where the iterations balance."""

from __future__ import annotations

from codegen.targets import Target
from dojo_ir.tree import Scope

from .state import BALANCED_ITERATIONS, State, balanced, sites


def parallelize(state: State, target: Target) -> None:
    """Run the outermost scope that allows it on the target's cores, in every loop nest; or one
    further in whose iterations balance over the cores where the outermost's do not, when the
    scopes outside it run few times (3 blocks of channels on 2 cores leave one core idle a third
    of the time, the 28 rows inside them do not; the rows inside 7 blocks would start the threads
    49 times)."""
    if target.language != "c" or target.cores < 2:
        return
    for label in [s.label for s in sites(state)]:
        site = state.analysis.by_label.get(label)
        if site is None or any(s.kind in ("p", "g", "b", "w") for s in site.chain):
            continue
        plain = next((d for d, scope in enumerate(site.chain) if scope.kind), len(site.chain))
        candidates = [d for d in range(plain) if site.chain[d].size >= 2]
        for depth in _balanced_first(site.chain, candidates, target.cores):
            if state.play(f"parallelize_scope(op={label}, depth={depth})"):
                break


def _balanced_first(chain: tuple[Scope, ...], candidates: list[int], cores: int) -> list[int]:
    """`candidates` (depths, outermost first), a balanced one first when the outermost is not and
    the scopes outside it run at most BALANCED_ITERATIONS times a core."""
    if not candidates or balanced(chain[candidates[0]].size, cores):
        return candidates
    runs = 1
    for depth in candidates:
        if balanced(chain[depth].size, cores):
            return [depth, *(d for d in candidates if d != depth)]
        runs *= chain[depth].size
        if runs > BALANCED_ITERATIONS * cores:
            break
    return candidates
