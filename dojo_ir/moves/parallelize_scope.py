"""parallelize_scope: run the iterations of a sequential scope on CPU threads.

    N  A      ->      N:p  A

`parallelize_scope(op=X, depth=d)` marks the sequential scope at depth d
around operation X `:p`. Legal when
- no two iterations touch the same element with at least one of them writing
  (no loop-carried dependence). The test is strict: updates of one reduction
  count as well, so a scope that a reduction runs along (`s[] += x[{0}]`
  along `{0}`) is refused; its threads would race on the accumulator.
  Temporaries on the `stack` used only inside the scope are compared by
  logical element, as each thread gets its own copy of them;
- the nesting rules of `mapping.py` still hold: no `:p` inside another `:p`
  or a GPU scope, and no `:p` or GPU scope inside it.
The inverse is `unmap_scope`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..analysis import Analysis
from ..paths import iter_paths
from ..tree import Program, Scope
from .base import CPU_ONLY, DEPTH, OP, Move, Resolved
from .mapping import OWN_MEMORY, RACE, nesting_problem, races, with_kind

NAME = "parallelize_scope"
TITLE = "Run the iterations on CPU threads"
ARGS = (OP, DEPTH)
TARGETS = CPU_ONLY


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind:
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    if scope.kind:
        return f"the scope is already mapped (`{scope.token}`); only a sequential scope can be parallelized"
    problem = nesting_problem(a, path, "p")
    if problem:
        return problem
    return RACE if races(a, path, OWN_MEMORY["p"]) else None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    return with_kind(a, path, "p")


EXAMPLES = [
    (
        """kernel k(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap

3 5 c[{0},{1}] = 0
| | 4 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""",
        "parallelize_scope(op=c#1, depth=0)",
        """kernel k(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap

3:p 5 c[{0},{1}] = 0
|   | 4 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""",
    ),
    (
        # `t` keeps one row (`4:1`), which every iteration overwrites; each
        # thread gets its own copy of it, so the rows do not collide.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8] stack

4 8 t[{0},{1}] = exp(x[{0},{1}])
| 8 y[{0},{1}] = t[{0},{1}] * 2
""",
        "parallelize_scope(op=t, depth=0)",
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8] stack

4:p 8 t[{0},{1}] = exp(x[{0},{1}])
|   8 y[{0},{1}] = t[{0},{1}] * 2
""",
    ),
]

NOT_APPLICABLE = [
    (
        # Every iteration of the inner scope updates `s[{0}]`: a reduction
        # carried by the scope, whose threads would race.
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [4] heap

4 s[{0}] = 0
4 8 s[{0}] += x[{0},{1}]
""",
        "parallelize_scope(op=s#2, depth=1)",
    ),
    (
        # `t` keeps one row (`4:1`) on the heap, where all threads share it:
        # their rows would collide.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4:1, 8] heap

4 8 t[{0},{1}] = exp(x[{0},{1}])
| 8 y[{0},{1}] = t[{0},{1}] * 2
""",
        "parallelize_scope(op=t, depth=0)",
    ),
    (
        # The inner scope is already `:p`; threads do not nest.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4 8:p y[{0},{1}] = x[{0},{1}] * 2
""",
        "parallelize_scope(op=y, depth=0)",
    ),
]
