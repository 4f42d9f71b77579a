"""Software prefetches for the broadcast operands of a register tile.

A register tile multiplies a vector of one array by scalars of another,
broadcast to every lane:

    4 32 7:u 4:u 16:v acc[...] += x[0,{0}*4+{1},r,{3},{2}] * wb[...]

Each broadcast operand (`x`, read at seven pixels) runs contiguously along the
loop of 32 input channels, then jumps a whole channel block (25 KB in
ResNet-50's 1x1 convolution from 1024 channels at 14x14) when the loop
around it moves on. The hardware's prefetchers follow neither: the jump leaves
their page, and each broadcast instruction steps 4 bytes, which they do not
extrapolate to the next line, so each new block starts with misses that the
tile waits on (that convolution as the heuristic pass tiles it: 0.43 ms
without prefetches, 0.41 ms with them; with 7 positions by 4 vectors, 0.39
against 0.34 ms; ONNX Runtime's node 0.37 ms; Intel Xeon, 2 threads).

`prefetches` names those lines one iteration ahead. For a sequential scope P
and each sequential scope L in its body, every read of a `:v` operation under
L that is a broadcast (no lane variable), contiguous along L (coefficient 1 in
its flattened offset) and moves with P is prefetched at the start of P's body
for P's next iteration: every line that L's whole subtree will read of it.
The loops inside L are enumerated, so a 3x3 convolution's rows and columns
are covered too. It applies where the lines can be known exactly: the buffer
is the caller's or the heap's (a local array stays in cache), the offset has
no `D:K` dimension, and the loops outside L step by whole cache lines (buffers
are 64-byte aligned). A prefetch never faults, but its address is still
computed in bounds: the last iteration prefetches nothing.

`panel_plan` prefetches the other operand, the one each step reads as whole
vectors (a convolution's blocked weights), where a loop R around the tile
reuses it: every output row of a block of channels reads the same panel of
weights. The first row reads the panel from memory at the rate the tile
consumes it (two vectors every 28 multiply-adds in a 14x2 tile), faster than
one core's misses arrive, and waits; the other rows find it in cache and leave
memory idle. So the panel that the next iteration of the loop P around R will
read is prefetched into the second-level cache while R runs, a few lines at a
time, spread over R's iterations and the sequential loops inside it down to
one whose iterations are as many as half the panel's lines
(PANEL_LINES_PER_STEP). ResNet-50's 3x3 convolution at 256x14x14 (panels of 73
KB, a block of 64 input channels by 32 output channels) took 1.21-1.31 ms
with them against 1.40 ms without after the caches were flushed, and 1.05-1.13
ms against 1.14 ms with them warm (Intel Xeon, 2 threads). Planned where the
panel is one contiguous run of lines (blocked weights are) of
PANEL_MIN_LINES to PANEL_MAX_LINES, so that it and the next one stay in any
core's private cache together. P may be a parallel loop: its static schedule
gives each thread contiguous iterations, so the next one is the thread's own
but at the end of its share. When P's next panel continues into its parent's
next iteration (the blocks of input channels, then of output channels), the
last iteration prefetches that; otherwise nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product
from math import ceil, prod

from dojo_ir.affine import Affine, NotAffine
from dojo_ir.tree import DTYPE_BYTES, Access, Op, Program, Scope, walk_op_paths

from .cexpr import Env, affine_text, bind, buffer_var, offset, storage_size
from .cvector import lane_use

LINE_BYTES = 64
# More lines than this an iteration, or more loop values to enumerate, and
# the tile is not the short-run pattern this is for: the hardware streams it.
MAX_LINES = 128
MAX_ENUMERATED = 4096
PANEL_MIN_LINES = 32  # fewer, and the hardware's streamer covers the first row's misses
PANEL_MAX_LINES = 2048  # 128 KiB: with the panel being read, within the smallest private cache (Zen 3's 512 KiB)
PANEL_LINES_PER_STEP = 2
PANEL_MAX_LINES_PER_STEP = 8  # more at a time, and they wait on the core's few line-fill buffers
PANEL_MAX_ENUMERATED = 16384

_INDENT = "    "


def prefetches(scope: Scope, depth: int, program: Program, env: Env) -> list[str]:
    """The statements that open the body of the sequential `scope` at `depth`
    (its loop variable in `env`): prefetches of the lines its next iteration's
    register tiles broadcast from, guarded by there being a next iteration."""
    if scope.kind != "":
        return []
    lines: dict[tuple[str, Affine], set[int]] = {}
    for child in scope.body:
        if isinstance(child, Scope) and child.kind == "":
            for name, outer, found in _broadcast_lines(child, depth, program, env):
                lines.setdefault((name, outer), set()).update(found)
    count = sum(len(found) for found in lines.values())
    if not count or count > MAX_LINES:
        return []
    var = env[depth]
    body = [f"__builtin_prefetch(&{buffer_var(name)}[{_address(outer, line, env)}]);"
            for (name, outer), found in lines.items() for line in sorted(found)]
    return [f"if ({var} + 1 < {scope.size}) {{", *(_INDENT + line for line in body), "}"]


def _address(outer: Affine, element: int, env: Env) -> str:
    text = affine_text(outer, env)
    return str(element) if text == "0" else f"{text} + {element}" if element else text


def _broadcast_lines(loop: Scope, depth: int, program: Program, env: Env
                     ) -> Iterator[tuple[str, Affine, set[int]]]:
    """(buffer, offset outside `loop`, line-start offsets) of each broadcast read under `loop`,
    the child at `depth + 1` of the scope at `depth`, in that scope's next iteration."""
    for _, op, chain in walk_op_paths(loop.body, chain=(loop,)):
        if chain[-1].kind != "v" or any(s.kind not in ("", "u") for s in chain[:-1]):
            continue
        lane = depth + len(chain)
        for read in _broadcasts(op, lane):
            form = _memory_offset(read, program)
            if form is None:
                continue
            form = bind(form, env)
            per_line = _per_line(program, read)
            outer = Affine.of({d: c for d, c in form.terms if d <= depth})
            if form.coef(depth + 1) != 1 or not form.coef(depth) or any(c % per_line for _, c in outer.terms):
                continue
            inner = [(d, c) for d, c in form.terms if d > depth]
            sizes = [chain[d - depth - 1].size for d, _ in inner]
            if prod(sizes) > MAX_ENUMERATED:
                continue
            yield program.buffer_of[read.array].name, outer, \
                _lines(form.const + form.coef(depth), inner, sizes, 0, per_line)


