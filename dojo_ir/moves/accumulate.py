"""accumulate: keep a reduction's partial result in a register-sized temporary.

    N  T[i] op= V              N  ACC[..] = T[i]
                       ->      |  M  ACC[..] op= V
                               |  T[i] = ACC[..]

`accumulate(op=X, depth=d)` names a reduction X (`+= *= max= min=`) whose
target T[i] uses no scope at depth d or deeper, and the scope S at depth d
around it. S is replaced by three nodes: ACC loaded from the target, S with X
updating ACC instead, and the target stored back. The arithmetic happens in
the same order on the same dtype, so results are bitwise identical.

ACC is a new `stack` buffer named `<array>_acc` (`_acc2`, ... if taken) with
one element stored. It has one logical dimension per scope around S (`N:1`,
indexed `{k}`; a plain scalar `[]` when S is at the root). A scalar would
store the same, but parallelize_scope and map_gpu compare a thread's stack
temporaries by logical element, so with a scalar every iteration of those
scopes would seem to share ACC and they could no longer be mapped.

Legal when
- no touch inside S other than X's update of its own target reaches the
  target's stored element within one run of S (so holding the partial result
  elsewhere changes nothing S computes);
- no write in an earlier iteration of a scope around S reaches the element
  that the new load reads (the load is a plain read, so such a value would
  be a dependent iteration; a reduction could carry it, a load cannot). A
  write earlier in the same iteration would hide it from that rule; the
  test does not look for one, so it is safe rather than exact;
- no scope from S down to X is `:p :g :b :w` (a reduction along threads
  needs more than one register);
- a `shared` target is still accessed inside a `:b` scope by the new load and
  store;
- the target is not already a one-element `stack` buffer (accumulating an
  accumulator only adds a copy).
The inverse is `inline_accumulator`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from math import prod

from ..dependence import touches
from ..tree import KEYWORDS, Access, Buffer, Dim, Op, Program, Ref, Scope, walk_expr
from .base import Analysis, Move, Path, Site, node_at, splice, with_body
from .examples import FUSED_SOFTMAX

NAME = "accumulate"
TITLE = "Accumulate in a register"

_THREADED = "pgbw"  # kinds whose iterations run at once, unlike `u` and `v`


def _first_free_depth(op: Op) -> int:
    """The shallowest depth from which no scope appears in the target's index."""
    return max((e.depth + 1 for i in op.target.index for e in walk_expr(i) if isinstance(e, Ref)), default=0)


def candidates(a: Analysis) -> Iterator[Move]:
    for site in a.sites:
        if site.op.reduction:
            for depth in range(_first_free_depth(site.op), len(site.chain)):
                yield Move(NAME, (("op", site.label), ("depth", depth)), site.line)


def is_accumulator(buffer: Buffer) -> bool:
    """A one-element `stack` buffer: a value the code generator keeps in a register."""
    return buffer.location == "stack" and prod(buffer.storage_shape) == 1


def _carried_into_load(a: Analysis, load: Op, scopes: tuple[Scope, ...], scope_path: Path) -> bool:
    """Could a write in an earlier iteration of a scope around the load reach
    the element it reads? Elements compare logically, as the dependent
    iteration rule does: folded storage reused across iterations is the
    point of `D:K`, not a flow."""
    read = [t for t in touches(load, scopes) if not t.write]
    private = frozenset({a.program.buffer_of[load.value.array].name})
    for depth in range(len(scopes)):
        writes = [t for t in a.touches_in(scope_path[: depth + 1]) if t.write]
        if a.depends(writes, read, ("=",) * depth + ("<",), reorderable_reductions=False, private=private):
            return True
    return False


def _target_buffer(a: Analysis, site: Site) -> Buffer:
    return a.program.buffer_of[site.op.target.array]


def _accumulator_name(a: Analysis, array: str) -> str:
    taken = set(a.program.buffer_of) | {b.name for b in a.program.buffers} | KEYWORDS
    name, n = f"{array}_acc", 1
    while name in taken:
        n += 1
        name = f"{array}_acc{n}"
    return name


def _accumulator(a: Analysis, site: Site, depth: int) -> Access:
    return Access(_accumulator_name(a, site.op.target.array), tuple(Ref(k) for k in range(depth)))


