"""map_gpu: run the iterations of a sequential scope on the GPU, as the blocks
of a grid (`g`), the threads of a block (`b`) or the lanes of a warp (`w`).

    N M  A      ->      N:g M:b  A      (two moves)

`map_gpu(op=X, depth=d, kind=k)` marks the sequential scope at depth d around
operation X `:k`, k one of g, b, w. Legal when
- no two iterations touch the same element with at least one of them writing
  (no loop-carried dependence), strictly as for `parallelize_scope`: a
  reduction carried by the scope is refused. Temporaries that each iteration
  holds for itself are compared by logical element: `stack` (per thread) and,
  for `g`, `shared` (per block) buffers used only inside the scope;
- every `stack` buffer touched inside the scope (and, for `g`, every `shared`
  one) is such a temporary: a thread cannot see another thread's stack, nor the
  host's, and a block cannot see another block's shared memory;
- the nesting rules of `mapping.py` still hold: `g` inside sequential and `g`
  scopes only, at most 3 on a chain; `b` under a `g` and not inside `:p :u :v
  :w`, at most 3 on a chain; `w` under a `b` and not inside `:p :u :v :w`, at
  most 32 iterations; at most 1024 threads (`b` and `w` sizes multiplied) on a
  chain; no `:p` around or inside GPU scopes.
The inverse is `unmap_scope`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..paths import TreePath, iter_paths
from ..tree import Program, Scope
from .base import DEPTH, GPU_ONLY, OP, Move, Param, Resolved
from .mapping import GPU_KINDS, OWN_MEMORY, RACE, nesting_problem, private_buffers, races, with_kind

NAME = "map_gpu"
TITLE = "Map the scope onto the GPU"
ARGS = (OP, DEPTH, Param("kind", "kind", choices=GPU_KINDS))
TARGETS = GPU_ONLY

_HELD_BY = {"stack": "each GPU thread", "shared": "each GPU block"}


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind:
            label, depth = a.locate(path)
            for kind in GPU_KINDS:
                yield Move(NAME, (("op", label), ("depth", depth), ("kind", kind)), a.first_site(path).line)


def _unreachable(a: Analysis, path: TreePath, locations: tuple[str, ...]) -> str | None:
    """A buffer in per-thread or per-block memory that the scope touches but
    that is not a temporary held by each iteration, or None."""
    private = private_buffers(a, path, locations)
    for touch in a.touches_in(path):
        buffer = a.program.buffer_of[touch.access.array]
        if buffer.location in locations and buffer.name not in private:
            return (f"`{buffer.name}` is in `{buffer.location}` memory, which {_HELD_BY[buffer.location]} holds "
                    "for itself, so it must be a temporary used only inside this scope")
    return None


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    kind = at.arg("kind")
    if scope.kind:
        return f"the scope is already mapped (`{scope.token}`); only a sequential scope can be mapped"
    problem = nesting_problem(a, path, kind) or _unreachable(a, path, OWN_MEMORY[kind])
    if problem:
        return problem
    return RACE if races(a, path, OWN_MEMORY[kind]) else None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    return with_kind(a, path, str(at.arg("kind")))


EXAMPLES = [
    (
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2 8 4 z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
        "map_gpu(op=z, depth=0, kind=g)",
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8 4 z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
    ),
    (
        # The reduction runs along the sequential scope inside the block:
        # each thread owns one `s[{0},{1}]`.
        """kernel k(x) -> s

x f32 [4, 8, 16] heap
s f32 [4, 8] heap

4:g 8 s[{0},{1}] = 0
|   | 16 s[{0},{1}] += x[{0},{1},{2}]
""",
        "map_gpu(op=s#1, depth=1, kind=b)",
        """kernel k(x) -> s

x f32 [4, 8, 16] heap
s f32 [4, 8] heap

4:g 8:b s[{0},{1}] = 0
|   |   16 s[{0},{1}] += x[{0},{1},{2}]
""",
    ),
    (
        # A second grid dimension. `t` keeps one row (`4:1, 2:1`), which each
        # block holds in its own shared memory, so the rows do not collide.
        """kernel k(x) -> y

x f32 [4, 2, 8] heap
y f32 [4, 2, 8] heap
t f32 [4:1, 2:1, 8] shared

4 2:g 8:b t[{0},{1},{2}] = exp(x[{0},{1},{2}])
| |   8:b y[{0},{1},{2}] = t[{0},{1},{2}] * 2
""",
        "map_gpu(op=t, depth=0, kind=g)",
        """kernel k(x) -> y

x f32 [4, 2, 8] heap
y f32 [4, 2, 8] heap
t f32 [4:1, 2:1, 8] shared

4:g 2:g 8:b t[{0},{1},{2}] = exp(x[{0},{1},{2}])
|   |   8:b y[{0},{1},{2}] = t[{0},{1},{2}] * 2
""",
    ),
    (
        """kernel k(x) -> y

x f32 [2, 4, 32] heap
y f32 [2, 4, 32] heap

2:g 4:b 32 y[{0},{1},{2}] = x[{0},{1},{2}] + 1
""",
        "map_gpu(op=y, depth=2, kind=w)",
        """kernel k(x) -> y

x f32 [2, 4, 32] heap
y f32 [2, 4, 32] heap

2:g 4:b 32:w y[{0},{1},{2}] = x[{0},{1},{2}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # A block needs a grid scope above it.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4 8 y[{0},{1}] = x[{0},{1}] * 2
""",
        "map_gpu(op=y, depth=1, kind=b)",
    ),
    (
        # The blocks would race on the accumulator `s[]`.
        """kernel k(x) -> s

x f32 [8] heap
s f32 [] heap

s[] = 0
8 s[] += x[{0}]
""",
        "map_gpu(op=s#2, depth=0, kind=g)",
    ),
    (
        # A warp has 32 lanes, not 64.
        """kernel k(x) -> y

x f32 [2, 4, 64] heap
y f32 [2, 4, 64] heap

2:g 4:b 64 y[{0},{1},{2}] = x[{0},{1},{2}] + 1
""",
        "map_gpu(op=y, depth=2, kind=w)",
    ),
    (
        # `t` lives on the stack but is read outside the scope, where the
        # GPU thread that wrote it is gone.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4, 8] stack

4 8 t[{0},{1}] = exp(x[{0},{1}])
4 8 y[{0},{1}] = t[{0},{1}] * 2
""",
        "map_gpu(op=t, depth=0, kind=g)",
    ),
    (
        # No GPU scope inside a `:p`.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4:p 8 y[{0},{1}] = x[{0},{1}] * 2
""",
        "map_gpu(op=y, depth=1, kind=g)",
    ),
]
