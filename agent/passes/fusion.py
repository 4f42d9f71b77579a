"""Fusion: outer scopes aligned and joined, temporaries reused, a row that fused operations share
kept so that fission can split them and each be vectorised."""

from __future__ import annotations

from codegen.targets import Target
from dojo_ir.moves import Move
from dojo_ir.tree import Op, Scope

from .state import BALANCED_ITERATIONS, MAX_STEPS, State, fuse_and_reuse, sites, to_stack, uses_at


def align_for_fusion(state: State, target: Target) -> None:
    """For each loop nest whose outermost scope differs in size from the one before it, bring a
    scope of that size out from inside it (legal interchanges only), so that the two can fuse:
    batchnorm's normalisation `n c h w` becomes `c n h w` and joins the per-channel statistics,
    reading each channel while it is still in cache. Else, when the nest before starts the
    array that the nest accumulates into, the other way round: a strided stem's `y = b`, over
    channels, rows and columns, goes row by row and joins the product's rows, each row of y
    started while the product is about to read it (a stem's y is larger than the cache, and a
    pass of its own reads it back from memory). Not when the fused scope, the one the threads
    would share, has too few iterations to keep the target's cores evenly busy (3 channels on 2
    cores)."""
    for index in range(1, len(state.program.body)):
        before, nest = state.program.body[index - 1], state.program.body[index]
        if not isinstance(before, Scope) or not isinstance(nest, Scope) or before.size == nest.size:
            continue
        balanced = BALANCED_ITERATIONS * target.cores
        if before.size >= balanced and _bring_out(state, index, before.size):
            continue
        if nest.size >= balanced and _starts(state, index - 1, index):
            _bring_out(state, index - 1, nest.size)


def _bring_out(state: State, index: int, size: int) -> bool:
    """Interchange a scope of `size` to the top of the body's nest at `index`, from the perfect part
    of its first operation's chain. Never the innermost scope: brought out, it turns every access
    along a row into a strided one and leaves nothing to vectorise (a convolution's bias written
    into its channels-innermost accumulator, `t[.., w*32 + c] = b[c]`, joined to the 32 channels
    of the padding before it: a scalar store a cache line apart each, 32 times over the buffer)."""
    site = state.analysis.first_site((index,))
    perfect = next((d for d, scope in enumerate(site.chain) if len(scope.body) != 1), len(site.chain) - 1)
    match = next((d for d in range(1, min(perfect + 1, len(site.chain) - 1))
                  if site.chain[d].size == size and not site.chain[d].kind), None)
    return match is not None and state.play_all([f"swap_scopes(op={site.label}, depth={d})"
                                                 for d in range(match - 1, -1, -1)])


def _starts(state: State, index: int, product: int) -> bool:
    """Whether the body's nest at `index` is one plain operation writing the array that the nest
    at `product` accumulates into: reads back (into its register tile) and writes again."""
    inside = [s for s in state.analysis.sites if s.path[0] == index]
    if len(inside) != 1 or inside[0].op.reduction:
        return False
    started = inside[0].op.target.array
    after = [s.op for s in state.analysis.sites if s.path[0] == product]
    return any(op.target.array == started for op in after) and any(
        access.array == started for op in after for access in op.reads)


def fuse_and_reuse_keeping_rows(state: State, target: Target) -> None:
    """`fuse_and_reuse`, but a temporary keeps its row along an innermost scope that fusion shares
    between several operations (a bias add and the GELU that reads it): folded to one element
    there, it ties them to one scalar loop, since splitting them apart again (`vectorize`'s
    fission) would need the row; kept, on the stack and in the first-level cache, each operation
    gets a vector loop of its own (bias + tanh-GELU at 512 x 768: 41x over the spec, where the
    folded scalar loop gained 1-2x)."""
    if target.language != "c":
        fuse_and_reuse(state)
        return
    for _ in range(MAX_STEPS):
        legal = state.find(lambda m: m.name == "join_scopes"
                           or (m.name == "reuse_dims" and not _along_a_shared_row(state, m)))
        if not legal or not state.play(legal[0]):
            break
    to_stack(state)


def _along_a_shared_row(state: State, move: Move) -> bool:
    """Whether `move` (a `reuse_dims`) folds a dimension that some access indexes with the variable
    of a sequential innermost scope holding several operations."""
    buffer, dim = move.arg("buffer"), move.arg("dim")
    for site in sites(state):
        row = site.chain[-1] if site.chain else None
        if row is None or row.kind or sum(isinstance(n, Op) for n in row.body) < 2:
            continue
        inner = len(site.chain) - 1
        for access in (site.op.target, *site.op.reads):
            if state.program.buffer_of[access.array].name == buffer and len(access.index) > dim \
                    and uses_at(access, dim, inner):
                return True
    return False
