"""Optimisation passes: a program in, the list of moves that optimise it out.

The three strategies of the paper's section 4.1:

- `naive`: what a programmer does without looking at the hardware: fuse scopes and reuse
  storage until nothing is left (`join_scopes`, `reuse_dims`), then keep the folded temporaries
  on the stack (`set_location`), where each thread has its own copy.
- `greedy`: naive, then every hardware move wherever it is legal: parallelise the outermost
  scopes, and vectorise every innermost single-operation scope (tiled by the lane count, with
  a tail of the rest; whole, in pieces, when narrower than two vectors).
- `heuristic`: for CPUs with vector units, driven by the target's facts (its vector width in
  bytes over the dtype's size is the lane count, its vector registers the size of a register
  tile, its caches the blocks of a reduction; its cores say whether threads pay). It
  interchanges loop nests so that the innermost scope walks memory contiguously (matmul becomes
  i, k, j); blocks each reduction that has rows to reuse its vectors across, Goto's way: a tile
  of vector accumulators that fits the registers (which also hides the latency of the
  dependent updates as section 4.1's tiling does), tails where the tile does not divide,
  blocks of the reduction whose panel of the streamed operand fits the private cache, and that
  panel packed, the blocks of the reduction outside the column blocks when the slice of the
  other operand that they read fits the private cache too (`agent.blocking`); fuses and reuses
  (a temporary keeps the row that fused operations share, so that they can be split apart again
  and each vectorised), accumulates the other reductions in registers (`accumulate`),
  vectorises the innermost scopes, and parallelises the outermost parallel scope.

Each pass returns move strings, which `dojo_ir.derivation.advance` or a recorded derivation
replays. A pass only ever plays moves that are legal where it plays them and skips a step that
is not, so it never fails on a valid program.
"""

from __future__ import annotations

from collections.abc import Callable

from codegen.targets import Target
from dojo_ir import Program

from .. import methods
from .accumulation import accumulate
from .channel_lanes import channel_lanes
from .fusion import align_for_fusion, fuse_and_reuse_keeping_rows
from .loop_order import interchange
from .parallelization import parallelize
from .register_tile import fma_in_flight, reduction_block, register_block, tile_shape
from .row_padding import pad_rows
from .state import State, as_target, exhaust, fuse_and_reuse, lanes
from .vectorization import vectorize


def naive(program: Program, target: Target | str = "native") -> list[str]:
    """Fuse and reuse until nothing is left (the paper's naive strategy)."""
    state = State(program)
    fuse_and_reuse(state)
    return state.moves


def greedy(program: Program, target: Target | str = "native") -> list[str]:
    """Naive, then every hardware move wherever it is legal."""
    chosen = as_target(target)
    state = State(program)
    fuse_and_reuse(state)
    vectorize(state, chosen)
    exhaust(state, ("vectorize_scope",))
    parallelize(state, chosen)
    return state.moves


def heuristic(program: Program, target: Target | str = "native") -> list[str]:
    """The expert pass for CPUs with vector units (see the module's docstring)."""
    chosen = as_target(target)
    state = State(program)
    interchange(state, chosen)
    channel_lanes(state, chosen)
    register_block(state, chosen)  # before fusion: a blocked reduction has a loop nest of its own
    align_for_fusion(state, chosen)
    exhaust(state, ("join_scopes",))
    accumulate(state, chosen)  # before reuse_dims: an accumulator of a folded stack target adds nothing
    fuse_and_reuse_keeping_rows(state, chosen)
    vectorize(state, chosen)
    pad_rows(state)
    parallelize(state, chosen)
    return state.moves


PASSES: dict[str, Callable[[Program, Target | str], list[str]]] = dict(zip(
    methods.PASSES, (naive, greedy, heuristic), strict=True))

__all__ = ["PASSES", "fma_in_flight", "greedy", "heuristic", "lanes", "naive", "reduction_block", "tile_shape"]
