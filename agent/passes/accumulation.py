"""Accumulation: reductions accumulated in registers (`accumulate`)."""

from __future__ import annotations

from .state import MAX_STEPS, State, sites, uses


def accumulate(state: State) -> None:
    """Keep each reduction's partial result in a register over the scopes its target does not use."""
    done: set[str] = set()
    for _ in range(MAX_STEPS):
        for site in sites(state):
            if site.op.reduction is None or site.label in done:
                continue
            done.add(site.label)
            used = [d for d in range(len(site.chain)) if uses(site.op.target, d)]
            depth = (max(used) + 1) if used else 0
            if depth < len(site.chain) and state.play(f"accumulate(op={site.label}, depth={depth})"):
                break  # the labels changed; look again
        else:
            return
