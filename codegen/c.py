"""The C backend: a program as one C11 source file, kernel function and harness.

    static void kernel(const float *restrict b_x, float *restrict b_y, float *restrict b_t)

takes one pointer per buffer (arrays in one buffer share it): the inputs'
buffers, then the outputs', then the heap temporaries' (the workspace, which
the harness allocates). Each scope is a loop `for (long i{d} = 0; ...)` named
by its depth, and its kind says how:

- `:p` puts `#pragma omp parallel for schedule(static)` on the loop, whose
  body is a call of a function of its own (`kernel_nest0`, ...) that takes
  the buffers as `restrict` pointers and the loop variables in scope. OpenMP
  moves a parallel loop's body into a function that reads the pointers from
  a struct, and gcc loses what `restrict` said of them: it then versions the
  loops inside for possible aliasing and keeps nothing in registers across
  stores (a pointwise convolution accumulating into a heap buffer ran 2.55
  ms, against 0.81 ms so). A function with `restrict` parameters says it
  again. It is not inlined: inlined into OpenMP's loop, the loop-invariant
  vectors of the nests beside a register tile (a bias, a ReLU's zero) were
  hoisted out of the parallel loop and held in registers across the tile,
  one more than the target has, and an accumulator went to the stack in the
  tile's inner loop (ResNet-50's 1x1 from 256 to 128 channels at 56x56 with
  its ReLU, a tile of 28 accumulators: 1.29-1.50 ms inlined, 1.12-1.15 ms
  not, as without the ReLU; Zen 4). A call a parallel iteration costs
  nanoseconds;
- `:u` writes the body once per iteration, with the loop variable a constant;
- `:v` computes its one operation on vectors (cvector.py), calling helpers
  that vector_helpers.py defines;
- `:g :b :w` run sequentially: the C target ignores GPU mapping;
- a sequential scope whose only child is a `:v` horizontal reduction keeps
  vector accumulators across its iterations (cvector.vector_accumulation).

On x86 targets an output that is written once, by `:v` stores that are
aligned to their vector, never read by the kernel and at least
`targets.streaming_threshold_bytes()` big (`streamed`) is stored with
streaming (non-temporal) stores, which do not read the line into the cache
first: one write instead of a read and a write. Each thread fences them
(`sfence`) before its share of a `:p` loop ends, and the kernel before it
returns.

A `stack` (or `shared`) buffer is a local array declared at the start of the
body of the innermost scope that holds all its accesses (the function body
when there is none), so each iteration of a `:p` scope, and each thread, has
its own copy. That is sound because no value flows from one iteration of a
scope to a later one except through a reduction's accumulator (FORMAT.md),
whose initialisation then lies outside that scope too.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from math import prod

from dojo_ir.paths import node_at
from dojo_ir.tree import DTYPE_BYTES, Buffer, Node, Op, Program, Scope, walk_op_paths, walk_scopes

from .cexpr import Env, Printer, buffer_var, c_type, helper_source, loop_var, statement, storage_size, used_helpers
from .cvector import last_index_reach, streamable, vector_accumulation, vector_statement
from .harness import harness
from .padding import read_padding, zero_padding
from .prefetch import Panel, panel_plan, panel_prefetches, prefetches
from .targets import Target, streaming_threshold_bytes
from .vector_helpers import (
    stream_helper_source,
    used_stream_helpers,
    used_vector_helpers,
    used_vector_types,
    vector_helper_source,
    vector_typedefs,
)

_INDENT = "    "
_INCLUDES = ("math.h", "stdint.h", "stdio.h", "stdlib.h", "time.h")
Path = tuple[int, ...]


def parameters(program: Program) -> list[Buffer]:
    """The kernel function's buffers in order: inputs, outputs (kernel-line
    order), then heap temporaries (declaration order)."""
    io = [program.buffer_of[name] for name in program.inputs + program.outputs]
    heap = [b for b in program.buffers if b.location == "heap" and b not in io]
    return list(dict.fromkeys(io + heap))


def _homes(program: Program) -> dict[Path, list[Buffer]]:
    """Where each local (stack or shared) temporary is declared: the path of
    the innermost scope holding all its accesses, () for the function body."""
    paths: dict[str, Path] = {}
    for path, op, _ in walk_op_paths(program.body):
        parent = path[:-1]
        for access in (op.target, *op.reads):
            name = program.buffer_of[access.array].name
            paths[name] = common_prefix(paths.get(name, parent), parent)
    homes: dict[Path, list[Buffer]] = {}
    params = parameters(program)
    for buffer in program.buffers:
        # inputs and outputs are the caller's memory wherever they are declared
        if buffer.location != "heap" and buffer.name in paths and buffer not in params:
            homes.setdefault(paths[buffer.name], []).append(buffer)
    return homes


def common_prefix(a: Path, b: Path) -> Path:
    """The longest path both `a` and `b` start with: the innermost node holding both."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _declaration(buffer: Buffer) -> str:
    return f"{c_type(buffer.dtype)} {buffer_var(buffer.name)}[{storage_size(buffer)}] __attribute__((aligned(64)));"


