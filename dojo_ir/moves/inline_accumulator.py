"""inline_accumulator: reduce into the target directly; the inverse of accumulate.

    N  ACC[..] = T[i]                N  M  T[i] op= V
    |  M  ACC[..] op= V      ->
    |  T[i] = ACC[..]

`inline_accumulator(op=ACC#1)` names the load of the accumulator. It
recognises exactly the pattern that accumulate makes: ACC is a temporary
alone in a one-element `stack` buffer, loaded from T[i] by a plain `=`; the
next node is a scope whose only accesses to ACC are reductions of one
operator, all with the load's index; the node after it stores `T[i] = ACC`
with the identical T[i]; and ACC is accessed nowhere else. The reductions
then update T[i] instead, and the load, the store and ACC's declaration go.

Legal when
- no touch inside the scope reaches T[i]'s stored element within one run of
  it (it would see the partial result, which T[i] does not hold until the
  store);
- no read in a later iteration of a scope around the pattern reaches T[i]
  unless it is an accumulator read of the same operator: the store was a
  plain write, which may feed any reduction, but the reductions that replace
  it carry a value to the next iteration only into their own operator.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..dependence import touches
from ..tree import Access, Op, Program, Scope
from .accumulate import is_accumulator
from .base import Analysis, Move, Path, Site, node_at, splice, with_body
from .examples import FUSED_SOFTMAX

NAME = "inline_accumulator"
TITLE = "Reduce into the target directly"


def _is_load(a: Analysis, op: Op) -> bool:
    buffer = a.program.buffer_of[op.target.array]
    return (op.assign == "=" and isinstance(op.value, Access) and is_accumulator(buffer)
            and buffer.array_names == (op.target.array,) and op.target.array in a.program.temporaries
            and a.program.buffer_of[op.value.array] is not buffer)


def candidates(a: Analysis) -> Iterator[Move]:
    for site in a.sites:
        if _is_load(a, site.op):
            yield Move(NAME, (("op", site.label),), site.line)


@dataclass(frozen=True)
class _Pattern:
    load: Site
    scope_path: Path
    store_path: Path
    updates: tuple[Site, ...]
    operator: str


def _pattern(a: Analysis, move: Move) -> _Pattern | str:
    load = a.site(move)
    if not _is_load(a, load.op):
        return (f"`{load.label}` is not the load `ACC = T[...]` of a temporary alone in a one-element `stack` "
                "buffer")
    acc, target = load.op.target, load.op.value
    siblings = a.program.body if len(load.path) == 1 else node_at(a.program.body, load.path[:-1]).body
    i = load.path[-1]
    following = siblings[i + 1: i + 3]
    if len(following) < 2 or not isinstance(following[0], Scope) or not isinstance(following[1], Op):
        return "the load is not followed by a scope and then an operation"
    store = following[1]
    if (store.assign, store.target, store.value) != ("=", target, acc):
        return "the operation after the scope is not the store `T[...] = ACC` with the load's T[...] and ACC"
    scope_path, store_path = load.path[:-1] + (i + 1,), load.path[:-1] + (i + 2,)
    updates = []
    for site in a.sites:
        if site.path in (load.path, store_path):
            continue
        inside = site.path[: len(scope_path)] == scope_path
        if (inside and site.op.reduction and site.op.target == acc
                and all(r.array != acc.array for r in site.op.reads)):
            updates.append(site)
        elif any(t.access.array == acc.array for t in touches(site.op, site.chain)):
            return f"`{site.label}` accesses `{acc.array}` other than by a reduction `{acc.array}[...] op= ...`"
    operators = {u.op.assign for u in updates}
    if len(operators) != 1:
        return f"the scope updates `{acc.array}` with {len(operators) or 'no'} reduction operators, not one"
    return _Pattern(load, scope_path, store_path, tuple(updates), operators.pop())


def why_not(a: Analysis, move: Move) -> str | None:
    pattern = _pattern(a, move)
    if isinstance(pattern, str):
        return pattern
    load = pattern.load
    depth = len(load.chain)
    store = [t for t in touches(node_at(a.program.body, pattern.store_path), load.chain) if t.write]
    if a.depends(a.touches_in(pattern.scope_path), store, ("=",) * depth, reorderable_reductions=False):
        return (f"an access inside the scope touches `{load.op.value.array}` where the partial result would "
                "now be kept")
    private = frozenset({a.program.buffer_of[load.op.value.array].name})
    for k in range(depth):
        # Elements compare logically, as the dependent-iteration rule does.
        reads = [t for p, t in a.placed_touches_in(load.path[: k + 1]) if p != load.path and not t.write
                 and not (t.accumulator and t.op.reduction == pattern.operator)]
        if a.depends(store, reads, ("=",) * k + ("<",), reorderable_reductions=False, private=private):
            return (f"a later iteration of an enclosing scope reads the stored element other than by `"
                    f"{pattern.operator}`, which only the store's plain write may feed")
    return None


def rewrite(a: Analysis, move: Move) -> Program:
    pattern = _pattern(a, move)
    assert not isinstance(pattern, str)
    target = pattern.load.op.value
    body = a.program.body
    for update in pattern.updates:
        body = splice(body, update.path, (replace(update.op, target=target),))
    body = splice(splice(body, pattern.store_path, ()), pattern.load.path, ())
    acc = a.program.buffer_of[pattern.load.op.target.array]
    program = replace(a.program, buffers=tuple(b for b in a.program.buffers if b is not acc))
    return with_body(program, body)


EXAMPLES = [
    (
        # The row maximum of a fused softmax row, kept in a register by
        # accumulate, goes back to `m[{0}]`.
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
        "inline_accumulator(op=m_acc#1)",
        FUSED_SOFTMAX,
    ),
    (
        # A scalar accumulator updated by two reductions of one operator.
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [] heap
acc f32 [] stack

s[] = 0
acc[] = s[]
4 8 acc[] += x[{0},{1}]
| acc[] += 1
s[] = acc[]
""",
        "inline_accumulator(op=acc#1)",
        """kernel k(x) -> s

x f32 [4, 8] heap
s f32 [] heap

s[] = 0
4 8 s[] += x[{0},{1}]
| s[] += 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # `y` reads `s[]` inside the scope: it sees the value before the
        # sum, which `s[]` would no longer hold.
        """kernel k(x) -> s, y

x f32 [4] heap
s f32 [] heap
y f32 [4] heap
acc f32 [] stack

s[] = 1
acc[] = s[]
4 acc[] += x[{0}]
| y[{0}] = s[] * x[{0}]
s[] = acc[]
""",
        "inline_accumulator(op=acc#1)",
    ),
    (
        # The partial sum is stored to `t`, not back to `s`.
        """kernel k(x) -> s, t

x f32 [4] heap
s f32 [] heap
t f32 [] heap
acc f32 [] stack

s[] = 1
acc[] = s[]
4 acc[] += x[{0}]
t[] = acc[]
s[] = 2
""",
        "inline_accumulator(op=acc#1)",
    ),
    (
        # The accumulator is also read on its own after the store.
        """kernel k(x) -> s, y

x f32 [4] heap
s f32 [] heap
y f32 [] heap
acc f32 [] stack

s[] = 1
acc[] = s[]
4 acc[] += x[{0}]
s[] = acc[]
y[] = acc[] * 2
""",
        "inline_accumulator(op=acc#1)",
    ),
]
