"""Output channels as the lanes of a convolution whose rows leave a tail (`agent.passes.heuristic`).

A reduction's vectors run along its target's last dimension (`register_tile`), which for an NCHW
convolution is the output row: 54 positions fill 3 vectors of 16 and leave 6 lanes of a fourth,
so a sixth of the multiply-adds do nothing (conv2 at 8x64x64x56x56x3: 62% of the FMA peak, PyTorch
73%). When another dimension of the target divides into whole vectors and only one operand reads
it (the output channels, which only the weights read), that operand is copied once with the
dimension innermost (`stage_reads`, then `swap_dims`: the weights as [ci, kh, kw, co]) and the
vectors run along it instead, as ONNX Runtime's and oneDNN's blocked convolutions do:

    [outer] [channels/(W*L)] [rows/R] [reductions] R:u W:u L:v

a tile of R output positions by W channel vectors (`tile_shape`), updated by every step of the reduction
(one broadcast of the input per position, one load of the weights per vector) and kept in
registers by `accumulate`; the tile's rows are the positions of the target's last dimension, whose
tail is what the channel vectors avoid. Its load and store are scalar (the channels lie a plane
apart in the target), once a tile, so the rule waits for many idle lanes (`WASTED_LANES`)."""

from __future__ import annotations

from math import ceil

from codegen.targets import Target

from .register_tile import fma_in_flight, tile_shape
from .state import State, isolate, lanes, op_bytes, reorder, sites, uses, uses_at

# The share of idle lanes along the rows above which the channels take the vectors. The tile's
# scalar load and store and its narrower tile on a target of fewer registers cost more than a
# small tail: conv2's rows of 54 leave 16% of AVX-512's lanes idle, and the channels' vectors
# took 5.1-5.4 ms against 5.7-6.0; on AVX2 they leave 4%, and the channels took 10.3-10.5 ms
# against 8.9-9.0 (the same process, alternating, on the Xeon).
WASTED_LANES = 0.125


def channel_lanes(state: State, target: Target) -> None:
    """Each reduction whose target's last dimension leaves a tail and has a dimension of whole
    vectors that one operand alone reads, tiled with its vectors along that dimension; the last
    operation first, as `register_block` goes (its all-or-nothing blocking then leaves these tiles
    as they are)."""
    for label in reversed([s.label for s in sites(state)]):
        _tile(state, label, target)


def _tile(state: State, label: str, target: Target) -> bool:
    plan = _plan(state, label, target)
    if plan is None:
        return False
    mark = state.mark()
    if _play(state, label, target, *plan):
        return True
    state.undo(mark)
    return False


def _plan(state: State, label: str, target: Target) -> tuple[int, int, str] | None:
    """The scope of the rows (the target's last dimension), of the channels, and the operand that
    alone reads the channels, when the rule applies."""
    site = state.analysis.by_label.get(label)
    if target.language != "c" or site is None or site.op.reduction is None or len(site.op.reads) != 2 \
            or not site.op.target.index or any(scope.kind for scope in site.chain):
        return None
    op, chain = site.op, site.chain
    width = lanes(target, op_bytes(state.program, op))
    last = len(op.target.index) - 1
    rows = [d for d in range(len(chain)) if uses_at(op.target, last, d)]
    reductions = [d for d in range(len(chain)) if not uses(op.target, d)]
    if len(rows) != 1 or not reductions or _wasted_lanes(chain[rows[0]].size, width) <= WASTED_LANES:
        return None
    row = rows[0]
    for d, scope in enumerate(chain):
        readers = [r for r in op.reads if uses(r, d)]
        if d == row or not uses(op.target, d) or scope.size % width or len(readers) != 1:
            continue
        channels_read = readers[0]
        other = next(r for r in op.reads if r is not channels_read)
        if not uses(other, row) or any(uses(channels_read, e) for e in range(len(chain))
                                       if uses(op.target, e) and e != d):
            continue  # the other operand must be what the rows broadcast; the channels' reads must not move with them
        if state.program.buffer_of[channels_read.array].location != "heap":
            continue
        return row, d, channels_read.array
    return None


def _play(state: State, label: str, target: Target, row: int, channels: int, operand: str) -> bool:
    if not isolate(state, label):
        return False
    site = state.analysis.by_label[label]
    chain, op = site.chain, site.op
    width = lanes(target, op_bytes(state.program, op))
    vectors = chain[channels].size // width
    rows, per_tile = tile_shape(chain[row].size, vectors, target.vector_registers, 1, 1, fma_in_flight(target))
    if chain[row].size % rows or vectors % per_tile:
        return False  # a tail is a loop nest of its own, with a tile of its own: not worth it for a rare case
    roles = ["r" if not uses(op.target, d) else "s" for d in range(len(chain))]
    roles[row], roles[channels] = "I", "C"
    for role, size in (("I", rows), ("C", per_tile * width)):
        depth = roles.index(role)
        if size < state.analysis.by_label[label].chain[depth].size:
            if not state.play(f"split_scope(op={label}, depth={depth}, factor={size})"):
                return False
            roles[depth: depth + 1] = [role + "o", role]
    wanted = [r for r in roles if r == "s"] + [r for r in ("Co", "Io") if r in roles] \
        + [r for r in roles if r == "r"] + ["I", "C"]
    if not reorder(state, label, roles, wanted):
        return False
    depth_c = len(wanted) - 1
    if not state.play(f"split_scope(op={label}, depth={depth_c}, factor={width})"):
        return False
    if not _stage_with_channels_last(state, label, operand, depth_c):
        return False
    for depth in (depth_c - 1, depth_c):
        if state.analysis.by_label[label].chain[depth].size > 1 \
                and not state.play(f"unroll_scope(op={label}, depth={depth})"):
            return False
    first_reduction = wanted.index("r")
    names = {b.name for b in state.program.buffers}
    if not state.play(f"accumulate(op={label}, depth={first_reduction})"):
        return False
    tile = next(b.name for b in state.program.buffers if b.name not in names)
    update = next(s for s in sites(state) if s.op.target.array == tile and s.op.reduction is not None)
    return state.play(f"vectorize_scope(op={update.label}, depth={len(update.chain) - 1})")


def _wasted_lanes(size: int, width: int) -> float:
    """The share of lanes that vectors of `width` along `size` elements leave idle (in the tail)."""
    return 1 - size / (ceil(size / width) * width)


def _stage_with_channels_last(state: State, label: str, operand: str, channels: int) -> bool:
    """Copy `operand` once, before the kernel's loop nests, with the dimension that the scope of
    the channels' vectors (at `channels`, the innermost) indexes last."""
    names = {b.name for b in state.program.buffers}
    if not state.play(f"stage_reads(op={label}, depth=0, buffer={operand})"):
        return False
    staged = next(b for b in state.program.buffers if b.name not in names)
    read = next(r for r in state.analysis.by_label[label].op.reads if r.array == staged.name)
    position = next(p for p in range(len(read.index)) if uses_at(read, p, channels))
    return all(state.play(f"swap_dims(buffer={staged.name}, dim={dim})")
               for dim in range(position, len(read.index) - 1))
