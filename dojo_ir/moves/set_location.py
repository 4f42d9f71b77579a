"""set_location: move a temporary buffer to another kind of memory.

    t f32 [...] heap      ->      t f32 [...] stack

`set_location(buffer=t, location=L)`, L one of heap, stack and shared other
than t's. Every value stays; what changes is where code generation allocates
t, and with it which iterations of a mapped scope share t (mapping.py): each
thread holds its own copy of a `stack` temporary used only inside a `:p :g :b
:w` scope, each GPU block its own copy of a `shared` one used only inside a
`:g` scope.

Legal when t is a temporary (inputs and outputs are the caller's memory) and
- stack: t stores at most 512 KiB (its stored elements times 4 bytes for
  f32 and i32, 8 for f64 and i64): the local memory CUDA gives a thread, and
  a sixteenth of the 8 MiB that glibc gives a thread's stack;
- shared: t stores at most 48 KiB and every access to it lies inside a `:b`
  scope (FORMAT.md);
- heap: no limit;
- a GPU scope that touches t and whose iterations would hold t in their own
  memory (`:g :b :w` for stack, `:g` for shared) holds every access to t: a
  thread cannot see another thread's stack nor the host's, a block cannot see
  another block's shared memory (as `map_gpu` asks);
- no two iterations of a `:p :g :b :w` scope come to touch one stored element
  of t, one writing, because they lose their own copies of t: a folded `D:K`
  temporary that each thread reuses on its stack cannot move to the heap (the
  race `parallelize_scope` and `map_gpu` rule out).
The move back to the old location is its inverse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..analysis import Analysis, Site
from ..paths import TreePath, iter_paths
from ..tree import LOCATIONS, Buffer, Program, Scope
from .base import BUFFER, Move, Param, Resolved, Targets
from .buffers import buffer_accesses, buffer_move, interface, temporaries, with_buffer
from .examples import FUSED_PAIR
from .mapping import GPU_KINDS, OWN_MEMORY

NAME = "set_location"
TITLE = "Move the buffer to another memory"
ARGS = (BUFFER, Param("location", "location", choices=LOCATIONS))
TARGETS = Targets(gpu_only=(("location", "shared"),))

CAPACITY = {"stack": 512 * 1024, "shared": 48 * 1024}  # bytes; the module docstring says why


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for location in LOCATIONS:
            if location != buffer.location:
                yield buffer_move(NAME, buffer, location=location)


def _holds_own_copy(path: TreePath, kind: str, location: str, sites: list[Site]) -> bool:
    """Whether each iteration of the scope at `path` holds its own copy of a
    temporary in `location` that the operations at `sites` access."""
    return location in OWN_MEMORY[kind] and all(s.path[: len(path)] == path for s in sites)


def _races(a: Analysis, path: TreePath, buffer: Buffer, own_copy: bool) -> bool:
    """Could two iterations of the scope at `path` touch one element of
    `buffer` (stored slot, or logical element with `own_copy`), one writing?"""
    arrays = set(buffer.array_names)
    inside = [t for t in a.touches_in(path) if t.access.array in arrays]
    return a.depends(inside, inside, ("=",) * (len(path) - 1) + ("<",), reorderable_reductions=False,
                     private=frozenset({buffer.name}) if own_copy else frozenset())


def _concurrency_problem(a: Analysis, buffer: Buffer, location: str) -> str | None:
    sites = [s for s, _ in buffer_accesses(a, buffer)]
    arrays = set(buffer.array_names)
    for path, node in iter_paths(a.program.body):
        if not isinstance(node, Scope) or node.kind not in OWN_MEMORY:
            continue
        if not any(t.access.array in arrays for t in a.touches_in(path)):
            continue
        old = _holds_own_copy(path, node.kind, buffer.location, sites)
        new = _holds_own_copy(path, node.kind, location, sites)
        if node.kind in GPU_KINDS and location in OWN_MEMORY[node.kind] and not new:
            return (f"each iteration of the `{node.token}` scope would hold `{buffer.name}` in its own `{location}` "
                    "memory, but some access to it lies outside that scope")
        if old and not new and _races(a, path, buffer, False) and not _races(a, path, buffer, True):
            return (f"the iterations of the `{node.token}` scope would share one copy of `{buffer.name}` and touch "
                    "one stored element, one writing")
    return None


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    location = at.arg("location")
    reason = interface(a.program, buffer)
    if reason:
        return reason
    if location == buffer.location:
        return f"`{buffer.name}` is in `{location}` memory already"
    size = buffer.storage_bytes
    if size > CAPACITY.get(location, size):
        return f"`{buffer.name}` stores {size} bytes, and `{location}` memory holds at most {CAPACITY[location]}"
    if location == "shared":
        for site, access in buffer_accesses(a, buffer):
            if not any(s.kind == "b" for s in site.chain):
                return (f"the access `{access.array}` in operation `{site.label}` is not inside a `:b` scope, "
                        "and `shared` memory belongs to a GPU block")
    return _concurrency_problem(a, buffer, location)


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    return with_buffer(a.program, replace(buffer, location=str(at.arg("location"))))


EXAMPLES = [
    (
        FUSED_PAIR,
        "set_location(buffer=t, location=stack)",
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] stack

4 t[{0}] = exp(x[{0}])
| y[{0}] = t[{0}] + 1
""",
    ),
    (
        # Every access is inside the block scope; each block holds its own row of t.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4, 8] heap

4:g 8:b t[{0},{1}] = exp(x[{0},{1}])
|   |   y[{0},{1}] = t[{0},{1}] + 1
""",
        "set_location(buffer=t, location=shared)",
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4, 8] shared

4:g 8:b t[{0},{1}] = exp(x[{0},{1}])
|   |   y[{0},{1}] = t[{0},{1}] + 1
""",
    ),
    (
        # Stored whole, t gives each thread elements of its own on the heap too.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] stack

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
        "set_location(buffer=t, location=heap)",
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # 400 * 400 * 4 bytes = 640000 bytes, more than the 512 KiB of a stack.
        """kernel k(x) -> y

x f32 [400, 400] heap
y f32 [400, 400] heap
t f32 [400, 400] heap

400 400 t[{0},{1}] = exp(x[{0},{1}])
400 400 y[{0},{1}] = t[{0},{1}] + 1
""",
        "set_location(buffer=t, location=stack)",
    ),
    (
        # Shared memory exists only inside a GPU block.
        FUSED_PAIR,
        "set_location(buffer=t, location=shared)",
    ),
    (
        # Each thread reuses the one stored element of its own stack copy of t;
        # on the heap, the threads would all write the same element.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4:1] stack

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
        "set_location(buffer=t, location=heap)",
    ),
    (
        # A GPU thread cannot read a stack that the host wrote.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4, 8] heap

4 8 t[{0},{1}] = exp(x[{0},{1}])
4:g 8:b y[{0},{1}] = t[{0},{1}] + 1
""",
        "set_location(buffer=t, location=stack)",
    ),
    (
        # y is the kernel's output, in the caller's memory.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap

4 y[{0}] = exp(x[{0}])
""",
        "set_location(buffer=y, location=stack)",
    ),
]
