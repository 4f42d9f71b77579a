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
from dataclasses import replace
from math import prod

from codegen.cvector import lane_use, largest_value, vector_pieces, widened_lanes
from codegen.targets import Target, get_target
from dojo_ir import Program
from dojo_ir.affine import NotAffine, affine
from dojo_ir.analysis import Analysis, Site
from dojo_ir.moves import Move, apply, find, why_not
from dojo_ir.moves.set_location import CAPACITY
from dojo_ir.paths import without_comments
from dojo_ir.tree import DTYPE_BYTES, Access, Op, Scope
from runner.roofline import measured_machine

from . import methods
from .blocking import reduction_outside_columns

STACK_BYTES = CAPACITY["stack"]
STREAMED_LOAD_COST = 2  # a vector from the private cache against a broadcast from the first level
TAIL_COST = 0.5  # a register tile's side that leaves a tail: its loop overhead and its tail's smaller tile
BALANCED_ITERATIONS = 4  # iterations per core from which an uneven last share costs little
_MAX_STEPS = 500  # a bound on any loop of moves; no library kernel comes near it


class _State:
    """A program and the moves played on it."""

    def __init__(self, program: Program):
        self.program = without_comments(program)
        self.moves: list[str] = []
        self._analysis: Analysis | None = None

    @property
    def analysis(self) -> Analysis:
        if self._analysis is None:
            self._analysis = Analysis(self.program)
        return self._analysis

    def legal(self, move: str) -> bool:
        """Whether `move` applies here; a malformed move, or one naming something that is not
        there, does not."""
        return why_not(self.program, move, self.analysis) is None

    def play(self, move: str | Move) -> bool:
        """Apply `move` if it is legal here; say whether it was."""
        text = str(move)
        if not self.legal(text):
            return False
        self.program = apply(self.program, text, self.analysis)
        self.moves.append(text)
        self._analysis = None
        return True

    def play_all(self, moves: list[str]) -> bool:
        """Apply every move of `moves` or none of them."""
        mark = self.mark()
        for move in moves:
            if not self.play(move):
                self.undo(mark)
                return False
        return True

    def mark(self) -> tuple[Program, int, Analysis | None]:
        """Where the game stands, for `undo`."""
        return self.program, len(self.moves), self._analysis

    def undo(self, mark: tuple[Program, int, Analysis | None]) -> None:
        """Take back every move played since `mark`."""
        self.program, played, self._analysis = mark
        del self.moves[played:]

    def find(self, where: Callable[[Move], bool]) -> list[Move]:
        return find(self.program, self.analysis, where)


def _target(target: Target | str) -> Target:
    return get_target(target) if isinstance(target, str) else target


def _exhaust(state: _State, kinds: tuple[str, ...]) -> None:
    for _ in range(_MAX_STEPS):
        legal = state.find(lambda m: m.name in kinds)
        if not legal or not state.play(legal[0]):
            return


def _fuse_and_reuse(state: _State) -> None:
    """join_scopes and reuse_dims while any applies, then the folded temporaries to the stack."""
    _exhaust(state, ("join_scopes", "reuse_dims"))
    _to_stack(state)


def _to_stack(state: _State) -> None:
    for buffer in state.program.buffers:
        if buffer.location == "heap" and any(d.stored is not None for d in buffer.dims):
            state.play(f"set_location(buffer={buffer.name}, location=stack)")


def naive(program: Program, target: Target | str = "native") -> list[str]:
    """Fuse and reuse until nothing is left (the paper's naive strategy)."""
    state = _State(program)
    _fuse_and_reuse(state)
    return state.moves


def greedy(program: Program, target: Target | str = "native") -> list[str]:
    """Naive, then every hardware move wherever it is legal."""
    chosen = _target(target)
    state = _State(program)
    _fuse_and_reuse(state)
    _vectorize(state, chosen)
    _exhaust(state, ("vectorize_scope",))
    _parallelize(state, chosen)
    return state.moves


