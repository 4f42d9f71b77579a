"""The code inside a CUDA/HIP program: sequential statements, and each kernel,
an outermost `:g` scope, as a `__global__` function.

    4:g m[{0}] = -inf                    if (thread == 0) {
    |   8 m[{0}] max= x[{0},{1}]             b_m[i0] = -((float)INFINITY);
    |   8:b y[{0},{1}] = x[{0},{1}] - m[{0}]  for (long i1 = 0; i1 < 8; ++i1) ...
                                         }
                                         __syncthreads();
                                         if (thread < 8) {
                                             const long i1 = thread;
                                             b_y[i0*8 + i1] = b_x[i0*8 + i1] - b_m[i0];
                                         }

Grid. The outermost `:g` scope and the `:g` scopes below it that are each the
only child of the one before are the grid, one block per combination of their
iterations: `blockIdx.x` holds them as one linear index, the innermost fastest
(so no grid dimension's own limit applies). Any other `:g` scope runs as a loop
in every block: blocks cannot wait for each other, so a `:g` scope under a loop
of the kernel, or next to other nodes, cannot be grid.

Block. Every thread of the block runs the kernel's loops (every trip count is a
constant, so all threads take the same path and all reach each barrier).
`:b` and `:w` scopes are not loops: a maximal subtree below them that contains
no further `:b`/`:w` scope (a "phase") is run by the threads whose linear index
`threadIdx.x` is below the product of the `:b`/`:w` sizes around it, which give
each such thread the iteration variables of those scopes as digits of its
index, the innermost fastest (so a `:w` scope, always innermost, is a warp's
consecutive lanes). A phase outside every `:b`/`:w` is run by thread 0 alone.
The block holds the most threads any phase needs, padded to the warp.

Barriers. `__syncthreads()` stands before a phase or loop that touches a buffer
(not a `stack` one: each thread has its own) that a phase since the last
barrier touched, one of the two writing, unless thread 0 alone ran both, or
both phases put iterations on threads alike (`:b`/`:w` scopes of the same sizes
at the same depths) and only iterations that one thread runs touch one element;
and at the end of a loop's body when two of its iterations may touch one
element of such a buffer, one writing. The element questions go to the moves'
dependence analysis, where a reduction counts: concurrent updates race. A
thread scope's iterations never need a barrier: `map_gpu` only maps scopes
whose iterations are independent.

Memory. A `stack` buffer is a local array of each thread, a `shared` one a
`__shared__` array of the block, each declared at the start of the innermost
scope that holds all its accesses, as in the C backend. `homes` checks what
that relies on, which the moves guarantee and a hand-written file may break.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from math import prod

from dojo_ir.analysis import Analysis
from dojo_ir.dependence import Touch
from dojo_ir.tree import Buffer, Node, Op, Program, Scope, walk_op_paths

from .c import braced, common_prefix, indented, parameters
from .cexpr import Env, Printer, buffer_var, c_type, loop_var, statement, storage_size

THREAD_KINDS = ("b", "w")
MAX_BLOCK_THREADS = 1024
MAX_GRID_BLOCKS = 2**31 - 1  # blockIdx.x
BARRIER = "__syncthreads();"

Path = tuple[int, ...]
Homes = dict[Path, list[Buffer]]
Threads = tuple[tuple[int, Scope], ...]  # the `:b`/`:w` scopes around a node, outermost first, with their depths
# One buffer that some code touches: (buffer name, written, by thread 0 alone).
Use = tuple[str, bool, bool]


def is_grid(node: Node) -> bool:
    return isinstance(node, Scope) and node.kind == "g"


def has_threads(node: Node) -> bool:
    """Whether `node` is or holds a `:b`/`:w` scope."""
    return isinstance(node, Scope) and (node.kind in THREAD_KINDS or any(has_threads(n) for n in node.body))


def digits(depths: list[int], sizes: list[int], index: str) -> list[str]:
    """`const long i{d} = ...;` for each scope, its variable a digit of the
    linear `index` (below the product of `sizes`), the innermost fastest."""
    lines = []
    stride = 1
    for n, (depth, size) in enumerate(reversed(list(zip(depths, sizes, strict=True)))):
        value = index if stride == 1 else f"{index} / {stride}"
        if size == 1:
            value = "0"
        elif n < len(sizes) - 1:  # the outermost digit needs no `%`: index < product
            value = f"{value} % {size}"
        lines.append(f"const long {loop_var(depth)} = {value};")
        stride *= size
    return lines[::-1]


def pointers(program: Program, buffers: Iterable[Buffer]) -> list[str]:
    """The parameters passing `buffers`, the inputs' read-only. Each buffer has
    its own storage, hence `__restrict__`."""
    inputs = {program.buffer_of[name].name for name in program.inputs}
    return [f"{'const ' if b.name in inputs else ''}{c_type(b.dtype)} *__restrict__ {buffer_var(b.name)}"
            for b in buffers]


# -- where local buffers live ------------------------------------------------------


def homes(program: Program) -> Homes:
    """Where each `stack` or `shared` buffer is declared: the path of the
    innermost scope that holds all its accesses, () for the host function.

    Raises ValueError when the GPU mapping would lose a value: a buffer used
    both on the host and in a kernel, or in two kernels; a `stack` buffer used
    under different `:b`/`:w` scopes, whose iterations other threads may run."""
    paths: dict[str, Path] = {}
    kernels: dict[str, set[Path]] = {}
    threads: dict[str, set[tuple[Path, ...]]] = {}
    for path, op, chain in walk_op_paths(program.body):
        grid = next((d for d, s in enumerate(chain) if s.kind == "g"), None)
        kernel = () if grid is None else path[: grid + 1]
        around = tuple(path[: d + 1] for d, s in enumerate(chain) if s.kind in THREAD_KINDS and grid is not None)
        for access in (op.target, *op.reads):
            name = program.buffer_of[access.array].name
            paths[name] = common_prefix(paths.get(name, path[:-1]), path[:-1])
            kernels.setdefault(name, set()).add(kernel)
            threads.setdefault(name, set()).add(around)
    found: Homes = {}
    for buffer in program.buffers:
        if buffer.location == "heap" or buffer.name not in paths:
            continue
        if len(kernels[buffer.name]) > 1:
            raise ValueError(f"`{buffer.name}` is in `{buffer.location}` memory but used by the host and a GPU kernel, "
                             "or by two kernels, which cannot share it; move it to the heap")
        if buffer.location == "stack" and len(threads[buffer.name]) > 1:
            raise ValueError(f"`{buffer.name}` is in `stack` memory, which each GPU thread holds for itself, but is "
                             "used under different `:b`/`:w` scopes; move it to `shared` memory or the heap")
        found.setdefault(paths[buffer.name], []).append(buffer)
    return found


# -- sequential code ---------------------------------------------------------------


class Sequential:
    """Writes nodes as sequential C++: each scope a loop `i{depth}`, `:u`
    written out once per iteration, every other kind a plain loop (`:v` and
    `:p` are the C backend's business). `device` code declares `shared`
    buffers `__shared__`, one per block."""

    def __init__(self, program: Program, homes: Homes, device: bool):
        self.program = program
        self.homes = homes
        self.device = device

    def declarations(self, path: Path) -> list[str]:
        return [f"{'__shared__ ' if self.device and b.location == 'shared' else ''}{c_type(b.dtype)} "
                f"{buffer_var(b.name)}[{storage_size(b)}];" for b in self.homes.get(path, [])]

    def block(self, nodes: tuple[Node, ...], path: Path, env: Env) -> Iterator[str]:
        yield from self.declarations(path)
        for i, node in enumerate(nodes):
            yield from self.node(node, path + (i,), env)

    def node(self, node: Node, path: Path, env: Env) -> Iterator[str]:
        if isinstance(node, Op):
            yield statement(Printer(self.program, env), node.target, node.assign, node.value)
            return
        depth = len(path) - 1
        if node.kind == "u":
            for k in range(node.size):
                lines = list(self.block(node.body, path, {**env, depth: k}))
                yield from braced(lines) if path in self.homes else lines
            return
        var = loop_var(depth)
        yield f"for (long {var} = 0; {var} < {node.size}; ++{var}) {{"
        yield from indented(self.block(node.body, path, {**env, depth: var}))
        yield "}"


# -- one kernel --------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """How the host launches the kernel at `path`: `name<<<blocks, threads>>>(buffers..., i0, ...)`,
    passing the loop variables of the `host_depth` host scopes around it."""

    name: str
    path: Path
    blocks: int
    threads: int
    buffers: tuple[Buffer, ...]
    host_depth: int


def grid(root: Scope, path: Path) -> list[tuple[Path, Scope]]:
    """The grid scopes of the kernel at `path`: `root` and each `:g` scope that
    is the only child of the previous one."""
    chain = [(path, root)]
    while len(chain[-1][1].body) == 1 and is_grid(chain[-1][1].body[0]):
        inner = chain[-1][1].body[0]
        assert isinstance(inner, Scope)
        chain.append((chain[-1][0] + (0,), inner))
    return chain


def _most_threads(node: Node, threads: int) -> int:
    if isinstance(node, Op):
        return threads
    inner = threads * node.size if node.kind in THREAD_KINDS else threads
    return max(_most_threads(n, inner) for n in node.body)


def plan(program: Program, root: Scope, path: Path, name: str, warp: int) -> Kernel:
    """The launch of the kernel at `path`. Raises ValueError if no GPU could run it."""
    blocks = prod(s.size for _, s in grid(root, path))
    if blocks > MAX_GRID_BLOCKS:
        raise ValueError(f"the `:g` scopes of {name} make {blocks} blocks; at most {MAX_GRID_BLOCKS}")
    needed = _most_threads(root, 1)
    if needed > MAX_BLOCK_THREADS:
        raise ValueError(f"the `:b`/`:w` scopes of {name} need {needed} threads per block; at most {MAX_BLOCK_THREADS}")
    used = {program.buffer_of[a.array].name for _, op, _ in walk_op_paths((root,)) for a in (op.target, *op.reads)}
    buffers = tuple(b for b in parameters(program) if b.name in used)
    return Kernel(name, path, blocks, -(-needed // warp) * warp, buffers, len(path) - 1)


@dataclass(frozen=True)
class _Segment:
    """Code that ran since the last barrier: the node at `path`, by the threads
    that the `:b`/`:w` scopes `layout` ((depth, size), outermost first) give
    an iteration. Two segments with one layout run an iteration on one thread."""

    path: Path
    layout: tuple[tuple[int, int], ...]
    uses: frozenset[Use]


class KernelWriter:
    """Writes one `__global__` function (module docstring)."""

    def __init__(self, program: Program, analysis: Analysis, homes: Homes, kernel: Kernel, root: Scope):
        self.program = program
        self.analysis = analysis
        self.homes = homes
        self.kernel = kernel
        self.root = root
        self.sequential = Sequential(program, homes, device=True)
        self.pending: list[_Segment] = []  # the phases since the last barrier
        self.barriers = 0

    def source(self) -> str:
        k = self.kernel
        params = pointers(self.program, k.buffers) + [f"const long {loop_var(d)}" for d in range(k.host_depth)]
        env = {d: loop_var(d) for d in range(k.host_depth)}
        scopes = grid(self.root, k.path)
        env |= {len(p) - 1: loop_var(len(p) - 1) for p, _ in scopes}
        inner_path, inner = scopes[-1]
        lines = ["const unsigned block = blockIdx.x;", "const unsigned thread = threadIdx.x;",
                 *digits([len(p) - 1 for p, _ in scopes], [s.size for _, s in scopes], "block"),
                 *self.uniform(inner.body, inner_path, env, ())]
        head = f"__global__ void __launch_bounds__({k.threads}) {k.name}({', '.join(params)})"
        return "\n".join([head, "{", *indented(lines), "}"])

    def uniform(self, nodes: tuple[Node, ...], path: Path, env: Env, threads: Threads) -> list[str]:
        """The lines of a body that every thread of the block runs."""
        lines = self.sequential.declarations(path)
        layout = tuple((d, s.size) for d, s in threads)
        phase: list[str] = []
        for i, node in enumerate(nodes):
            child = path + (i,)
            if not has_threads(node):
                segment = _Segment(child, layout, self.uses(node, prod(s.size for _, s in threads)))
                if self._must_wait(segment, phase=True):
                    lines += self.phase(phase, threads) + self.barrier()
                    phase = []
                phase += self.sequential.node(node, child, env)
                self.pending.append(segment)
                continue
            lines += self.phase(phase, threads)
            phase = []
            assert isinstance(node, Scope)
            depth = len(child) - 1
            inner_env = {**env, depth: loop_var(depth)}
            if node.kind in THREAD_KINDS:
                body = self.uniform(node.body, child, inner_env, threads + ((depth, node),))
                lines += braced(body) if child in self.homes else body
            else:
                lines += self.loop(node, child, inner_env, threads)
        return lines + self.phase(phase, threads)

    def loop(self, scope: Scope, path: Path, env: Env, threads: Threads) -> list[str]:
        """A loop that every thread runs. None of its iterations may race with
        what ran since the last barrier, nor with each other."""
        whole = _Segment(path, (), self.uses(scope, prod(s.size for _, s in threads)))
        before = self.barrier() if self._must_wait(whole, phase=False) else []
        entry, self.pending = self.pending, []
        barriers = self.barriers
        body = self.uniform(scope.body, path, env, threads)
        if self.pending and self._carries(path):
            body += self.barrier()
        if self.barriers == barriers:
            # no barrier inside: the whole loop may run alongside what ran before it
            self.pending = entry + self.pending
        var = loop_var(len(path) - 1)
        return [*before, f"for (long {var} = 0; {var} < {scope.size}; ++{var}) {{", *indented(body), "}"]

    def phase(self, lines: list[str], threads: Threads) -> list[str]:
        """`lines`, run by the threads that the scopes `threads` give an iteration."""
        if not lines:
            return []
        count = prod(s.size for _, s in threads)
        condition = "thread == 0" if count == 1 else f"thread < {count}"
        bindings = digits([d for d, _ in threads], [s.size for _, s in threads], "thread")
        return [f"if ({condition}) {{", *indented(bindings + lines), "}"]

    def barrier(self) -> list[str]:
        self.pending = []
        self.barriers += 1
        return [BARRIER]

    def uses(self, node: Node, threads: int) -> frozenset[Use]:
        """The buffers that `node` touches, but `stack` ones, when run by
        `threads` threads (times the `:b`/`:w` sizes inside it)."""
        if isinstance(node, Scope):
            inner = threads * node.size if node.kind in THREAD_KINDS else threads
            return frozenset().union(*(self.uses(n, inner) for n in node.body))
        found = set()
        for access, written in ((node.target, True), *((a, False) for a in node.reads)):
            buffer = self.program.buffer_of[access.array]
            if buffer.location != "stack":
                found.add((buffer.name, written, threads == 1))
        return frozenset(found)

    # -- dependences ---------------------------------------------------------------

    def _must_wait(self, new: _Segment, phase: bool) -> bool:
        """Must a barrier separate what ran since the last one from `new`? Not
        if they share no buffer that one of them writes (or thread 0 alone ran
        both), nor if `new` is a phase with the layout of the old one and only
        iterations run by one thread touch one element."""
        for old in self.pending:
            if not _conflict(new.uses, old.uses):
                continue
            if phase and old.layout == new.layout and not self._across_threads(old.path, new.path, new.layout):
                continue
            return True
        return False

    def _across_threads(self, first: Path, second: Path, layout: tuple[tuple[int, int], ...]) -> bool:
        """Could the nodes at `first` and `second`, which the scopes at the
        depths of `layout` put on threads alike, touch one element from two
        threads, one writing? Within one iteration of their common scopes
        (a barrier or the grid separates the others), and any iterations of
        the scopes they do not share."""
        threads = [d for d, _ in layout]
        deepest = max(threads) + 1
        around = ["=" if first[: d + 1] == second[: d + 1] else "*" for d in range(deepest)]
        a, b = self._touches(first), self._touches(second)
        # the thread variables differ: one of them is less, or greater, in the first
        for j in threads:
            for order in "<>":
                directions = tuple(order if d == j else "*" if d in threads else around[d] for d in range(deepest))
                if self.analysis.depends(a, b, directions, reorderable_reductions=False):
                    return True
        return False

    def _carries(self, path: Path) -> bool:
        """Could two iterations of the scope at `path` touch one element of a
        buffer that threads share, one of them writing?"""
        inside = self._touches(path)
        return self.analysis.depends(inside, inside, ("=",) * (len(path) - 1) + ("<",), reorderable_reductions=False)

    def _touches(self, path: Path) -> list[Touch]:
        """The accesses inside the node at `path` to buffers that threads
        share: each thread has its own `stack` buffers."""
        buffer_of = self.program.buffer_of
        return [t for t in self.analysis.touches_in(path) if buffer_of[t.access.array].location != "stack"]


def _conflict(a: frozenset[Use], b: frozenset[Use]) -> bool:
    """Do `a` and `b` share a buffer that one of them writes, not both by
    thread 0 alone?"""
    return any(x == y and (wx or wy) and not (sx and sy) for x, wx, sx in a for y, wy, sy in b)