def streamed(program: Program, threshold: int) -> frozenset[str]:
    """The output buffers worth storing with streaming (non-temporal) stores,
    which write memory without first reading the line into the cache: each
    is written by one `=` operation in a `:v` scope whose store `streamable`
    accepts, as many times as it has elements (so once each, as indices stay
    in bounds), never read by the kernel, never an input, and at least
    `threshold` bytes, too big to stay in cache for whatever reads it next."""
    inputs = {program.buffer_of[name].name for name in program.inputs}
    outputs = {program.buffer_of[name].name for name in program.outputs} - inputs
    writes: dict[str, list] = {}
    read: set[str] = set()
    for _, op, chain in walk_op_paths(program.body):
        writes.setdefault(program.buffer_of[op.target.array].name, []).append((op, chain))
        read.update(program.buffer_of[a.array].name for a in op.reads)
    chosen = set()
    for name in sorted(outputs - read):
        buffer = next(b for b in program.buffers if b.name == name)
        if len(writes.get(name, [])) != 1 or storage_size(buffer) * DTYPE_BYTES[buffer.dtype] < threshold:
            continue
        op, chain = writes[name][0]
        if not chain or chain[-1].kind != "v" or prod(s.size for s in chain) != storage_size(buffer):
            continue
        env = {depth: loop_var(depth) for depth in range(len(chain) - 1)}
        if streamable(chain[-1], len(chain) - 1, program, env):
            chosen.add(name)
    return frozenset(chosen)


class _Emitter:
    """Writes the kernel body; `homes` says where local buffers are declared,
    `streaming` which buffers are stored with streaming stores. With `outline`
    each parallel loop's body becomes a function of its own, and `nests`
    gathers those functions, innermost first."""

    def __init__(self, program: Program, streaming: frozenset[str] = frozenset(), outline: bool = True):
        self.program = program
        self.homes = _homes(program)
        self.streaming = streaming
        self.outline = outline
        self.nests: list[str] = []

    @cached_property
    def reach(self) -> dict[str, int]:
        return last_index_reach(self.program)

    @cached_property
    def padding(self) -> dict[str, int]:
        return read_padding(self.program)

    @cached_property
    def panels(self) -> dict[Path, list[Panel]]:
        return panel_plan(self.program)

    def declarations(self, path: Path) -> list[str]:
        """The local buffers declared at `path`, each with the padding that widened vectors read zeroed."""
        lines: list[str] = []
        for buffer in self.homes.get(path, []):
            lines.append(_declaration(buffer))
            if buffer.name in self.padding:
                lines += zero_padding(buffer, self.padding[buffer.name])
        return lines

    def heap_padding(self) -> list[str]:
        """The heap temporaries' padding that widened vectors read, zeroed when the kernel starts."""
        return [line for buffer in parameters(self.program) if buffer.name in self.padding
                for line in zero_padding(buffer, self.padding[buffer.name])]

    def block(self, nodes: tuple[Node, ...], path: Path, env: Env) -> Iterator[str]:
        """The lines of a block: the local buffers declared here, then the nodes."""
        yield from self.declarations(path)
        for i, node in enumerate(nodes):
            yield from self.node(node, path + (i,), env)

    def node(self, node: Node, path: Path, env: Env) -> Iterator[str]:
        depth = len(env)
        if isinstance(node, Op):
            yield statement(Printer(self.program, env), node.target, node.assign, node.value)
            return
        if node.kind == "u":
            for k in range(node.size):
                yield from self.braced(node.body, path, {**env, depth: k})
            return
        if node.kind == "v":
            stream = self._streams(node)
            chain = tuple(node_at(self.program.body, path[: d + 1]) for d in range(depth + 1))
            vector = vector_statement(node, depth, self.program, env, stream, chain, self.reach)
            if vector is not None:
                declarations = self.declarations(path)
                yield from braced(declarations + vector) if declarations else vector
                return
        accumulated = vector_accumulation(node, depth, self.program, env)
        if accumulated is not None and not self.homes.get(path) and not self.homes.get(path + (0,)):
            yield from accumulated
            return
        var = loop_var(depth)
        inner = {**env, depth: var}
        body = [*prefetches(node, depth, self.program, inner), *panel_prefetches(self.panels.get(path, []), inner),
                *self.block(node.body, path, inner)]
        if node.kind == "p" and self.outline:
            body = [self.nest_call(body, path, inner)]
        loop = [f"for (long {var} = 0; {var} < {node.size}; ++{var}) {{", *indented(body), "}"]
        if node.kind == "p" and any(self._streams(s) for s, _ in walk_scopes((node,))):
            # each thread fences its own streaming stores before the region ends
            yield from ["#pragma omp parallel", "{", _INDENT + "#pragma omp for schedule(static) nowait",
                        *indented(loop), _INDENT + "dojo_sfence();", "}"]
            return
        if node.kind == "p":
            yield "#pragma omp parallel for schedule(static)"
        yield from loop

    def nest_call(self, body: list[str], path: Path, env: Env) -> str:
        """`body`, the lines of the parallel loop at `path`, as a function of `nests`, and the call of it:
        its parameters are the loop variables in `env`, the kernel's buffers and the local ones declared
        outside the loop, all pointers `restrict` as the kernel's are."""
        loops = [var for var in env.values() if isinstance(var, str)]
        outer = [b for k in range(len(path)) for b in self.homes.get(path[:k], [])]
        params = [*(f"long {var}" for var in loops), *kernel_parameters(self.program),
                  *(f"{c_type(b.dtype)} *restrict {buffer_var(b.name)}" for b in outer)]
        args = [*loops, *(buffer_var(b.name) for b in (*parameters(self.program), *outer))]
        name = f"kernel_nest{len(self.nests)}"
        self.nests.append("\n".join([f"static void __attribute__((noinline)) {name}({', '.join(params)})", "{",
                                      *indented(body), "}"]))
        return f"{name}({', '.join(args)});"

    def _streams(self, scope: Scope) -> bool:
        """Whether `scope` is a `:v` scope storing a streamed buffer."""
        if scope.kind != "v" or len(scope.body) != 1 or not isinstance(scope.body[0], Op):
            return False
        return self.program.buffer_of[scope.body[0].target.array].name in self.streaming

    def braced(self, nodes: tuple[Node, ...], path: Path, env: Env) -> Iterator[str]:
        """One unrolled iteration; braces only when it declares local buffers."""
        lines = list(self.block(nodes, path, env))
        yield from braced(lines) if path in self.homes else lines


