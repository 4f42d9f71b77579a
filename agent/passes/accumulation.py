"""Accumulation: reductions accumulated in registers (`accumulate`)."""

from __future__ import annotations

from math import prod

from codegen.targets import Target
from dojo_ir.analysis import Site

from .state import MAX_STEPS, State, op_bytes, sites, uses

ROW_REGISTERS = 4  # vector registers, at most, for a row of accumulators that the target's innermost scope indexes


def accumulate(state: State, target: Target) -> None:
    """Keep each reduction's partial result in registers over the scopes its target does not use:
    one element, or, when the target's innermost scope is inside those (a pool's row of outputs
    inside its taps), a row of at most ROW_REGISTERS vectors, loaded once and stored once instead
    of at every step (read back from a store that has not left the core: on an AVX-512 Xeon, a
    3x3 MaxPool at 528x13x13 took 265 us so, against ONNX Runtime's 29 us)."""
    done: set[str] = set()
    for _ in range(MAX_STEPS):
        for site in sites(state):
            if site.op.reduction is None or site.label in done:
                continue
            done.add(site.label)
            if any(state.play(f"accumulate(op={site.label}, depth={depth})") for depth in _depths(state, site, target)):
                break  # the labels changed; look again
        else:
            return


def _depths(state: State, site: Site, target: Target) -> list[int]:
    """Where to accumulate the reduction at `site`: inside every scope its target uses, else at
    each scope it reduces along whose inner scopes the target uses make a row that fits
    ROW_REGISTERS vectors, outermost first."""
    chain, written = site.chain, site.op.target
    used = [d for d in range(len(chain)) if uses(written, d)]
    depth = (max(used) + 1) if used else 0
    if depth < len(chain):
        return [depth]
    limit = ROW_REGISTERS * target.vector_bytes // op_bytes(state.program, site.op)
    return [d for d in range(len(chain)) if not uses(written, d)
            and prod(chain[e].size for e in range(d + 1, len(chain)) if uses(written, e)) <= limit]