def heuristic(program: Program, target: Target | str = "native") -> list[str]:
    """The expert pass for CPUs with vector units (see the module's docstring)."""
    chosen = _target(target)
    state = _State(program)
    _interchange(state, chosen)
    _register_block(state, chosen)  # before fusion: a blocked reduction has a loop nest of its own
    _align_for_fusion(state, chosen)
    _exhaust(state, ("join_scopes",))
    _accumulate(state)  # before reuse_dims: an accumulator of a folded stack target adds nothing
    _fuse_and_reuse_keeping_rows(state, chosen)
    _vectorize(state, chosen)
    _pad_rows(state)
    _parallelize(state, chosen)
    return state.moves


PASSES: dict[str, Callable[[Program, Target | str], list[str]]] = dict(zip(
    methods.PASSES, (naive, greedy, heuristic), strict=True))


# -- the steps -------------------------------------------------------------------------------


def _op_bytes(program: Program, op: Op) -> int:
    """The widest dtype that `op` touches, in bytes."""
    arrays = [op.target.array, *(a.array for a in op.reads)]
    return max(DTYPE_BYTES[program.buffer_of[a].dtype] for a in arrays if a in program.buffer_of)


def lanes(target: Target, dtype_bytes: int) -> int:
    """How many elements of `dtype_bytes` one of the target's vectors holds."""
    return max(1, target.vector_bytes // dtype_bytes)


def _last_coef(access, depth: int) -> int:
    """The coefficient of `{depth}` in the last index of `access` (0 for a scalar)."""
    if not access.index:
        return 0
    try:
        return affine(access.index[-1]).coef(depth)
    except NotAffine:
        return 0


def _strided(op: Op, depth: int) -> int:
    """How many of `op`'s accesses would stride through memory with the scope at `depth`
    innermost: those that use it other than as `{depth}` alone in their last index. An access
    that does not use it stays put (a register); one with coefficient 1 there is contiguous."""
    count = 0
    for access in (op.target, *op.reads):
        try:
            forms = [affine(i) for i in access.index]
        except NotAffine:
            count += 1
            continue
        used = [k for k, f in enumerate(forms) if f.coef(depth)]
        if used and (used != [len(forms) - 1] or forms[-1].coef(depth) != 1):
            count += 1
    return count


def _vector_along(op: Op, depth: int) -> bool:
    """Whether the scope at `depth`, innermost, could be a vector (`vectorize_scope`): the target
    contiguous along it (or, in a reduction, not using it), every read contiguous, strided or
    not using it."""
    try:
        target = lane_use(op.target, depth)
        return target in ("contiguous", "invariant" if op.reduction else "contiguous") and all(
            lane_use(access, depth) is not None for access in op.reads)
    except NotAffine:
        return False


def _uses(access, depth: int) -> bool:
    try:
        return any(affine(i).coef(depth) for i in access.index)
    except NotAffine:
        return True


def _sites(state: _State) -> list[Site]:
    return list(state.analysis.sites)


def _interchange(state: _State, target: Target) -> None:
    """In every perfect loop nest around one operation, move the scope along which most of its
    accesses are contiguous innermost, when it beats the innermost one; but first a scope that
    makes a vector of at least half the target's lanes (`_vector_along`) over one narrower: a
    2x2 pool window innermost is a vector of 2, its output's row one of 16 whose reads are
    strided."""
    for label in [s.label for s in _sites(state)]:
        site = state.analysis.by_label.get(label)
        if site is None or len(site.chain) < 2:
            continue
        chain, op = site.chain, site.op
        inner = len(chain) - 1
        half = lanes(target, _op_bytes(state.program, op)) // 2
        cost = [(not (chain[d].size >= half and _vector_along(op, d)), _strided(op, d)) for d in range(len(chain))]
        best = min(range(len(chain)), key=lambda d: (cost[d], -d))
        if cost[best] >= cost[inner] or any(s.kind for s in chain[best:]):
            continue
        # bubble the scope at `best` inward; stop at the first interchange that is not legal
        for depth in range(best, inner):
            if not state.play(f"swap_scopes(op={label}, depth={depth})"):
                break


def _align_for_fusion(state: _State, target: Target) -> None:
    """For each loop nest whose outermost scope differs in size from the one before it, bring a
    scope of that size out from inside it (legal interchanges only), so that the two can fuse:
    batchnorm's normalisation `n c h w` becomes `c n h w` and joins the per-channel statistics,
    reading each channel while it is still in cache. Not when the fused scope, the one the
    threads would share, has too few iterations to keep the target's cores evenly busy (3
    channels on 2 cores)."""
    for index in range(1, len(state.program.body)):
        before, nest = state.program.body[index - 1], state.program.body[index]
        if not isinstance(before, Scope) or not isinstance(nest, Scope) or before.size == nest.size \
                or before.size < BALANCED_ITERATIONS * target.cores:
            continue
        site = state.analysis.first_site((index,))
        perfect = next((d for d, scope in enumerate(site.chain) if len(scope.body) != 1), len(site.chain) - 1)
        match = next((d for d in range(1, perfect + 1) if site.chain[d].size == before.size
                      and not site.chain[d].kind), None)
        if match is not None:
            state.play_all([f"swap_scopes(op={site.label}, depth={d})" for d in range(match - 1, -1, -1)])


def _fuse_and_reuse_keeping_rows(state: _State, target: Target) -> None:
    """`_fuse_and_reuse`, but a temporary keeps its row along an innermost scope that fusion shares
    between several operations (a bias add and the GELU that reads it): folded to one element
    there, it ties them to one scalar loop, since splitting them apart again (`_vectorize`'s
    fission) would need the row; kept, on the stack and in the first-level cache, each operation
    gets a vector loop of its own (bias + tanh-GELU at 512 x 768: 41x over the spec, where the
    folded scalar loop gained 1-2x)."""
    if target.language != "c":
        _fuse_and_reuse(state)
        return
    for _ in range(_MAX_STEPS):
        legal = state.find(lambda m: m.name == "join_scopes"
                           or (m.name == "reuse_dims" and not _along_a_shared_row(state, m)))
        if not legal or not state.play(legal[0]):
            break
    _to_stack(state)


def _along_a_shared_row(state: _State, move: Move) -> bool:
    """Whether `move` (a `reuse_dims`) folds a dimension that some access indexes with the variable
    of a sequential innermost scope holding several operations."""
    buffer, dim = move.arg("buffer"), move.arg("dim")
    for site in _sites(state):
        row = site.chain[-1] if site.chain else None
        if row is None or row.kind or sum(isinstance(n, Op) for n in row.body) < 2:
            continue
        inner = len(site.chain) - 1
        for access in (site.op.target, *site.op.reads):
            if state.program.buffer_of[access.array].name == buffer and len(access.index) > dim \
                    and _uses_at(access, dim, inner):
                return True
    return False


def _accumulate(state: _State) -> None:
    """Keep each reduction's partial result in a register over the scopes its target does not use."""
    done: set[str] = set()
    for _ in range(_MAX_STEPS):
        for site in _sites(state):
            if site.op.reduction is None or site.label in done:
                continue
            done.add(site.label)
            used = [d for d in range(len(site.chain)) if _uses(site.op.target, d)]
            depth = (max(used) + 1) if used else 0
            if depth < len(site.chain) and state.play(f"accumulate(op={site.label}, depth={depth})"):
                break  # the labels changed; look again
        else:
            return


def _vectorize(state: _State, target: Target) -> None:
    """Vectorise every innermost sequential scope of operations (`_vectorize_innermost`), each
    operation on its own: fusion may have joined several down to one row, and a vector holds one."""
    if target.language != "c":
        return
    done: set[str] = set()
    for _ in range(_MAX_STEPS):
        for site in _sites(state):
            if site.label in done or not site.chain:
                continue
            done.add(site.label)
            scope = site.chain[-1]
            if scope.kind or any(s.kind == "v" for s in site.chain) or any(not isinstance(n, Op) for n in scope.body):
                continue
            mark = state.mark()
            if _alone(state, site.label, len(site.chain) - 1) \
                    and _vectorize_innermost(state, site.label, target) is not None:
                break
            state.undo(mark)
        else:
            return


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def tile_shape(rows: int, vectors: int, registers: int, per_vector: int = 1, cores: int = 1,
               in_flight: int = 1) -> tuple[int, int]:
    """The register tile of a blocked reduction: R of `rows` by W of `vectors` accumulators, whose
    live values fit in `registers` (`_live_registers`: one more and the compiler spills an
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
              if _live_registers(r, w, per_vector) <= registers]

    def cost(rw: tuple[int, int]) -> tuple:
        r, w = rw
        tails = (rows % r > 0) + (vectors % w > 0)
        latency = max(1.0, in_flight / (r * w * per_vector))
        return (cores > 1 and not _balanced(vectors // w, cores),  # the tail's block is a loop nest of its own
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


def _register_block(state: _State, target: Target) -> None:
    """Register blocking for each vectorised reduction with a row to reuse its vectors across
    (matmul's i for c[i, j] += a[i, k] * b[k, j], whose b vectors do not depend on i): the
    scopes become

        [other target scopes] [J/W] [K/KB] [I/R] KB [other reductions] R:u W:u L:v

    an R x W tile of vector accumulators (`tile_shape`, sized to the target's vector registers)
    updated by every step of the reduction, kept in registers by `accumulate` (or its partial
    form, when blocks of K outside the rows write the target first), a reduction cut into
    blocks (`reduction_block`) so that a block's panel of the streamed operand stays in cache
    while every row block uses it, and that panel packed (`_pack`); [K/KB] outside [J/W], and
    the slice of the rows' operand that a block of K reads packed, when the private cache holds
    that slice (`agent.blocking`). Section 4.1's latency-hiding tiling is the case R = W = 4:
    R x W independent accumulators keep the multiply-add pipeline full. A side of the tile, or
    of the vectors, that does not divide its scope leaves a tail (`split_scope`), blocked in
    turn with a tile that fits it. All or nothing per operation. The last operation first: a
    tail comes after its operation and renames the ones after it, which are then done."""
    if target.language != "c":
        return
    for label in reversed([s.label for s in _sites(state)]):
        _block_or_undo(state, label, target)


def _block_or_undo(state: _State, label: str, target: Target) -> None:
    mark = state.mark()
    if not _block(state, label, target):
        state.undo(mark)


def _block(state: _State, label: str, target: Target) -> bool:
    site = state.analysis.by_label.get(label)
    if site is None or len(site.chain) < 2 or site.op.reduction is None:
        return False
    split = _vectorized_tail(site) if site.chain[-1].kind == "v" else _vectorize_lanes(state, label, target)
    if split is None or not _isolate(state, label):
        return False
    site = state.analysis.by_label[label]
    chain, op = site.chain, site.op
    n = len(chain)
    roles = [f"s{d}" for d in range(n)]
    roles[n - 1] = "L"
    if split:
        roles[n - 2] = "J"
    lanes_read = [r for r in op.reads if _uses(r, n - 1)]
    broadcast = [r for r in op.reads if not _uses(r, n - 1)]
    rows = [d for d in range(n - 1) if roles[d] != "J" and not chain[d].kind and _uses(op.target, d)
            and not any(_uses(r, d) for r in lanes_read) and any(_uses(r, d) for r in broadcast)]
    reductions = [d for d in range(n) if not _uses(op.target, d)]
    per_vector = _registers(chain[-1].size, _op_bytes(state.program, op), target)
    if not rows or not reductions or any(chain[d].kind for d in reductions) \
            or _live_registers(1, 1, per_vector) > target.vector_registers:  # not even one vector fits
        return True  # vectorised, and no tile of accumulators to keep in registers
    row, longest = rows[-1], max(reductions, key=lambda d: chain[d].size)
    outer = [chain[d].size for d in range(n - 1) if roles[d].startswith("s") and d != row and d not in reductions]
    sharing = 1 if any(_balanced(size, target.cores) for size in outer if size > 1) else target.cores
    r, w = tile_shape(chain[row].size, chain[n - 2].size if split else 1, target.vector_registers, per_vector,
                      sharing, fma_in_flight(target))
    panel_row = w * chain[-1].size * _op_bytes(state.program, op)  # one step's vectors of the streamed operand
    block = reduction_block(chain[longest].size, panel_row, target)
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
        if not _split_and_block_tail(state, label, depth, size, target):
            return False
        roles[depth: depth + 1] = [role + "o", role + "t"]
    blocks = ("Jo", "Ko", "Io")
    if "Jo" in roles and "Ko" in roles \
            and reduction_outside_columns(chain[row].size * block * _op_bytes(state.program, op), target):
        blocks = ("Ko", "Jo", "Io")
    tile = [x for x in ("It", "Jt", "L") if x in roles]
    wanted = [x for x in roles if x.startswith("s") and x not in inner]
    wanted += [x for x in blocks if x in roles] + inner + tile
    for position, role in enumerate(wanted):
        at = roles.index(role)
        for depth in range(at - 1, position - 1, -1):  # bubble it out to `position`
            if not _swap_alone(state, label, depth):
                return False
            roles[depth], roles[depth + 1] = roles[depth + 1], roles[depth]
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
    if "Ko" not in roles:  # blocks of K outside the rows: the target's first values must come first
        mark = state.mark()
        if not _fuse_init(state, root, target_before, roles, chain, target):
            state.undo(mark)
    # a slice on the heap is shared: only when no thread runs outside the blocks of K
    slices = broadcast if blocks[0] == "Ko" and not any(size > 1 for size in outer) else []
    _pack_operands(state, roles, chain, lanes_read, slices, target)
    return True


def _pack_operands(state: _State, roles: list[str], chain: tuple[Scope, ...], panels: list[Access],
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


def _live_registers(rows: int, vectors: int, per_vector: int) -> int:
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
    return max(_divisors(steps, max(1, fits)))


def _pack(state: _State, array: str, depth: int, rows: int, target: Target, shared: bool = False) -> None:
    """Pack the panel of `array` that a blocked reduction's scope of `rows` row blocks, at `depth`,
    reads (`stage_reads`) into a contiguous temporary on each thread's stack, copied with
    vectors: the rows of a matrix's panel lie a whole matrix row apart, a power of two for the
    library's shapes, so they fall into the same few cache sets and evict each other; packed,
    they are one stream. Left as it was when the panel is whole rows of the operand (nothing to
    gain) or does not fit the stack (then it stays in the private cache unpacked). A `shared` slice,
    copied before a scope of blocks that the threads share and read by all of them, stays on the
    heap, whatever its size."""
    site = next((s for s in _sites(state) if s.op.reduction is not None and len(s.chain) > depth
                 and s.chain[depth].size == rows and any(r.array == array for r in s.op.reads)), None)
    if site is None:
        return
    mark = state.mark()
    names = {b.name for b in state.program.buffers}
    if state.play(f"stage_reads(op={site.label}, depth={depth}, buffer={array})"):
        packed = next(b for b in state.program.buffers if b.name not in names)
        copy = next(s.label for s in _sites(state) if s.op.target.array == packed.name)
        narrower = packed.dims[-1].size < state.program.buffer_of[array].dims[-1].size  # else the same rows
        if narrower and (shared or state.play(f"set_location(buffer={packed.name}, location=stack)")) \
                and _vectorize_innermost(state, copy, target) is not None:
            return
    state.undo(mark)


def _vectorize_lanes(state: _State, label: str, target: Target) -> bool | None:
    """Move the scope along the target's last dimension innermost around `label` and vectorise it
    (`_vectorize_innermost`, a tail of lanes blocked on its own); whether it split, or None."""
    lane = _contiguous_scope(state.analysis.by_label[label])
    if lane is None or not _isolate(state, label):
        return None
    for depth in range(lane, len(state.analysis.by_label[label].chain) - 1):
        if not _swap_alone(state, label, depth):
            return None
    return _vectorize_innermost(state, label, target, block_tail=True)


def _vectorized_tail(site: Site) -> bool | None:
    """For a tail that a split of a blocked reduction left (its lanes already vectorised): whether
    the scope around its lanes counts vectors of them, as a split by the lane count makes it; None
    when the vectorised scope is not along the target's last dimension."""
    lanes_at = len(site.chain) - 1
    if _last_coef(site.op.target, lanes_at) != 1:
        return None
    return lanes_at > 0 and not site.chain[lanes_at - 1].kind \
        and _last_coef(site.op.target, lanes_at - 1) == site.chain[lanes_at].size


def _fuse_init(state: _State, root: int, target: Access, roles: list[str], chain: tuple[Scope, ...],
               facts: Target) -> bool:
    """Move the operation that sets a blocked reduction's target (`c[...] = 0`, the loop nest just
    before the reduction's, at `root`) into the reduction's nest, just before the tile's load: its
    nest is split and ordered as the reduction's outer scopes and fused with them (`join_scopes`),
    so that each tile is set while it is in cache instead of in a pass over the whole array. The
    reduction's scopes are `roles` (`_block`'s names) of sizes `chain`; `target` is its target."""
    if root == 0:
        return False
    init = state.analysis.first_site((root - 1,))
    if init.op.assign != "=" or init.op.target.array != target.array or len(init.path) != len(init.chain) + 1 \
            or any(len(scope.body) != 1 for scope in init.chain):
        return False
    # the roles of the reduction's scopes along each dimension of the target, outermost first
    along = [[d for d in range(len(chain)) if _uses_at(target, p, d)] for p in range(len(target.index))]
    init_roles: list[str] = []
    for depth in range(len(init.chain)):
        dims = [p for p in range(len(target.index)) if _uses_at(init.op.target, p, depth)]
        if len(dims) != 1 or not along[dims[0]]:
            return False
        parts = along[dims[0]]
        sizes = [chain[d].size for d in parts]
        if prod(sizes) != state.analysis.by_label[init.label].chain[len(init_roles)].size:
            return False
        for k in range(len(parts) - 1):  # [N] -> [s1, s2 * s3] -> [s1, s2, s3]
            depth_k = len(init_roles) + k
            if not state.play(f"split_scope(op={init.label}, depth={depth_k}, factor={prod(sizes[k + 1:])})"):
                return False
        init_roles += [roles[d] for d in parts]
    order = [r for r in roles if r in init_roles]
    for position, role in enumerate(order):
        at = init_roles.index(role)
        for depth in range(at - 1, position - 1, -1):
            if not state.play(f"swap_scopes(op={init.label}, depth={depth})"):
                return False
            init_roles[depth], init_roles[depth + 1] = init_roles[depth + 1], init_roles[depth]
    outer = roles[:roles.index("Kt")]
    if init_roles[:len(outer)] != outer:
        return False
    for depth in range(len(outer)):
        if not state.play(f"join_scopes(op={init.label}, depth={depth})"):
            return False
    for role in init_roles[len(outer):-1]:
        if not state.play(f"unroll_scope(op={init.label}, depth={init_roles.index(role)})"):
            return False
    return _vectorize_innermost(state, init.label, facts) is not None


def _uses_at(access: Access, position: int, depth: int) -> bool:
    """Whether index `position` of `access` uses the scope at `depth`."""
    try:
        return bool(affine(access.index[position]).coef(depth))
    except NotAffine:
        return True


def _contiguous_scope(site: Site) -> int | None:
    """The innermost sequential scope that walks the target's last dimension with stride 1 (and
    no other dimension): the one whose iterations can be the lanes of a vector."""
    target = site.op.target
    leading = replace(target, index=target.index[:-1])
    found = [d for d, scope in enumerate(site.chain)
             if not scope.kind and _last_coef(target, d) == 1 and not _uses(leading, d)]
    return found[-1] if found else None


def _registers(size: int, dtype_bytes: int, target: Target) -> int:
    """How many of the target's vector registers a `size`-lane vector takes, in the pieces the
    code generator computes it in."""
    return sum(max(1, lanes * dtype_bytes // target.vector_bytes) for _, lanes in vector_pieces(size, dtype_bytes))


def _vectorize_innermost(state: _State, label: str, target: Target, block_tail: bool = False) -> bool | None:
    """Vectorise the innermost scope around `label`: whole when it is less than two vectors wide
    and its pieces fit the registers (`_whole_fits_registers`), else split by the lane count, the
    tiles vectorised and, when the lanes do not divide it, the tail of fewer lanes vectorised
    whole (a conv row of 54 is 3 vectors of 16 and one of 6), or register-blocked on its own with
    `block_tail`. Returns whether it split, or None when it
    could not vectorise."""
    site = state.analysis.by_label[label]
    depth = len(site.chain) - 1
    size, width = site.chain[depth].size, lanes(target, _op_bytes(state.program, site.op))
    if site.chain[depth].kind or size < 2:
        return None
    if size < 2 * width and _whole_fits_registers(size, _op_bytes(state.program, site.op), target):
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
        tail = _tail_label(state, label, depth)
        if block_tail:
            _block_or_undo(state, tail, target)
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


def _tail_label(state: _State, label: str, depth: int) -> str:
    """The label of the first operation in the tail that splitting the scope at `depth` around
    `label` left: the scope right after it."""
    path = state.analysis.by_label[label].path
    return state.analysis.first_site(path[:depth] + (path[depth] + 1,)).label


def _split_and_block_tail(state: _State, label: str, depth: int, factor: int, target: Target) -> bool:
    """Split the scope at `depth` around `label` by `factor`; a tail that leaves is register-blocked
    on its own right away, before anything renames it (`_register_block`)."""
    size = state.analysis.by_label[label].chain[depth].size
    if not state.play(f"split_scope(op={label}, depth={depth}, factor={factor})"):
        return False
    if size % factor:
        _block_or_undo(state, _tail_label(state, label, depth), target)
    return True


def _alone(state: _State, label: str, depth: int) -> bool:
    """Make the child of the scope at `depth` around `label` its only child, splitting off
    (fission) its siblings before and after."""
    site = state.analysis.by_label.get(label)
    if site is None or depth + 1 > len(site.chain):
        return False
    if len(site.chain[depth].body) > 1:
        if site.path[depth + 1] > 0 and not state.play(f"fission(op={label}, depth={depth})"):
            return False
        site = state.analysis.by_label[label]
        if len(site.chain[depth].body) > 1:
            after = state.analysis.first_site(site.path[: depth + 1] + (1,)).label
            if not state.play(f"fission(op={after}, depth={depth})"):
                return False
    return True


def _swap_alone(state: _State, label: str, depth: int) -> bool:
    """Interchange the scope at `depth` around `label` with its child, alone first."""
    site = state.analysis.by_label.get(label)
    if site is None or depth + 1 >= len(site.chain):
        return False
    return _alone(state, label, depth) and state.play(f"swap_scopes(op={label}, depth={depth})")


def _isolate(state: _State, label: str) -> bool:
    """Give the operation `label` a loop nest of its own, innermost scope first."""
    site = state.analysis.by_label.get(label)
    if site is None:  # renamed by a split (`_vectorize_innermost`)
        return False
    depths = len(site.chain)
    return all(_alone(state, label, depth) for depth in reversed(range(depths)))


def _pad_rows(state: _State) -> None:
    """Pad the rows of the temporaries that a widened vector (`codegen.cvector.widened_lanes`: a
    conv row's tail of 6 computed as one vector of 8) reads or writes, to a whole number of such
    vectors that holds all its lanes, so that the code generator loads and stores them whole; a
    register tile of them then stays in registers, where loads and stores of only the used lanes
    would go through memory at every step."""
    for site in _sites(state):
        if not site.chain or site.chain[-1].kind != "v":
            continue
        lane = len(site.chain) - 1
        wide = widened_lanes(site.chain[-1].size, _op_bytes(state.program, site.op))
        for access in (site.op.target, *site.op.reads) if wide else ():
            buffer = state.program.buffer_of[access.array]
            rank = len(buffer.dims)
            if not rank or _last_coef(access, lane) != 1:
                continue
            needed = largest_value(affine(access.index[-1]), site.chain, skip=lane) + wide
            if needed > buffer.dims[-1].size:
                state.play(f"pad_dim(buffer={buffer.name}, dim={rank - 1}, size={-(-needed // wide) * wide})")


def _parallelize(state: _State, target: Target) -> None:
    """Run the outermost scope that allows it on the target's cores, in every loop nest."""
    if target.language != "c" or target.cores < 2:
        return
    for label in [s.label for s in _sites(state)]:
        site = state.analysis.by_label.get(label)
        if site is None or any(s.kind in ("p", "g", "b", "w") for s in site.chain):
            continue
        for depth, scope in enumerate(site.chain):
            if scope.kind:
                break
            if scope.size >= 2 and state.play(f"parallelize_scope(op={label}, depth={depth})"):
                break


def _balanced(iterations: int, cores: int) -> bool:
    """Whether `iterations` share out evenly over `cores`: a multiple of them, or enough that the
    last uneven share costs little."""
    return iterations % cores == 0 or iterations >= BALANCED_ITERATIONS * cores
