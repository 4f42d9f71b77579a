"""What the moves that set a scope's kind share: the nesting rules for mapped
scopes, and which buffers each iteration of a parallel scope holds privately.

Nesting rules, on every chain of scopes from the root to an operation:

- `:p` is not inside a `:p` or a GPU scope (`:g :b :w`): CPU threads are not
  nested, nor mixed with a GPU launch.
- `:g` is inside sequential and `:g` scopes only, at most 3 on a chain (a grid
  has three dimensions).
- `:b` has a `:g` above it and no `:p :u :v :w`, at most 3 on a chain.
- `:w` has a `:b` above it and no `:p :u :v :w`, and at most 32 iterations
  (the lanes of a warp).
- The `:b` and `:w` sizes on a chain multiply to at most 1024 threads per block.
- `:v` is not inside a `:v`.
- Every access to a `shared` buffer lies inside a `:b` (FORMAT.md).

A move may not break a rule that the program keeps. Rules that a hand-written
file already breaks do not block a move, so that `unmap_scope` can repair it.

Private buffers: code generation gives each iteration of a parallel scope its
own copy of a temporary in per-thread memory (`stack`; and, per block of a grid
scope, `shared`) that is used only inside the scope, so such a buffer is
compared by logical element rather than by stored slot.
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis import Analysis
from ..paths import TreePath, node_at, splice, with_body
from ..tree import Op, Program, Scope

GPU_KINDS = ("g", "b", "w")
# The locations of the temporaries that code generation gives each iteration
# of a scope of this kind its own copy of, when they are used only inside it.
OWN_MEMORY = {"p": ("stack",), "g": ("stack", "shared"), "b": ("stack",), "w": ("stack",)}
_FORBIDDEN_ABOVE = {"p": "pgbw", "g": "pvubw", "b": "pvuw", "w": "pvuw", "v": "v", "u": ""}
_NEEDED_ABOVE = {"b": "g", "w": "b"}
_MOST_ON_A_CHAIN = {"g": 3, "b": 3}
_WARP_LANES = 32
_BLOCK_THREADS = 1024


def _problems(chain: tuple[Scope, ...], op: Op, program: Program) -> list[str]:
    """Every nesting rule broken on the chain around `op`, each naming the scope
    (by depth) that breaks it, so that the same break reads the same before and
    after a move."""
    problems = []
    threads = 1
    for depth, scope in enumerate(chain):
        kind = scope.kind
        above = "".join(s.kind for s in chain[:depth])
        where = f"the `:{kind}` scope at depth {depth}"
        bad = sorted(set(above) & set(_FORBIDDEN_ABOVE.get(kind, "")))
        if bad:
            problems.append(f"{where} would be inside a `:{bad[0]}` scope")
        needed = _NEEDED_ABOVE.get(kind)
        if needed and needed not in above:
            problems.append(f"{where} would have no `:{needed}` scope above it")
        most = _MOST_ON_A_CHAIN.get(kind)
        if most and above.count(kind) >= most:
            problems.append(f"{where} would be `:{kind}` number {above.count(kind) + 1} on its chain; at most {most}")
        if kind == "w" and scope.size > _WARP_LANES:
            problems.append(f"{where} would have {scope.size} iterations; a warp has {_WARP_LANES} lanes")
        if kind in ("b", "w"):
            threads *= scope.size
            if threads > _BLOCK_THREADS:
                problems.append(f"{where} would make {threads} threads per block; at most {_BLOCK_THREADS}")
    kinds = {s.kind for s in chain}
    for array in dict.fromkeys((op.target.array, *(r.array for r in op.reads))):
        if program.buffer_of[array].location == "shared" and "b" not in kinds:
            problems.append(f"`{array}` is in `shared` memory, so every access to it must lie inside a `:b` scope")
    return problems


def nesting_problem(a: Analysis, path: TreePath, kind: str) -> str | None:
    """The first nesting rule that giving the scope at `path` the kind `kind`
    ("" for sequential) would break and the program does not break already."""
    depth = len(path) - 1
    for site in a.sites:
        if site.path[: len(path)] != path:
            continue
        chain = site.chain
        changed = chain[:depth] + (replace(chain[depth], kind=kind),) + chain[depth + 1:]
        before = _problems(chain, site.op, a.program)
        new = [p for p in _problems(changed, site.op, a.program) if p not in before]
        if new:
            return f"{new[0]} (on the chain around `{site.label}`)"
    return None


def private_buffers(a: Analysis, path: TreePath, locations: tuple[str, ...]) -> frozenset[str]:
    """The temporary buffers in `locations` whose every access lies inside the
    node at `path`: each iteration of that scope gets its own copy."""
    outside = set()
    for site in a.sites:
        if site.path[: len(path)] != path:
            outside.update((site.op.target.array, *(r.array for r in site.op.reads)))
    io = set(a.program.inputs) | set(a.program.outputs)
    return frozenset(b.name for b in a.program.buffers
                     if b.location in locations and not (set(b.array_names) & (io | outside)))


def races(a: Analysis, path: TreePath, locations: tuple[str, ...]) -> bool:
    """Could two different iterations of the scope at `path` touch one element,
    at least one writing, if they ran at once? Updates of one reduction count:
    run at once, they would race on the accumulator. Private buffers (see
    `private_buffers`) are compared by logical element."""
    inside = a.touches_in(path)
    # Both lists are the same, so every pair is also tried the other way
    # round: `<` covers `>` too.
    directions = ("=",) * (len(path) - 1) + ("<",)
    return a.depends(inside, inside, directions, reorderable_reductions=False,
                     private=private_buffers(a, path, locations))


RACE = ("two iterations touch the same element, one writing (a loop-carried dependence, or a reduction "
        "that this scope carries), so they cannot run at once")


def with_kind(a: Analysis, path: TreePath, kind: str) -> Program:
    """The program with the scope at `path` given the kind `kind`."""
    scope = node_at(a.program.body, path)
    return with_body(a.program, splice(a.program.body, path, (replace(scope, kind=kind),)))