def _memory_offset(read: Access, program: Program) -> Affine | None:
    """The flattened offset of `read` when its lines can be known exactly and are worth
    prefetching: in the caller's buffer or the heap (a local array stays in cache), affine, with
    no `D:K` dimension; else None."""
    buffer = program.buffer_of[read.array]
    if buffer.location != "heap" and all(program.buffer_of[name] is not buffer
                                         for name in program.inputs + program.outputs):
        return None
    try:
        off = offset(read, buffer)
    except NotAffine:
        return None
    return None if off.folded else off.linear


def _per_line(program: Program, read: Access) -> int:
    return LINE_BYTES // DTYPE_BYTES[program.buffer_of[read.array].dtype]


def _lines(start: int, inner: list[tuple[int, int]], sizes: list[int], reach: int, per_line: int) -> set[int]:
    """The starts (element offsets) of the lines that a read at `start` plus `inner`'s terms reads
    over loops of `sizes`, each read `reach` elements long after its first."""
    lines: set[int] = set()
    for values in product(*(range(size) for size in sizes)):
        first = start + sum(c * v for (_, c), v in zip(inner, values, strict=True))
        lines.update(range(first // per_line * per_line, (first + reach) // per_line * per_line + 1, per_line))
    return lines


def _broadcasts(op: Op, lane: int) -> list[Access]:
    """The reads of the `:v` operation `op` (lane variable at `lane`) that are broadcast to every lane."""
    return [read for read in dict.fromkeys(op.reads) if lane_use(read, lane) == "invariant"]


@dataclass(frozen=True)
class Panel:
    """Prefetches of the panel of `buffer` that the next iteration of a loop P will read: `lines`
    lines from `outer + first` (`outer` over P's depth and those outside it), `per_step` lines at
    each step of the loops that the prefetches are spread over, `counter` numbering the steps, while
    the step's lines lie within the buffer's `total` elements and, unless P's parent's next panel
    follows on, P (at depth `last[0]`, of `last[1]` iterations) has a next iteration."""

    buffer: str
    outer: Affine
    first: int
    lines: int
    counter: Affine
    per_step: int
    per_line: int
    total: int
    last: tuple[int, int] | None


def panel_plan(program: Program) -> dict[tuple[int, ...], list[Panel]]:
    """The panels to prefetch, by the path of the loop whose body opens with them."""
    found: dict[tuple, tuple[set[int], tuple[int, ...], tuple[Scope, ...]]] = {}
    for path, op, chain in walk_op_paths(program.body):
        lane = len(chain) - 1
        if not chain or chain[-1].kind != "v" or any(s.kind not in ("", "u", "p") for s in chain[:-1]):
            continue
        for read in dict.fromkeys(op.reads):
            form = _memory_offset(read, program) if lane_use(read, lane) == "contiguous" else None
            if form is None:
                continue
            per_line = _per_line(program, read)
            for p in range(lane - 1):
                if chain[p].kind not in ("", "p") or chain[p + 1].kind != "" or chain[p + 1].size < 2 \
                        or form.coef(p + 1) or not form.coef(p):
                    continue
                outer = Affine.of({d: c for d, c in form.terms if d <= p})
                if any(c % per_line for _, c in outer.terms):
                    continue
                lines = _panel_lines(form, chain, p + 1, lane, per_line)
                if lines is None:
                    continue
                key = (path[:p + 1], program.buffer_of[read.array].name, outer)
                known, _, _ = found.setdefault(key, (set(), path, chain))
                known.update(lines)
    plan: dict[tuple[int, ...], list[Panel]] = {}
    for (p_path, name, outer), (lines, op_path, chain) in found.items():
        placed = _panel(program, name, outer, lines, op_path, chain, len(p_path) - 1)
        if placed is not None:
            plan.setdefault(placed[0], []).append(placed[1])
    return plan


def _panel_lines(form: Affine, chain: tuple[Scope, ...], reuse: int, lane: int, per_line: int) -> set[int] | None:
    """The lines (as element offsets) that the loops inside the reusing loop at `reuse` read of
    the vector read `form`, apart from the terms of the loops outside it."""
    inner = [(d, c) for d, c in form.terms if reuse < d < lane]
    sizes = [chain[d].size for d, _ in inner]
    if prod(sizes) > PANEL_MAX_ENUMERATED:
        return None
    return _lines(form.const, inner, sizes, form.coef(lane) * (chain[lane].size - 1), per_line)


def _panel(program: Program, name: str, outer: Affine, lines: set[int], op_path: tuple[int, ...],
           chain: tuple[Scope, ...], p: int) -> tuple[tuple[int, ...], Panel] | None:
    """Where and how to prefetch the contiguous panel `lines` of `name` that the loop at depth `p`
    moves (its path and the tile's: `op_path`, `chain`), or None when it is not one such panel."""
    buffer = program.buffer_of[name]
    per_line = LINE_BYTES // DTYPE_BYTES[buffer.dtype]
    low, count = min(lines), len(lines)
    if (max(lines) - low) // per_line + 1 != count or not PANEL_MIN_LINES <= count <= PANEL_MAX_LINES:
        return None
    spread = [p + 1]
    while spread[-1] + 1 < len(chain) - 1 and chain[spread[-1] + 1].kind == "" \
            and ceil(count / prod(chain[d].size for d in spread)) > PANEL_LINES_PER_STEP:
        spread.append(spread[-1] + 1)
    steps = prod(chain[d].size for d in spread)
    per_step = ceil(count / steps)
    if per_step > PANEL_MAX_LINES_PER_STEP:
        return None
    counter = Affine.of({d: prod(chain[e].size for e in spread[i + 1:]) for i, d in enumerate(spread)})
    step = outer.coef(p)
    continues = p > 0 and outer.coef(p - 1) == step * chain[p].size
    return op_path[:spread[-1] + 1], Panel(name, outer, low + step, count, counter, per_step, per_line,
                                           storage_size(buffer), None if continues else (p, chain[p].size))


def panel_prefetches(panels: list[Panel], env: Env) -> list[str]:
    """The statements that open a loop's body with the prefetches of `panels` (`panel_plan`)."""
    lines = []
    for panel in panels:
        step = affine_text(panel.counter, env)
        address = panel.outer + panel.counter.scale(panel.per_step * panel.per_line) + Affine(panel.first)
        last = address + Affine((panel.per_step - 1) * panel.per_line)
        guards = [f"{step} < {ceil(panel.lines / panel.per_step)}", f"{affine_text(last, env)} < {panel.total}"]
        if panel.last is not None:
            guards.insert(0, f"{env[panel.last[0]]} + 1 < {panel.last[1]}")
        target = buffer_var(panel.buffer)
        lines += [f"if ({' && '.join(guards)}) {{", *(
            f"{_INDENT}__builtin_prefetch(&{target}[{affine_text(address + Affine(k * panel.per_line), env)}], 0, 2);"
            for k in range(panel.per_step)), "}"]
    return lines
