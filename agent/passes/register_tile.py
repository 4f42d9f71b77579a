"""Register tiles: each reduction with rows to reuse its vectors across blocked Goto's way (the
tile, its tails, the blocks of the reduction and the packed panels; agent.blocking orders them)."""

from __future__ import annotations

from math import prod

from codegen.targets import Target
from dojo_ir.affine import NotAffine, affine
from dojo_ir.analysis import Site
from dojo_ir.tree import DTYPE_BYTES, Access, Op, Scope
from runner.roofline import measured_machine

from ..blocking import reduction_outside_columns
from . import vectorization
from .state import (
    BALANCED_ITERATIONS,
    STACK_BYTES,
    STREAMED_LOAD_COST,
    TAIL_COST,
    State,
    balanced,
    divisors,
    isolate,
    last_coef,
    op_bytes,
    reorder,
    sites,
    uses,
    uses_at,
    vector_registers,
)
from .tile_neighbours import fuse_epilogue, fuse_init

LINE_BYTES = 64  # a cache line on every CPU target


def tile_shape(rows: int, vectors: int, registers: int, per_vector: int = 1, cores: int = 1,
               in_flight: int = 1) -> tuple[int, int]:
    """The register tile of a blocked reduction: R of `rows` by W of `vectors` accumulators, whose
    live values fit in `registers` (`live_registers`: one more and the compiler spills an
    accumulator in the inner loop), that loads least per multiply-add: each step loads W vectors
    of the streamed operand and R broadcasts for R * W updates, and a vector, from the packed
    panel in the private cache, costs STREAMED_LOAD_COST broadcasts, which come from rows in the
    first-level cache (so (STREAMED_LOAD_COST / R + 1 / W): a tile 4 rows deep waits on the
    panel, one 6 rows deep does not). Each side that does not divide its extent counts TAIL_COST
    more (its tail is a loop nest of its own, with a smaller tile); more accumulators first,
    then more rows, on a tie. With `cores` above 1 the column blocks (`vectors / W`) are what
    the cores share, so a tile that shares them out evenly comes first. A core issues a
    multiply-add only when one of `in_flight` (its FMA latency times its FMA ports,
    `fma_in_flight`) has finished, so a tile of fewer accumulators waits on them: its cost grows
    by `in_flight` over its accumulators."""
    shapes = [(r, w) for r in range(1, min(rows, registers) + 1) for w in range(1, min(vectors, registers) + 1)
              if live_registers(r, w, per_vector) <= registers]

    def cost(rw: tuple[int, int]) -> tuple:
        r, w = rw
        tails = (rows % r > 0) + (vectors % w > 0)
        latency = max(1.0, in_flight / (r * w * per_vector))
        return (cores > 1 and not balanced(vectors // w, cores),  # the tail's block is a loop nest of its own
                (STREAMED_LOAD_COST / r + 1 / w) * (1 + TAIL_COST * tails) * latency, -r * w, -r)

    return min(shapes, key=cost)


def fma_in_flight(target: Target) -> int:
    """The independent multiply-adds a core must have under way to issue one as often as its FMA
    ports allow (latency x ports), which no vendor table gives: this machine's, as `dojo machine`
    measured it (`runner.roofline`), for a C target that runs here without an emulator; 1, no
    constraint, for any other target or before the machine has been measured (a pass never starts
    a measurement: it takes seconds and both cores)."""
    if target.language != "c" or target.launcher or not target.runnable():
        return 1
    machine = measured_machine()
    return 1 if machine is None else machine.fma_in_flight


def register_block(state: State, target: Target) -> None:
    """Register blocking for each vectorised reduction with a row to reuse its vectors across
    (matmul's i for c[i, j] += a[i, k] * b[k, j], whose b vectors do not depend on i): the
    scopes become

        [other target scopes] [J/W] [K/KB] [I/R] KB [other reductions] R:u W:u L:v

    ([K/KB] before the target scopes that reuse the streamed operand, `streamed_block`)

    an R x W tile of vector accumulators (`tile_shape`, sized to the target's vector registers)
    updated by every step of the reduction, kept in registers by `accumulate` (or its partial
    form, when blocks of K outside the rows write the target first), a reduction cut into
    blocks (`reduction_block`) so that a block's panel of the streamed operand stays in cache
    while every row block uses it, and that panel packed (`_pack`); [K/KB] outside [J/W], and
    the slice of the rows' operand that a block of K reads packed, when the private cache holds
    that slice (`agent.blocking`). Section 4.1's latency-hiding tiling is the case R = W = 4:
    R x W independent accumulators keep the multiply-add pipeline full. A side of the tile, or
    of the vectors, that does not divide its scope leaves a tail (`split_scope`), blocked in
    turn with a tile that fits it. Without blocks of K outside the rows, the operations that
    start and finish the target join the nest around the tile (`tile_neighbours`). All or
    nothing per operation. The last operation first: a tail comes after its operation and
    renames the ones after it, which are then done."""
    if target.language != "c":
        return
    for label in reversed([s.label for s in sites(state)]):
        block_or_undo(state, label, target)


def block_or_undo(state: State, label: str, target: Target) -> None:
    mark = state.mark()
    if not _block(state, label, target):
        state.undo(mark)


def _lanes_split(state: State, site: Site, target: Target) -> bool | None:
    """Whether the reduction's vectorised row left a tail (None: it cannot be vectorised), vectorising
    it first when it is not."""
    if site.chain[-1].kind == "v":
        return _vectorized_tail(site)
    return vectorization.vectorize_lanes(state, site.label, target)


def _block(state: State, label: str, target: Target) -> bool:
    site = state.analysis.by_label.get(label)
    if site is None or len(site.chain) < 2 or site.op.reduction is None:
        return False
    split = _lanes_split(state, site, target)
    if split is None or not isolate(state, label):
        return False
    site = state.analysis.by_label[label]
    chain, op = site.chain, site.op
    n = len(chain)
    roles = [f"s{d}" for d in range(n)]
    roles[n - 1] = "L"
    if split:
        roles[n - 2] = "J"
    lanes_read = [r for r in op.reads if uses(r, n - 1)]
    broadcast = [r for r in op.reads if not uses(r, n - 1)]
    rows = [d for d in range(n - 1) if roles[d] != "J" and not chain[d].kind and uses(op.target, d)
            and not any(uses(r, d) for r in lanes_read) and any(uses(r, d) for r in broadcast)]
    reductions = [d for d in range(n) if not uses(op.target, d)]
    per_vector = vector_registers(chain[-1].size, op_bytes(state.program, op), target)
    if not rows or not reductions or any(chain[d].kind for d in reductions) \
            or live_registers(1, 1, per_vector) > target.vector_registers:  # not even one vector fits
        return True  # vectorised, and no tile of accumulators to keep in registers
    row, longest = rows[-1], _leading_part(op, chain, reductions, max(reductions, key=lambda d: chain[d].size))
    outer = [chain[d].size for d in range(n - 1) if roles[d].startswith("s") and d != row and d not in reductions]
    # the cores share the tile's column blocks only where the parallel pass reaches them: no scope
    # outside balances and those scopes run few times (parallelization._balanced_first); 7 blocks
    # of channels by 7 rows run the outermost, and a tile cut to share the columns only starves
    sharing = target.cores if not any(balanced(size, target.cores) for size in outer if size > 1) \
        and prod(outer) <= BALANCED_ITERATIONS * target.cores else 1
    r, w = tile_shape(chain[row].size, chain[n - 2].size if split else 1, target.vector_registers, per_vector,
                      sharing, fma_in_flight(target))
    panel_row = w * chain[-1].size * op_bytes(state.program, op)  # one step's vectors of the streamed operand
    block = reduction_block(chain[longest].size, panel_row, target)
    # scopes outside the tile that reuse the streamed operand (a convolution's output rows reuse
    # its weights): the blocks of the reduction go outside them when the part of the target they
    # accumulate, written back and read again at every block, stays in the first-level cache, the
    # broadcast operand's steps are contiguous, a reduction of a vector's length or more along its
    # last dimension (channels innermost: an NCHW input's rows are copied whole instead,
    # `_stage_rows`), and the rows cannot keep the streamed operand in cache themselves. They can
    # when it and the broadcast operand fit in half of a core's private cache and the rows share out
    # over the cores: the first row then reads the operand from memory and the others from there,
    # while the blocks of K outside would leave the parallel pass only the scopes outside them (3
    # blocks of channels on 2 cores, a core idle a third of the time). On an Intel Xeon with 2 MB a
    # core, Inception v2's convolutions at 14x14 (0.6-0.9 MB read) ran 4-29% faster with the whole
    # reduction inside their rows; at 7x7, whose 7 rows do not share out, 5-12% slower, and so was
    # ResNet-50's 1x1 from 1024 channels at 14x14 (1.8 MB read) by 0-5%.
    reusing = [d for d in range(n - 1) if roles[d].startswith("s") and d != row and d not in reductions
               and chain[d].size > 1 and uses(op.target, d) and not any(uses(r, d) for r in lanes_read)]
    vectors = chain[n - 2].size if split else 1
    accumulated = prod(chain[d].size for d in [*reusing, row]) * vectors * panel_row // w
    contiguous = all(any(uses_at(r, len(r.index) - 1, d) and chain[d].size >= chain[-1].size for d in reductions)
                     for r in broadcast)
    buffers = state.program.buffer_of
    read_bytes = sum(buffers[array].storage_bytes for array in dict.fromkeys(r.array for r in op.reads))
    rows_keep = read_bytes <= target.caches.private // 2 \
        and any(balanced(chain[d].size, target.cores) for d in reusing)
    if reusing and contiguous and not rows_keep and block == chain[longest].size \
            and accumulated <= target.caches.l1d:
        inner_steps = prod(chain[d].size for d in reductions if d != longest)
        block = streamed_block(chain[longest].size, panel_row * inner_steps, target)
    roles[row], roles[longest] = "I", "K"
    for d in reductions:
        if d != longest:
            roles[d] = f"r{d}"
    inner = ["Kt"] + [roles[d] for d in reductions if d != longest]
    for role, size in (("J", w), ("I", r), ("K", block)):
        if role not in roles:
            continue
        depth = roles.index(role)
        if size == state.analysis.by_label[label].chain[depth].size:
            roles[depth] = role + "t"
            continue
        if size == 1:  # a tile one row deep (a wide vector fills the registers): the scope stays whole
            roles[depth] = role + "o"
            continue
        if not vectorization.split_and_block_tail(state, label, depth, size, target):
            return False
        roles[depth: depth + 1] = [role + "o", role + "t"]
    blocks = ("Jo", "Ko", "Io")
    if "Jo" in roles and "Ko" in roles \
            and reduction_outside_columns(chain[row].size * block * op_bytes(state.program, op), target):
        blocks = ("Ko", "Jo", "Io")
    tile = [x for x in ("It", "Jt", "L") if x in roles]
    reused = [f"s{d}" for d in reusing] if "Ko" in roles else []
    outermost = [x for x in roles if x.startswith("s") and x not in inner and x not in reused]
    if reused:
        outermost += ["Ko", *reused]
    wanted = outermost + [x for x in blocks if x in roles and x not in outermost] + inner + tile
    if not reorder(state, label, roles, wanted):
        return False
    for role in tile[:-1]:
        depth = roles.index(role)
        if state.analysis.by_label[label].chain[depth].size > 1 \
                and not state.play(f"unroll_scope(op={label}, depth={depth})"):
            return False
    reduce_at = roles.index("Kt")
    target_before, root = state.analysis.by_label[label].op.target, state.analysis.by_label[label].path[0]
    chain = state.analysis.by_label[label].chain
    if not (state.play(f"accumulate(op={label}, depth={reduce_at})")
            or state.play(f"accumulate_partial(op={label}, depth={reduce_at})")):
        return False
    if "Ko" not in roles:  # blocks of K outside the rows: the target is done only after the last
        for fuse in (fuse_epilogue, fuse_init):  # the epilogue first: the reduction's nest stays at `root`
            mark = state.mark()
            if not fuse(state, root, target_before, roles, chain, target):
                state.undo(mark)
    # a slice on the heap is shared: only when no thread runs outside the blocks of K
    slices = broadcast if blocks[0] == "Ko" and not any(size > 1 for size in outer) else []
    _pack_operands(state, roles, chain, lanes_read, slices, target)
    if not slices:
        for array in dict.fromkeys(r.array for r in broadcast):
            _stage_rows(state, array, roles, target)
    return True


def streamed_block(steps: int, step_bytes: int, target: Target) -> int:
    """Reduction steps per block when scopes outside the tile reuse the streamed operand (a
    convolution's rows, its weights): the most that divide `steps`, fewer than all, and keep a
    block's part of the operand (`step_bytes` a step) within half of the first-level cache (else the
    smallest block of more than one step). Each block's part is then read from memory once and used
    by every row from the cache, where the whole operand read with the first row waited on memory
    block after block of channels: a model's weights are not in cache when its kernel starts
    (ResNet-50's 3x3 at 7x7, 9.4 MB of them: 1.77-2.09 ms a call from memory, 1.43-1.49 ms with
    its blocks of input channels outside the rows; its convolutions at 7x7 and 14x14 gain
    0.12-0.45 ms each in the model, while at 28x28 and 56x56, whose accumulated rows (100 and 400
    KB) leave the first-level cache, they lost 0.03-0.64 ms)."""
    proper = [b for b in divisors(steps, steps - 1) if b > 1]  # a block of one step leaves no tile's scope
    return max((b for b in proper if b * step_bytes <= target.caches.l1d // 2), default=min(proper, default=steps))


def _pack_operands(state: State, roles: list[str], chain: tuple[Scope, ...], panels: list[Access],
                   slices: list[Access], target: Target) -> None:
    """Pack the panels of the streamed operand (`panels`) that the row blocks reuse, and the slices
    of the broadcast operand (`slices`) that the column blocks inside the blocks of K reuse."""
    rows_at = roles.index("Io") if "Io" in roles else 0
    if rows_at > 0 and chain[rows_at].size > 1:  # a panel reused by row blocks, and only part of the operand
        for array in dict.fromkeys(r.array for r in panels):
            _pack(state, array, rows_at, chain[rows_at].size, target)
    columns_at = roles.index("Jo") if "Jo" in roles else 0
    for array in dict.fromkeys(r.array for r in slices):
        _pack(state, array, columns_at, chain[columns_at].size, target, shared=True)


def live_registers(rows: int, vectors: int, per_vector: int) -> int:
    """The registers an R x W tile's step keeps live, each vector taking `per_vector`: the R * W
    accumulators, the broadcast, and the W vectors of the streamed operand, which every row
    reuses (with one row, each is used once, so only the piece being multiplied is live)."""
    streamed = vectors * per_vector if rows > 1 else 1
    return rows * vectors * per_vector + streamed + 1


def reduction_block(steps: int, panel_row_bytes: int, target: Target) -> int:
    """Reduction steps per block of a register-blocked reduction: the most that divide `steps` and
    keep the block's panel of the streamed operand (`panel_row_bytes` per step) small enough to
    pack onto a thread's stack (`_pack`) and within half of a core's private cache, so that every
    row block reads it from there (the other half is for the rows' operand and the output). As
    few blocks as that allows: each block adds a pass over the output's tile."""
    fits = min(STACK_BYTES, target.caches.private // 2) // max(1, panel_row_bytes)
    return max(divisors(steps, max(1, fits)))


def _pack(state: State, array: str, depth: int, rows: int, target: Target, shared: bool = False) -> None:
    """Pack the panel of `array` that a blocked reduction's scope of `rows` row blocks, at `depth`,
    reads (`stage_reads`) into a contiguous temporary on each thread's stack, copied with
    vectors: the rows of a matrix's panel lie a whole matrix row apart, a power of two for the
    library's shapes, so they fall into the same few cache sets and evict each other; packed,
    they are one stream. Left as it was when the panel is whole rows of the operand (nothing to
    gain) or does not fit the stack (then it stays in the private cache unpacked). A `shared` slice,
    copied before a scope of blocks that the threads share and read by all of them, stays on the
    heap, whatever its size."""
    site = next((s for s in sites(state) if s.op.reduction is not None and len(s.chain) > depth
                 and s.chain[depth].size == rows and any(r.array == array for r in s.op.reads)), None)
    if site is None:
        return
    mark = state.mark()
    names = {b.name for b in state.program.buffers}
    if state.play(f"stage_reads(op={site.label}, depth={depth}, buffer={array})"):
        packed = next(b for b in state.program.buffers if b.name not in names)
        copy = next(s.label for s in sites(state) if s.op.target.array == packed.name)
        narrower = packed.dims[-1].size < state.program.buffer_of[array].dims[-1].size  # else the same rows
        if narrower and (shared or state.play(f"set_location(buffer={packed.name}, location=stack)")) \
                and vectorization.vectorize_innermost(state, copy, target) is not None:
            return
    state.undo(mark)


def _stage_rows(state: State, array: str, roles: list[str], target: Target) -> None:
    """Copy the part of the broadcast operand `array` that one iteration of the product's outer
    scopes reads (a convolution's input row: every channel at every position) into a contiguous
    temporary on the thread's stack, just inside the innermost outer scope the reads move with,
    when that part lies in pieces in `array` and fits half of a core's private cache. In the
    product, a step of the tile broadcasts one element of each of its positions at one channel,
    and the next step the next channel: in an NCHW input a whole channel plane apart, a different
    page each step, which the prefetcher does not follow, so that every step waited on memory
    whenever the input was not in cache already (as in a model, where the kernel before wrote
    something else). The copy reads each piece whole, many at once, and the product then reads
    the first-level cache; the blocks of output channels inside share the copy. Not when the
    next step reads the same cache line (an input in blocks of channels, innermost): each piece is
    then a run of a block's positions that the prefetcher follows, and copying a row of 256
    channels at 56x56, 57 KB, cost ResNet-50's pointwise convolution from 256 to 64 channels 6%
    on an Intel Xeon. Not when no scope inside reuses it: with the blocks outside the rows,
    copying each block's row again cost ResNet-50 2% where it gave nothing."""
    site = next((s for s in sites(state) if s.op.reduction is not None and len(s.chain) == len(roles)
                 and any(r.array == array for r in s.op.reads)), None)
    if site is None:
        return
    read = next(r for r in site.op.reads if r.array == array)
    step = max((d for d, role in enumerate(roles) if role == "Kt" or role.startswith("r")), default=None)
    buffer = state.program.buffer_of[array]
    if step is not None and _step_bytes(read, step, buffer.shape, DTYPE_BYTES[buffer.dtype]) < LINE_BYTES:
        return  # the next step reads the same line (channels innermost): the prefetcher follows each piece
    moving = [d for d, role in enumerate(roles) if role.startswith("s") and uses(read, d)]
    if not moving or "Kt" not in roles[moving[-1] + 1:]:
        return
    depth = moving[-1] + 1
    if all(uses(read, d) for d in range(depth, roles.index("Kt"))):
        return  # each block of the tiles reads its own part: a copy would be read once
    mark = state.mark()
    names = {b.name for b in state.program.buffers}
    if state.play(f"stage_reads(op={site.label}, depth={depth}, buffer={array})"):
        staged = next(b for b in state.program.buffers if b.name not in names)
        copy = next(s for s in sites(state) if s.op.target.array == staged.name)
        if _in_pieces(copy.op.reads[0], depth, state.program.buffer_of[array].shape) \
                and staged.storage_bytes <= target.caches.private // 2 \
                and state.play(f"set_location(buffer={staged.name}, location=stack)") \
                and vectorization.vectorize_innermost(state, copy.label, target) is not None:
            return
    state.undo(mark)


def _step_bytes(access: Access, depth: int, shape: tuple[int, ...], size: int) -> int:
    """How far apart in memory, in bytes, `access` reads at consecutive iterations of the scope at
    `depth` (row-major `shape`, elements of `size` bytes; a whole line when an index is not affine)."""
    try:
        coefficients = [affine(index).coef(depth) for index in access.index]
    except NotAffine:
        return LINE_BYTES
    return abs(sum(c * prod(shape[p + 1:]) for p, c in enumerate(coefficients))) * size


def _in_pieces(source: Access, depth: int, shape: tuple[int, ...]) -> bool:
    """Whether the box that a copy's `source` read takes from an array of `shape`, over the copy's
    scopes from `depth` down, is more than one contiguous run of it: some dimension after the
    first it spans is not taken whole."""
    spanned = [any(d >= depth for d, _ in affine(i).terms) for i in source.index]
    first = spanned.index(True) if True in spanned else len(shape)
    return any(not taken and size > 1 for taken, size in zip(spanned[first + 1:], shape[first + 1:], strict=True))


def _leading_part(op: Op, chain: tuple[Scope, ...], reductions: list[int], longest: int) -> int:
    """The reduction scope to block and lead with: `longest`, unless it is the inner part of a
    dimension split in two (an index `{e}*n+{longest}`, n its size, as channels in blocks read
    a convolution's weights), where its outer part leads: else the streamed operand would be read
    a block apart at every step."""
    for access in op.reads:
        for index in access.index:
            try:
                form = affine(index)
            except NotAffine:
                continue
            step = form.coef(longest) * chain[longest].size
            outer = [e for e in reductions if e != longest and step and form.coef(e) == step]
            if outer:
                return outer[0]
    return longest


def _vectorized_tail(site: Site) -> bool | None:
    """For a tail that a split of a blocked reduction left (its lanes already vectorised): whether
    the scope around its lanes counts vectors of them, as a split by the lane count makes it; None
    when the vectorised scope is not along the target's last dimension."""
    lanes_at = len(site.chain) - 1
    if last_coef(site.op.target, lanes_at) != 1:
        return None
    return lanes_at > 0 and not site.chain[lanes_at - 1].kind \
        and last_coef(site.op.target, lanes_at - 1) == site.chain[lanes_at].size
