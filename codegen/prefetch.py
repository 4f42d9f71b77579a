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
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product
from math import prod

from dojo_ir.affine import Affine, NotAffine
from dojo_ir.tree import DTYPE_BYTES, Access, Op, Program, Scope, walk_op_paths

from .cexpr import Env, affine_text, bind, buffer_var, offset
from .cvector import lane_use

LINE_BYTES = 64
# More lines than this an iteration, or more loop values to enumerate, and
# the tile is not the short-run pattern this is for: the hardware streams it.
MAX_LINES = 128
MAX_ENUMERATED = 4096

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
    external = {program.buffer_of[name].name for name in program.inputs + program.outputs}
    for _, op, chain in walk_op_paths(loop.body, chain=(loop,)):
        if chain[-1].kind != "v" or any(s.kind not in ("", "u") for s in chain[:-1]):
            continue
        lane = depth + len(chain)
        for read in _broadcasts(op, lane):
            buffer = program.buffer_of[read.array]
            if buffer.location != "heap" and buffer.name not in external:
                continue
            try:
                off = offset(read, buffer)
            except NotAffine:
                continue
            form = bind(off.linear, env)
            per_line = LINE_BYTES // DTYPE_BYTES[buffer.dtype]
            outer = Affine.of({d: c for d, c in form.terms if d <= depth})
            if off.folded or form.coef(depth + 1) != 1 or not form.coef(depth) or any(
                    c % per_line for _, c in outer.terms):
                continue
            inner = [(d, c) for d, c in form.terms if d > depth]
            sizes = [chain[d - depth - 1].size for d, _ in inner]
            if prod(sizes) > MAX_ENUMERATED:
                continue
            start = form.const + form.coef(depth)
            found = {(start + sum(c * v for (_, c), v in zip(inner, values, strict=True))) // per_line * per_line
                     for values in product(*(range(s) for s in sizes))}
            yield buffer.name, outer, found


def _broadcasts(op: Op, lane: int) -> list[Access]:
    """The reads of the `:v` operation `op` (lane variable at `lane`) that are broadcast to every lane."""
    return [read for read in dict.fromkeys(op.reads) if lane_use(read, lane) == "invariant"]