def why_not(a: Analysis, move: Move) -> str | None:
    site, path, _ = a.scope(move)
    depth = len(path) - 1
    op = site.op
    if not op.reduction:
        return f"`{site.label}` is not a reduction"
    if _first_free_depth(op) > depth:
        return (f"the target `{op.target.array}` is indexed by the scope at depth {_first_free_depth(op) - 1}, "
                f"so it is not one element throughout the scope at depth {depth}")
    threaded = [s.token for s in site.chain[depth:] if s.kind and s.kind in _THREADED]
    if threaded:
        return (f"the reduction runs along a `{threaded[0]}` scope, whose iterations run at once; one register "
                "cannot gather their updates")
    buffer = _target_buffer(a, site)
    if is_accumulator(buffer):
        return f"`{op.target.array}` is already a one-element `stack` accumulator"
    # X's value reads stay: they see the target as it is while X runs.
    others = [t for p, t in a.placed_touches_in(path) if p != site.path or not (t.write or t.accumulator)]
    if a.depends(others, [t for t in touches(op, site.chain) if t.write], ("=",) * depth,
                 reorderable_reductions=False):
        return (f"another access inside the scope touches the element of `{op.target.array}` that is being "
                "reduced, so it must see every update as it happens")
    load = Op(_accumulator(a, site, depth), "=", op.target)
    if _carried_into_load(a, load, site.chain[:depth], path[:-1]):
        return ("an earlier iteration of an enclosing scope writes the reduced element, so loading it into "
                "the accumulator would be a dependent iteration")
    if buffer.location == "shared" and not any(s.kind == "b" for s in site.chain[:depth]):
        return f"`{op.target.array}` is `shared`, and the load and store would lie outside every `:b` scope"
    return None


def rewrite(a: Analysis, move: Move) -> Program:
    site, path, _ = a.scope(move)
    depth = len(path) - 1
    op = site.op
    acc = _accumulator(a, site, depth)
    buffer = _target_buffer(a, site)
    dims = tuple(Dim(s.size, 1 if s.size > 1 else None) for s in site.chain[:depth])
    declaration = Buffer(acc.array, buffer.dtype, dims, "stack")
    body = splice(a.program.body, site.path, (replace(op, target=acc),))
    nodes = (Op(acc, "=", op.target), node_at(body, path), Op(op.target, "=", acc))
    program = replace(a.program, buffers=a.program.buffers + (declaration,))
    return with_body(program, splice(body, path, nodes))


EXAMPLES = [
    (
        # The row maximum of a fused softmax row.
        FUSED_SOFTMAX,
        "accumulate(op=m#2, depth=1)",
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap
m_acc f32 [4:1] stack

4 m[{0}] = -inf
| m_acc[{0}] = m[{0}]
| 8 m_acc[{0}] max= x[{0},{1}]
| m[{0}] = m_acc[{0}]
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| s[{0}] = 0
| 8 s[{0}] += e[{0},{1}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
""",
    ),
    (
        # The row sum of the same row, where `s_acc` is taken.
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap
s_acc f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| s[{0}] = 0
| 8 s[{0}] += e[{0},{1}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
| s_acc[{0}] = 0
""",
        "accumulate(op=s#2, depth=1)",
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap
s_acc f32 [4] heap
s_acc2 f32 [4:1] stack

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| s[{0}] = 0
| s_acc2[{0}] = s[{0}]
| 8 s_acc2[{0}] += e[{0},{1}]
| s[{0}] = s_acc2[{0}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
| s_acc[{0}] = 0
""",
    ),
    (
        # A whole-array sum at the root: the accumulator is a scalar, and the
        # reduction's inner scope comes along.
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [] heap

s[] = 0
4 8 s[] += x[{0},{1}]
""",
        "accumulate(op=s#2, depth=0)",
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [] heap
s_acc f32 [] stack

s[] = 0
s_acc[] = s[]
4 8 s_acc[] += x[{0},{1}]
s[] = s_acc[]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # A second update in the scope would still go to `s[{0}]`, and the
        # store after the scope would overwrite it.
        """kernel k(x, z) -> s

x f32 [4, 8] heap
z f32 [4, 8] heap
s f32 [4] heap

4 s[{0}] = 0
| 8 s[{0}] += x[{0},{1}]
| | s[{0}] += z[{0},{1}]
""",
        "accumulate(op=s#2, depth=1)",
    ),
    (
        # `s[]` sums across the rows too: loading it in each row would carry
        # a value from one row to the next by a plain read.
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [] heap

s[] = 0
4 8 s[] += x[{0},{1}]
""",
        "accumulate(op=s#2, depth=1)",
    ),
    (
        # `m[{0}]` differs from row to row, so the row scope cannot hold it.
        """kernel k(x) -> m

x f32 [4, 8] heap
m f32 [4] heap

4 m[{0}] = -inf
4 8 m[{0}] max= x[{0},{1}]
""",
        "accumulate(op=m#2, depth=0)",
    ),
]
