"""What the cost model reads of a program: its loop structure, per loop level, and its derivation's
moves, as one fixed-length vector normalised by the machine's limits.

    host = Host.of(measured_machine(), get_target("native"))
    x = features(program, host, moves)          # np.ndarray of WIDTH float32s

Per operation, each of its innermost LEVELS scopes (innermost first) gives a row: the scope's
extent and kind (sequential, parallel, vector, unrolled, GPU), the iterations around it, and of the
nest from that scope inwards the bytes and cache lines its accesses touch (against each cache
level), their reuse, the accesses' strides at that scope, the flops per byte (against the
machine's balance of peak to bandwidth), a vector's lanes against the target's vector width and a
parallel scope's tasks per core. The operations' rows are averaged, each weighted by its share of
the program's work (iterations times the flops and accesses of one), so that a nest of a million
iterations speaks louder than one of a hundred. Whole-program sums follow: the compulsory work
against the roofline, temporaries, parallel regions entered, the share of the work under a vector
or parallel scope. Then the moves: how many of each kind were played, and the kinds of the last
few, in order (TLP and the compiler world models read a schedule's primitives as a sequence).

Sizes and times are logarithms, and every size is taken relative to the machine's own limit of
its kind (a footprint against the caches, lanes against the vector width, tasks against the
cores), so that the same loop structure reads alike on machines that differ only in scale. The
features describe; none of them says which tile or order is good: that is learned from times.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from math import prod

import numpy as np

from codegen.targets import Target
from dojo_ir import Program
from dojo_ir.dependence import touches
from dojo_ir.moves import KINDS
from dojo_ir.tree import DTYPE_BYTES, Buffer, Op, Scope, walk_ops, walk_scopes
from runner.roofline import Machine, op_flops, work

LEVELS = 6  # innermost scopes read per operation: a tiled nest's register and cache tiles fit
LAST_MOVES = 3  # the kinds of the last few moves, in order
LINE_BYTES = 64
MOVE_KINDS = tuple(sorted(KINDS))
_GPU_KINDS = ("g", "b", "w")


@dataclass(frozen=True)
class Host:
    """The machine facts the features are normalised by: peak f32 flop/s and memory bandwidth of all
    cores (measured, `runner.roofline`), the cores, the target's vector width and one core's data
    caches (`codegen.targets`)."""

    peak_flops: float
    bandwidth_Bps: float
    cores: int
    vector_bytes: int
    l1d: int
    l2: int
    l3: int

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
        return cls(peak, bandwidth, cores, target.vector_bytes, caches.l1d, caches.l2, caches.l3)


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
_OP_NAMES = ("log_iterations", "log_flops_per_iteration", "accesses", "reduction", "depth")
_PROGRAM_NAMES = (
    "flops_time", "bytes_time", "operations", "nests", "scopes", "temporary_bytes_vs_l2", "stack_buffers",
    "parallel_regions", "share_parallel", "share_vector", "share_unrolled", "vector_innermost",
    "parallel_outermost", "log_moves", "compute_s", "traffic_l1_s", "traffic_l2_s", "memory_s", "bound_s",
)
LEVEL_WIDTH = len(_LEVEL_NAMES)
NAMES: tuple[str, ...] = (
    *(f"level{k}.{n}" for k in range(LEVELS) for n in _LEVEL_NAMES),
    *(f"slowest.level{k}.{n}" for k in range(LEVELS) for n in _LEVEL_NAMES),
    *(f"op.{n}" for n in _OP_NAMES),
    *(f"program.{n}" for n in _PROGRAM_NAMES),
    *(f"moves.count.{k}" for k in MOVE_KINDS),
    *(f"moves.last{i}.{k}" for i in range(LAST_MOVES) for k in MOVE_KINDS),
)
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
        """Bytes moved into a cache of `capacity`: the lines of the outermost depth whose footprint it
        holds, fetched once for each iteration of the scopes outside that depth (the nest's reuse
        inside it is kept, outside it lost)."""
        depth = next((d for d, b in enumerate(self.bytes) if b <= capacity), len(self.sizes))
        return prod(self.sizes[:depth]) * self.lines[depth] * LINE_BYTES


def _level_row(level: int, chain: tuple[Scope, ...], accesses: list[_Access], nest: _Nest, flops: int,
               host: Host) -> list[float]:
    """The row of the scope at depth `level` of `chain`, read with the nest from it inwards."""
    scope = chain[level]
    outer = prod(nest.sizes[:level])
    footprint = nest.bytes[level]
    strides = [abs(sum(form.coef(level) * step for form, step in zip(a.forms, a.strides, strict=True))) * a.bytes
               for a in accesses]
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


def _op_times(chain: tuple[Scope, ...], nest: _Nest, flops: int, host: Host) -> tuple[float, ...]:
    """The operation's arithmetic at the rate of the lanes and cores its scopes use (one lane of one
    core's share of the peak otherwise), and its traffic into each cache level and from memory at
    the memory's bandwidth, in seconds: what its loop structure asks of the machine."""
    lanes_peak = max(1, host.vector_bytes // 4)
    lanes = min(lanes_peak, max((s.size for s in chain if s.kind == "v"), default=1))
    threads = min(host.cores, max((s.size for s in chain if s.kind == "p"), default=1))
    lane_rate = host.peak_flops / host.cores / lanes_peak
    compute = nest.iterations[0] * flops / (lane_rate * lanes * threads)
    return (compute, *(nest.traffic(c) / host.bandwidth_Bps for c in (host.l1d, host.l2, host.l3)))


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
    """What one operation adds to the features: its level rows and operation row, already weighted
    by its work (`weighted`, one flat vector), its work, and its times (`_op_times`)."""

    weight: float
    weighted: np.ndarray  # LEVELS * LEVEL_WIDTH level rows, then the operation's row, then the shares
    rows: np.ndarray  # its level rows, unweighted: the slowest operation's are read as they are
    times: tuple[float, ...]


_SHARES = 5  # parallel, vector, unrolled, vector innermost, parallel outermost


def _op_part(op: Op, chain: tuple[Scope, ...], buffer_of: dict[str, Buffer], host: Host) -> _OpPart:
    accesses = _accesses(op, chain, buffer_of)
    nest = _Nest.of(chain, accesses)
    flops = op_flops(op)
    iterations = prod(s.size for s in chain)
    weight = float(iterations * (flops + len(accesses)))
    rows = np.zeros((LEVELS, LEVEL_WIDTH))
    for k, level in enumerate(range(len(chain) - 1, max(-1, len(chain) - 1 - LEVELS), -1)):
        rows[k] = _level_row(level, chain, accesses, nest, flops, host)
    kinds = [s.kind for s in chain]
    own = [_log2(iterations) / 30, _log2(1 + flops) / 5, len(accesses) / 8, float(op.reduction is not None),
           len(chain) / 10, "p" in kinds, "v" in kinds, "u" in kinds, bool(kinds) and kinds[-1] == "v",
           bool(kinds) and kinds[0] == "p"]
    weighted = weight * np.concatenate([rows.ravel(), np.asarray(own, dtype=np.float64)])
    return _OpPart(weight, weighted, rows, _op_times(chain, nest, flops, host))


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


def features(program: Program, host: Host, moves: tuple[str, ...] | list[str] | None = None) -> np.ndarray:
    """The cost model's vector of `program` on `host` (float32, WIDTH long; NAMES says what each
    entry is). `moves` is the derivation that made it from its spec, by default the program's own
    (none for a spec)."""
    if moves is None:
        moves = program.derivation.moves if program.derivation else ()
    buffer_of = program.buffer_of
    parts = [_PARTS.of(op, chain, buffer_of, host) for op, chain in walk_ops(program.body)]
    weights = sum(p.weight for p in parts)
    summed = np.sum([p.weighted for p in parts], axis=0) / weights if weights else np.zeros(
        LEVELS * LEVEL_WIDTH + len(_OP_NAMES) + _SHARES)
    times = np.sum([p.times for p in parts], axis=0) if parts else np.zeros(4)
    bounds = [max(p.times[0], p.times[3]) for p in parts]
    slowest = parts[int(np.argmax(bounds))].rows if parts else np.zeros((LEVELS, LEVEL_WIDTH))
    levels_end = LEVELS * LEVEL_WIDTH
    op_end = levels_end + len(_OP_NAMES)
    shares = summed[op_end:]
    regions = sum(prod(s.size for s in outer) for s, outer in walk_scopes(program.body) if s.kind == "p")
    temporaries = sum(prod(b.storage_shape) * DTYPE_BYTES[b.dtype] for b in program.buffers
                      if not set(b.array_names) & {*program.inputs, *program.outputs} and b.location == "heap")
    needed = work(program)
    program_part = [
        _log2(needed.flops / host.peak_flops * 1e9) / 30,
        _log2(needed.bytes / host.bandwidth_Bps * 1e9) / 30,
        _log2(len(parts)) / 5,
        _log2(len(program.body)) / 5,
        _log2(sum(1 for _ in walk_scopes(program.body))) / 6,
        _squash(_log2(temporaries / host.l2)) if temporaries else -1.0,
        sum(b.location == "stack" for b in program.buffers) / 4,
        _log2(1 + regions) / 20,
        *shares,
        math.log1p(len(moves)) / 4,
        *(_seconds(t) for t in times),
        _seconds(sum(bounds)),
    ]
    return np.concatenate([summed[:levels_end], slowest.ravel(), summed[levels_end:op_end], program_part,
                           _moves_part(tuple(moves))]).astype(np.float32)
