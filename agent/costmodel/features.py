"""What the cost model reads of a program: its loop structure, operation by operation and per loop
level, and its derivation's moves, as one fixed-length vector normalised by the machine's limits.

    host = Host.of(measured_machine(), get_target("native"))
    x = features(program, host, moves)          # np.ndarray of WIDTH float32s
    op_rows(x)                                  # (SLOTS, len(OP_NAMES)): one row an operation

The vector is the program's entries, then one row for each operation (at most SLOTS, those of most
predicted time), which the model scores one by one and adds up (`agent.costmodel.model`): a program
takes the sum of its nests' times, so a move that speeds up one nest is worth that nest's share,
which a single vector averaged over the operations cannot say. An operation's row holds its
iterations, flops, accesses and scope kinds, the lanes the C compiler vectorises it with and
how long its FMAs wait on each other, its share of the program's work, the times its loop
structure asks of the machine (`_op_times`: its flops, a call counted as its evaluation's
operations, its traffic between the cache levels and from memory, each at its measured rate),
and one row for each of its innermost LEVELS scopes
(innermost first): the scope's extent and kind (sequential, parallel, vector, unrolled, GPU), the
iterations around it, and of the nest from that scope inwards the bytes and cache lines its
accesses touch (against each cache level), their reuse, the accesses' strides at that scope, the
flops per byte (against the machine's balance of peak to bandwidth), a vector's lanes against the
target's vector width and a parallel scope's tasks per core. The program's entries are
whole-program sums: the compulsory work against the roofline, temporaries, parallel regions
entered, the share of the work under a vector or parallel scope; then the moves: how many of each
kind were played, and the kinds of the last few, in order (TLP and the compiler world models read
a schedule's primitives as a sequence).

Sizes and times are logarithms, and every size is taken relative to the machine's own limit of
its kind (a footprint against the caches, lanes against the vector width, tasks against the
cores), so that the same loop structure reads alike on machines that differ only in scale. The
features describe; none of them says which tile or order is good: that is learned from times.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from codegen.targets import Target
from codegen.vmath import OPERATIONS
from dojo_ir import Program
from dojo_ir.dependence import touches
from dojo_ir.moves import KINDS
from dojo_ir.tree import DTYPE_BYTES, Buffer, Call, Op, Scope, walk_expr, walk_ops, walk_scopes
from runner.roofline import Machine, compulsory_bytes, op_flops

LEVELS = 6  # innermost scopes read per operation: a tiled nest's register and cache tiles fit
LAST_MOVES = 3  # the kinds of the last few moves, in order
SLOTS = 8  # operations read one by one: those of most predicted time, when a program has more
LINE_BYTES = 64
MOVE_KINDS = tuple(sorted(KINDS))
_GPU_KINDS = ("g", "b", "w")


def _nominal_cache_Bps(peak_flops: float, l2_Bps: float | None, l3_Bps: float | None) -> tuple[float, float]:
    """The caches' read bandwidth as measured, or where it was not (an older log, no measurement)
    nominal: a byte per peak flop from level 2 and half that from the last level. That is a vector
    a cycle for a core with two FMA pipes of that width, as x86 cores of recent years read their
    level 2 (a Zen 4 measured 0.85-1.1 and 0.7-0.95)."""
    return (l2_Bps or peak_flops), (l3_Bps or peak_flops / 2)


@dataclass(frozen=True)
class Host:
    """The machine facts the features are normalised by: peak f32 flop/s, memory bandwidth and the
    level-2 and last-level caches' read bandwidth, all cores, and the FMAs a core must have under
    way to reach its peak (measured, `runner.roofline`; 8, Zen 4's and Sapphire Rapids', in logs
    older than the measurement), the cores, the target's vector width and one core's data caches
    (`codegen.targets`)."""

    peak_flops: float
    bandwidth_Bps: float
    cores: int
    vector_bytes: int
    l1d: int
    l2: int
    l3: int
    l2_Bps: float
    l3_Bps: float
    fma_in_flight: int = 8

    @classmethod
    def of(cls, machine: Machine | None, target: Target) -> Host:
        """The facts of `machine` (as `dojo machine` measured it) for code built for `target`. Without
        a measurement (the editor never starts one), nominal limits scaled from the target's vector
        width and cores: a 2.5 GHz core issuing two FMAs a cycle and 10 GB/s a core. Within one
        program's candidates, which is what the model ranks, only their ratios to the caches and
        the vector width matter, and those are the target's own."""
        cores = machine.cores if machine else (target.cores or os.cpu_count() or 1)
        lanes = max(1, target.vector_bytes // 4)
        peak = machine.peak_flops if machine else cores * lanes * 2 * 2 * 2.5e9
        bandwidth = machine.bandwidth_Bps if machine else cores * 10e9
        caches = target.caches
        cache_Bps = _nominal_cache_Bps(peak, machine and machine.l2_Bps, machine and machine.l3_Bps)
        return cls(peak, bandwidth, cores, target.vector_bytes, caches.l1d, caches.l2, caches.l3, *cache_Bps,
                   machine.fma_in_flight if machine else cls.fma_in_flight)

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> Host:
        """The facts a log's first line holds (`LocalRunner.machine_facts`). Raises KeyError,
        TypeError or ValueError for a record that is not one."""
        peak = float(facts["peak_flops"])
        cache_Bps = _nominal_cache_Bps(peak, *(float(facts[k]) if facts.get(k) else None for k in ("l2_Bps", "l3_Bps")))
        host = cls(peak, float(facts["bandwidth_Bps"]), int(facts["cores"]), int(facts["vector_bytes"]),
                   int(facts["l1d"]), int(facts["l2"]), int(facts["l3"]), *cache_Bps,
                   int(facts.get("fma_in_flight") or cls.fma_in_flight))
        if min(host.peak_flops, host.bandwidth_Bps, host.cores, host.vector_bytes, host.l1d, *cache_Bps,
               host.fma_in_flight) <= 0:
            raise ValueError(f"machine facts that are not positive: {host}")
        return host


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def _squash(x: float, scale: float = 8.0) -> float:
    """A log ratio clipped to [-1, 1]: beyond `scale` doublings the difference no longer matters."""
    return max(-1.0, min(1.0, x / scale))


_LEVEL_NAMES = (
    "present", "log_extent", "sequential", "parallel", "vector", "unrolled", "gpu", "log_outer_trips",
    "footprint_vs_l1", "footprint_vs_l2", "footprint_vs_l3", "log_lines", "log_reuse",
    "stride_zero", "stride_unit", "stride_small", "stride_line", "log_stride_bytes",
    "flops_per_byte_vs_balance", "lanes_vs_width", "tasks_per_core", "log_parallel_entries", "innermost",
)
_OP_NAMES = (
    "present", "log_iterations", "log_flops_per_iteration", "accesses", "reduction", "depth", "parallel", "vector",
    "unrolled", "vector_innermost", "parallel_outermost", "log_compiler_lanes", "log_chain_wait", "compute_s",
    "traffic_l1_s", "traffic_l2_s", "memory_s", "bound_s", "work_share",
)
_PROGRAM_NAMES = (
    "flops_time", "bytes_time", "operations", "nests", "scopes", "temporary_bytes_vs_l2", "stack_buffers",
    "parallel_regions", "share_parallel", "share_vector", "share_unrolled", "vector_innermost",
    "parallel_outermost", "log_moves", "compute_s", "traffic_l1_s", "traffic_l2_s", "memory_s", "bound_s",
    "operations_left_out",
)
LEVEL_WIDTH = len(_LEVEL_NAMES)
OP_NAMES: tuple[str, ...] = (*_OP_NAMES, *(f"level{k}.{n}" for k in range(LEVELS) for n in _LEVEL_NAMES))
SHARED_NAMES: tuple[str, ...] = (
    *(f"program.{n}" for n in _PROGRAM_NAMES),
    *(f"moves.count.{k}" for k in MOVE_KINDS),
    *(f"moves.last{i}.{k}" for i in range(LAST_MOVES) for k in MOVE_KINDS),
)
NAMES: tuple[str, ...] = (*SHARED_NAMES, *(f"op{k}.{n}" for k in range(SLOTS) for n in OP_NAMES))
WIDTH = len(NAMES)


def _row_major(buffer: Buffer) -> tuple[int, ...]:
    """The element stride of each dimension of `buffer`'s storage."""
    strides, step = [], 1
    for size in reversed(buffer.storage_shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


@dataclass(frozen=True)
class _Access:
    """One distinct access of an operation: its stored strides and element bytes, its index forms."""

    forms: tuple
    strides: tuple[int, ...]
    storage: tuple[int, ...]
    bytes: int


def _accesses(op: Op, chain: tuple[Scope, ...], buffer_of: dict[str, Buffer]) -> list[_Access]:
    found: dict[tuple, _Access] = {}
    for touch in touches(op, chain):
        buffer = buffer_of[touch.access.array]
        key = (buffer.name, touch.forms)
        if key not in found:
            found[key] = _Access(touch.forms, _row_major(buffer), buffer.storage_shape, DTYPE_BYTES[buffer.dtype])
    return list(found.values())


def _stride(access: _Access, depth: int) -> int:
    """The elements `access` moves in storage per step of the scope at `depth`."""
    return sum(form.coef(depth) * step for form, step in zip(access.forms, access.strides, strict=True))


def _footprint(access: _Access, sizes: tuple[int, ...], inner: int) -> tuple[int, int]:
    """The elements and cache lines `access` touches over the scopes from depth `inner` inwards
    (the outer ones held), each dimension's range capped by its storage."""
    ranges = []
    for form, stored in zip(access.forms, access.storage, strict=True):
        span = 1 + sum(abs(c) * (sizes[d] - 1) for d, c in form.terms if d >= inner)
        ranges.append(min(span, stored))
    if not ranges:  # a scalar
        return 1, 1
    last = ranges[-1] * access.bytes
    lines = prod(ranges[:-1]) * max(1, -(-last // LINE_BYTES))
    return prod(ranges), lines


@dataclass(frozen=True)
class _Nest:
    """One operation's nest read from each depth inwards: at depth d (0 = outermost, len(chain) = one
    iteration), the iterations inside, and the elements, bytes and cache lines its accesses touch."""

    sizes: tuple[int, ...]
    iterations: tuple[int, ...]
    elements: tuple[int, ...]
    bytes: tuple[int, ...]
    lines: tuple[int, ...]

    @classmethod
    def of(cls, chain: tuple[Scope, ...], accesses: list[_Access]) -> _Nest:
        sizes = tuple(s.size for s in chain)
        iterations, elements, footprint, lines = [], [], [], []
        for depth in range(len(chain) + 1):
            iterations.append(prod(sizes[depth:]))
            touched = [_footprint(a, sizes, depth) for a in accesses]
            elements.append(sum(n for n, _ in touched))
            footprint.append(sum(n * a.bytes for (n, _), a in zip(touched, accesses, strict=True)))
            lines.append(sum(m for _, m in touched))
        return cls(sizes, tuple(iterations), tuple(elements), tuple(footprint), tuple(lines))

    def traffic(self, capacity: int) -> int:
        """Bytes moved into a cache of `capacity`. Inside the outermost depth whose lines it holds
        (a column's elements take a line each), every line is fetched once; so is every line of
        the scope just around that depth over one run of it, since what one of its iterations
        touches is still held at the next (a row read across a scope that moves along it costs its
        lines once, not a line an iteration); around that scope the reuse is lost, and its lines
        are fetched again for each iteration of the scopes outside it. A nest the cache holds
        whole moves nothing into it: it stays there from one run to the next, as it does for the
        runner's repetitions and a library called in a loop."""
        fits = (d for d, lines in enumerate(self.lines) if lines * LINE_BYTES <= capacity)
        depth = next(fits, len(self.sizes))
        if depth == 0:
            return 0
        return prod(self.sizes[:depth - 1]) * self.lines[depth - 1] * LINE_BYTES


def _level_row(level: int, chain: tuple[Scope, ...], accesses: list[_Access], nest: _Nest, flops: int,
               host: Host) -> list[float]:
    """The row of the scope at depth `level` of `chain`, read with the nest from it inwards."""
    scope = chain[level]
    outer = prod(nest.sizes[:level])
    footprint = nest.bytes[level]
    strides = [abs(_stride(a, level)) * a.bytes for a in accesses]
    count = max(1, len(accesses))
    balance = host.peak_flops / host.bandwidth_Bps
    kind = scope.kind
    lanes = _log2(scope.size * min(a.bytes for a in accesses) / host.vector_bytes) if kind == "v" and accesses else 0.0
    return [
        1.0,
        _log2(scope.size) / 10,
        float(kind == ""),
        float(kind == "p"),
        float(kind == "v"),
        float(kind == "u"),
        float(kind in _GPU_KINDS),
        _log2(outer) / 20,
        _squash(_log2(footprint / host.l1d)),
        _squash(_log2(footprint / host.l2)),
        _squash(_log2(footprint / host.l3)),
        _log2(nest.lines[level]) / 20,
        _log2(nest.iterations[level] * count / max(1, nest.elements[level])) / 10,
        sum(s == 0 for s in strides) / count,
        sum(0 < s <= 8 for s in strides) / count,
        sum(8 < s < LINE_BYTES for s in strides) / count,
        sum(s >= LINE_BYTES for s in strides) / count,
        sum(_log2(1 + s) for s in strides) / count / 16,
        _squash(_log2(flops * nest.iterations[level] / max(1, footprint) / balance)),
        _squash(lanes, 4),
        _squash(_log2(scope.size / host.cores)) if kind == "p" else 0.0,
        _log2(outer) / 20 if kind == "p" else 0.0,
        float(level == len(chain) - 1),
    ]


def _compiler_lanes(op: Op, chain: tuple[Scope, ...], accesses: list[_Access], host: Host) -> int:
    """The lanes the C compiler's own vectoriser gives the operation where none of its scopes is
    vector: those of the target's vectors (at most the scope's extent) along the innermost
    sequential or unrolled scope, or the one around it (gcc vectorises an outer loop around an inner
    reduction), if every access is contiguous or invariant along it and the target contiguous;
    else 1. The generated C is built without -ffast-math, so a float reduction along the scope
    keeps its order and stays scalar, and without a vector math library, so a function call does
    too. This is what the code becomes, not a choice of schedule: a spec whose innermost loop runs
    along rows is already vector code."""
    if not chain or any(s.kind not in ("", "u") for s in chain[-2:]):
        return 1
    if any(isinstance(e, Call) for e in walk_expr(op.value)):
        return 1
    target, *reads = accesses  # `touches` lists the target first
    widest = max(a.bytes for a in accesses)
    for depth in range(len(chain) - 1, max(-1, len(chain) - 3), -1):
        if _stride(target, depth) == 1 and all(_stride(a, depth) in (0, 1) for a in reads):
            return max(1, min(host.vector_bytes // widest, chain[depth].size))
    return 1


# Instructions a core keeps under way past one that waits (its reorder window: 320 on Zen 4, 512 on
# Golden Cove), and those of one iteration of a reduction's loop (load, FMA, index, branch).
REORDER_WINDOW = 320
_INSTRUCTIONS_AN_ITERATION = 4


def _chain_wait(op: Op, chain: tuple[Scope, ...], target: _Access, host: Host) -> float:
    """How many times slower than their issue rate the operation's FMAs run because each waits on
    the last: a reduction along its innermost scopes (its target the same element over them, and
    none of them vector) is one chain of dependent FMAs an element (no -ffast-math reorders them),
    and a core overlaps only the chains of the elements its reorder window reaches: a 3x3 window's
    nine FMAs an output overlap with the next outputs', a dot product of 128 with none. 1 when
    enough chains are under way to fill the FMA pipes (`fma_in_flight`)."""
    run = 1
    for depth in range(len(chain) - 1, -1, -1):
        if op.reduction is None or chain[depth].kind == "v" or any(f.coef(depth) for f in target.forms):
            break
        run *= chain[depth].size
    if run == 1:
        return 1.0
    overlapping = REORDER_WINDOW / (run * _INSTRUCTIONS_AN_ITERATION)
    return host.fma_in_flight / min(host.fma_in_flight, max(1.0, overlapping))


def _op_times(chain: tuple[Scope, ...], nest: _Nest, flops: int, host: Host,
              compiler_lanes: int = 1, wait: float = 1.0) -> tuple[float, ...]:
    """What the operation's loop structure asks of the machine, in seconds: its arithmetic at the
    rate of the lanes and cores its scopes use (the compiler's `compiler_lanes` where no scope is
    vector, one lane of one core's share of the peak otherwise), `wait` times slower where its
    FMAs wait on each other (`_chain_wait`); then its traffic into level 1 at level 2's
    bandwidth and into level 2 at the last level's, both at the share of the cores its scopes use
    (each core reads its own level 2 and its own part of the last), and into the last level at
    the memory's bandwidth. A loop order that streams a large operand through level 1 once per
    row, which the compulsory roofline cannot see when the working set fits the last level, shows
    in the second."""
    lanes_peak = max(1, host.vector_bytes // 4)
    lanes = min(lanes_peak, max((s.size for s in chain if s.kind == "v"), default=compiler_lanes))
    threads = min(host.cores, max((s.size for s in chain if s.kind == "p"), default=1))
    lane_rate = host.peak_flops / host.cores / lanes_peak
    compute = nest.iterations[0] * flops / (lane_rate * lanes * threads) * wait
    share = threads / host.cores
    return (compute, nest.traffic(host.l1d) / (host.l2_Bps * share), nest.traffic(host.l2) / (host.l3_Bps * share),
            nest.traffic(host.l3) / host.bandwidth_Bps)


def _moves_part(moves: tuple[str, ...]) -> list[float]:
    kinds = [m.split("(", 1)[0] for m in moves]
    index = {k: i for i, k in enumerate(MOVE_KINDS)}
    counts = [0.0] * len(MOVE_KINDS)
    for k in kinds:
        if k in index:
            counts[index[k]] += 1
    last = [0.0] * (LAST_MOVES * len(MOVE_KINDS))
    for i, k in enumerate(reversed(kinds[-LAST_MOVES:])):
        if k in index:
            last[i * len(MOVE_KINDS) + index[k]] = 1.0
    return [math.log1p(c) / 3 for c in counts] + last


def _seconds(t: float) -> float:
    """A time on a log scale from a nanosecond (0) to about twenty minutes (1)."""
    return _log2(t * 1e9) / 40 if t > 1e-9 else 0.0


@dataclass(frozen=True)
class _OpPart:
    """What one operation adds to the features: its row (OP_NAMES, but for its share of the work,
    which needs the others'), its work (iterations times the flops and accesses of one), its flops
    as `runner.roofline.work` counts them, and its times (`_op_times`)."""

    weight: float
    row: np.ndarray
    times: tuple[float, ...]
    flops: int

    @property
    def bound_s(self) -> float:
        """The slowest of its times: a roofline over every level, not memory alone."""
        return max(self.times)


def _op_part(op: Op, chain: tuple[Scope, ...], buffer_of: dict[str, Buffer], host: Host) -> _OpPart:
    accesses = _accesses(op, chain, buffer_of)
    nest = _Nest.of(chain, accesses)
    flops = op_flops(op, OPERATIONS)  # a scalar exp takes the FMA pipes as long as a dozen FMAs
    iterations = prod(s.size for s in chain)
    weight = float(iterations * (flops + len(accesses)))
    levels = np.zeros((LEVELS, LEVEL_WIDTH))
    for k, level in enumerate(range(len(chain) - 1, max(-1, len(chain) - 1 - LEVELS), -1)):
        levels[k] = _level_row(level, chain, accesses, nest, flops, host)
    kinds = [s.kind for s in chain]
    compiler_lanes = _compiler_lanes(op, chain, accesses, host)
    wait = _chain_wait(op, chain, accesses[0], host)  # the target's: `touches` lists it first
    times = _op_times(chain, nest, flops, host, compiler_lanes, wait)
    own = [1.0, _log2(iterations) / 30, _log2(1 + flops) / 5, len(accesses) / 8, float(op.reduction is not None),
           len(chain) / 10, "p" in kinds, "v" in kinds, "u" in kinds, bool(kinds) and kinds[-1] == "v",
           bool(kinds) and kinds[0] == "p", _log2(compiler_lanes) / 4, _log2(wait) / 3, *(_seconds(t) for t in times),
           _seconds(max(times)), 0.0]
    return _OpPart(weight, np.concatenate([np.asarray(own, dtype=np.float64), levels.ravel()]), times,
                   op_flops(op) * iterations)


class _Parts:
    """Each operation's part, remembered while the operation is alive: a move rebuilds the scopes on
    its path but keeps the operations it does not rewrite, so the programs one move apart (the
    editor rates a line's moves, a search a program's successors) share all but a few. Keyed by the
    operation's identity (held, so that it cannot be reused), the sizes and kinds of its scopes, the
    buffers it reads and writes, and the host."""

    def __init__(self, capacity: int = 1 << 15):
        self._capacity = capacity
        self._parts: dict[tuple, tuple[Op, tuple[Buffer, ...], _OpPart]] = {}

    def of(self, op: Op, chain: tuple[Scope, ...], buffer_of: dict[str, Buffer], host: Host) -> _OpPart:
        key = (id(op), tuple((s.size, s.kind) for s in chain), host)
        found = self._parts.get(key)
        if found is not None:
            held, buffers, part = found
            if held is op and all(buffer_of.get(b.array_names[0]) == b for b in buffers):
                return part
        part = _op_part(op, chain, buffer_of, host)
        if len(self._parts) >= self._capacity:
            self._parts.clear()
        arrays = {op.target.array, *(a.array for a in op.reads)}
        self._parts[key] = (op, tuple(buffer_of[a] for a in arrays), part)
        return part


_PARTS = _Parts()


_WORK_SHARE = _OP_NAMES.index("work_share")
_FLAGS = slice(_OP_NAMES.index("parallel"), _OP_NAMES.index("parallel_outermost") + 1)


def features(program: Program, host: Host, moves: tuple[str, ...] | list[str] | None = None) -> np.ndarray:
    """The cost model's vector of `program` on `host` (float32, WIDTH long; NAMES says what each
    entry is): the program's and its moves' entries, then one row of OP_NAMES for each of its
    operations, at most SLOTS (those of most predicted time; the rows of slots no operation fills
    are zeros, `present` 0 among them). `moves` is the derivation that made it from its spec, by
    default the program's own (none for a spec)."""
    if moves is None:
        moves = program.derivation.moves if program.derivation else ()
    buffer_of = program.buffer_of
    parts = [_PARTS.of(op, chain, buffer_of, host) for op, chain in walk_ops(program.body)]
    weights = sum(p.weight for p in parts) or 1.0
    shares = np.sum([p.weight * p.row[_FLAGS] for p in parts], axis=0) / weights if parts else np.zeros(5)
    times = np.sum([p.times for p in parts], axis=0) if parts else np.zeros(4)
    regions = sum(prod(s.size for s in outer) for s, outer in walk_scopes(program.body) if s.kind == "p")
    temporaries = sum(b.storage_bytes for b in program.buffers
                      if not set(b.array_names) & {*program.inputs, *program.outputs} and b.location == "heap")
    # `work(program)`, its flops summed from the parts that are kept from one program to the next
    needed_flops, needed_bytes = sum(p.flops for p in parts), compulsory_bytes(program)
    program_part = [
        _log2(needed_flops / host.peak_flops * 1e9) / 30,
        _log2(needed_bytes / host.bandwidth_Bps * 1e9) / 30,
        _log2(len(parts)) / 5,
        _log2(len(program.body)) / 5,
        _log2(sum(1 for _ in walk_scopes(program.body))) / 6,
        _squash(_log2(temporaries / host.l2)) if temporaries else -1.0,
        sum(b.location == "stack" for b in program.buffers) / 4,
        _log2(1 + regions) / 20,
        *shares,
        math.log1p(len(moves)) / 4,
        *(_seconds(t) for t in times),
        _seconds(sum(p.bound_s for p in parts)),
        math.log1p(max(0, len(parts) - SLOTS)) / 4,
    ]
    slots = np.zeros((SLOTS, len(OP_NAMES)))
    kept = sorted(parts, key=lambda p: p.bound_s, reverse=True)[:SLOTS]
    for k, part in enumerate(kept):
        slots[k] = part.row
        slots[k, _WORK_SHARE] = part.weight / weights
    return np.concatenate([program_part, _moves_part(tuple(moves)), slots.ravel()]).astype(np.float32)


def op_rows(x: np.ndarray) -> np.ndarray:
    """The operations' rows of feature vectors `x` (..., WIDTH): (..., SLOTS, len(OP_NAMES))."""
    return x[..., len(SHARED_NAMES):].reshape(*x.shape[:-1], SLOTS, len(OP_NAMES))
