"""Padded rows: a temporary's rows padded to whole vectors where the code generator widens them."""

from __future__ import annotations

from codegen.cvector import largest_value, widened_tail
from dojo_ir.affine import affine

from .state import State, last_coef, op_bytes, sites


def pad_rows(state: State) -> None:
    """Pad the rows of the temporaries that a widened vector (`codegen.cvector.widened_tail`: a
    conv row's tail of 6 computed as one vector of 8) reads or writes, to a whole number of such
    vectors that holds all its lanes, so that the code generator loads and stores them whole; a
    register tile of them then stays in registers, where loads and stores of only the used lanes
    would go through memory at every step."""
    for site in sites(state):
        if not site.chain or site.chain[-1].kind != "v":
            continue
        lane = len(site.chain) - 1
        tail = widened_tail(site.chain[-1].size, op_bytes(state.program, site.op))
        for access in (site.op.target, *site.op.reads) if tail else ():
            buffer = state.program.buffer_of[access.array]
            rank = len(buffer.dims)
            if not rank or last_coef(access, lane) != 1:
                continue
            needed = largest_value(affine(access.index[-1]), site.chain, skip=lane) + sum(tail)
            if needed > buffer.dims[-1].size:
                state.play(f"pad_dim(buffer={buffer.name}, dim={rank - 1}, size={-(-needed // tail[1]) * tail[1]})")
