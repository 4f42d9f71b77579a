"""Parallelisation: the outermost parallel scope on the cores, where the iterations balance."""

from __future__ import annotations

from codegen.targets import Target

from .state import State, sites


def parallelize(state: State, target: Target) -> None:
    """Run the outermost scope that allows it on the target's cores, in every loop nest."""
    if target.language != "c" or target.cores < 2:
        return
    for label in [s.label for s in sites(state)]:
        site = state.analysis.by_label.get(label)
        if site is None or any(s.kind in ("p", "g", "b", "w") for s in site.chain):
            continue
        for depth, scope in enumerate(site.chain):
            if scope.kind:
                break
            if scope.size >= 2 and state.play(f"parallelize_scope(op={label}, depth={depth})"):
                break
