"""Vectorisation: innermost scopes vectorised by the lane count, split where a vector would pass
the registers, fused operations split apart so that each is vectorised."""

from __future__ import annotations

from codegen.cvector import vector_pieces
from codegen.targets import Target
from dojo_ir.tree import Op

from . import register_tile
from .state import MAX_STEPS, State, alone, contiguous_scope, isolate, lanes, op_bytes, sites, swap_alone, tail_label


def vectorize(state: State, target: Target) -> None:
    """Vectorise every innermost sequential scope of operations (`vectorize_innermost`), each
    operation on its own: fusion may have joined several down to one row, and a vector holds one."""
    if target.language != "c":
        return
    done: set[str] = set()
    for _ in range(MAX_STEPS):
        for site in sites(state):
            if site.label in done or not site.chain:
                continue
            done.add(site.label)
            scope = site.chain[-1]
            if scope.kind or any(s.kind == "v" for s in site.chain) or any(not isinstance(n, Op) for n in scope.body):
                continue
            mark = state.mark()
            if alone(state, site.label, len(site.chain) - 1) \
                    and vectorize_innermost(state, site.label, target) is not None:
                break
            state.undo(mark)
        else:
            return


def vectorize_lanes(state: State, label: str, target: Target) -> bool | None:
    """Move the scope along the target's last dimension innermost around `label` and vectorise it
    (`vectorize_innermost`, a tail of lanes blocked on its own); whether it split, or None."""
    lane = contiguous_scope(state.analysis.by_label[label])
    if lane is None or not isolate(state, label):
        return None
    for depth in range(lane, len(state.analysis.by_label[label].chain) - 1):
        if not swap_alone(state, label, depth):
            return None
    return vectorize_innermost(state, label, target, block_tail=True)


def vectorize_innermost(state: State, label: str, target: Target, block_tail: bool = False) -> bool | None:
    """Vectorise the innermost scope around `label`: whole when it is less than two vectors wide
    and its pieces fit the registers (`_whole_fits_registers`), else split by the lane count, the
    tiles vectorised and, when the lanes do not divide it, the tail of fewer lanes vectorised
    whole (a conv row of 54 is 3 vectors of 16 and one of 6), or register-blocked on its own with
    `block_tail`. Returns whether it split, or None when it
    could not vectorise."""
    site = state.analysis.by_label[label]
    depth = len(site.chain) - 1
    size, width = site.chain[depth].size, lanes(target, op_bytes(state.program, site.op))
    if site.chain[depth].kind or size < 2:
        return None
    if size < 2 * width and _whole_fits_registers(size, op_bytes(state.program, site.op), target):
        return False if state.play(f"vectorize_scope(op={label}, depth={depth})") else None
    mark = state.mark()
    if not state.play(f"split_scope(op={label}, depth={depth}, factor={width})"):
        return None
    # with a tail, an operation that was alone to write its array is one of two: `y` is now `y#1`
    label = state.analysis.first_site(site.path[:depth + 1]).label
    if not state.play(f"vectorize_scope(op={label}, depth={depth + 1})"):
        state.undo(mark)
        return None
    if size % width:
        tail = tail_label(state, label, depth)
        if block_tail:
            register_tile.block_or_undo(state, tail, target)
        elif size % width > 1:
            state.play(f"vectorize_scope(op={tail}, depth={depth})")
    return True


def _whole_fits_registers(size: int, dtype_bytes: int, target: Target) -> bool:
    """Whether a `size`-lane vector is computed in pieces no wider than the target's registers. A
    scope that the code generator widens past them (14 lanes as one vector of 16 for AVX2's 8)
    is split by the lane count instead: GCC keeps such a vector's halves, an accumulator of a
    tile, in memory, and builds its partial reads lane by lane (the direct form of a 1x1 Conv at
    14x14 for x86-avx2 took 17 ms, and 0.12 ms as vectors of 8 and a widened tail of 6)."""
    return all(lanes * dtype_bytes <= target.vector_bytes for _, lanes in vector_pieces(size, dtype_bytes))


def split_and_block_tail(state: State, label: str, depth: int, factor: int, target: Target) -> bool:
    """Split the scope at `depth` around `label` by `factor`; a tail that leaves is register-blocked
    on its own right away, before anything renames it (`register_block`)."""
    size = state.analysis.by_label[label].chain[depth].size
    if not state.play(f"split_scope(op={label}, depth={depth}, factor={factor})"):
        return False
    if size % factor:
        register_tile.block_or_undo(state, tail_label(state, label, depth), target)
    return True