def indented(lines: Iterator[str] | list[str]) -> Iterator[str]:
    for line in lines:
        yield _INDENT + line


def braced(lines: list[str]) -> list[str]:
    return ["{", *indented(lines), "}"]


def _streaming(program: Program, target: Target | None, threshold: int | None = None) -> frozenset[str]:
    """Streaming stores on x86 targets only (None: no target, none), for
    outputs of at least `threshold` bytes (None: this machine's
    `streaming_threshold_bytes`)."""
    if target is None or not target.x86:
        return frozenset()
    return streamed(program, streaming_threshold_bytes() if threshold is None else threshold)


def kernel_function(program: Program, target: Target | None = None, threshold: int | None = None) -> str:
    """The parallel loops' functions, then `static void kernel(...) { ... }`; `threshold` as `generate_c`'s."""
    streaming = _streaming(program, target, threshold)
    emitter = _Emitter(program, streaming)
    body = list(indented([*emitter.heap_padding(), *emitter.block(program.body, (), {})]))
    if streaming:
        body.append(_INDENT + "dojo_sfence(); /* the streaming stores are done before the caller reads */")
    kernel = "\n".join([f"static void kernel({', '.join(kernel_parameters(program))})", "{", *body, "}"])
    return "\n\n".join([*emitter.nests, kernel])


def kernel_parameters(program: Program) -> list[str]:
    """The kernel function's parameters: a `restrict` pointer a buffer, `const` for the inputs'."""
    inputs = {program.buffer_of[name].name for name in program.inputs}
    return [f"{'const ' if b.name in inputs else ''}{c_type(b.dtype)} *restrict {buffer_var(b.name)}"
            for b in parameters(program)]


def node_code(program: Program, path: Path, target: Target | None = None) -> str:
    """The C of the node at `path` as it stands in the kernel function, with
    the loop variables of the scopes around it free (`:u` ones included)."""
    env = {depth: loop_var(depth) for depth in range(len(path) - 1)}
    emitter = _Emitter(program, _streaming(program, target), outline=False)
    return "\n".join(emitter.node(node_at(program.body, path), path, env))


def generate_c(program: Program, target: Target | None = None, threshold: int | None = None,
               with_main: bool = True) -> str:
    """The complete C source for `target` (None: code for any target, without
    streaming stores): includes, vector types and helpers that the code uses,
    the kernel function and the harness `main`. Outputs of at least
    `threshold` bytes may be streamed (None: `streaming_threshold_bytes()`).
    Without `with_main` the source ends with the kernel function: a unit that
    a library (libgen) wraps in an entry point of its own."""
    code = kernel_function(program, target, threshold)
    if with_main:
        code += "\n\n" + harness(program, parameters(program))
    vector_helpers = vector_helper_source(used_vector_helpers(code), target.vector_bytes if target else None)
    stream_helpers = stream_helper_source(used_stream_helpers(code))
    typedefs = vector_typedefs(used_vector_types(code + vector_helpers + stream_helpers))
    scalar_helpers = helper_source(used_helpers(code + vector_helpers))
    prelude = [f"/* kernel {program.name}, generated by PerfDojo's C backend */", "#define _POSIX_C_SOURCE 200809L",
               *(f"#include <{header}>" for header in _INCLUDES)]
    sections = ["\n".join(prelude), typedefs, scalar_helpers, vector_helpers, stream_helpers, code]
    return "\n\n".join(s for s in sections if s) + "\n"
