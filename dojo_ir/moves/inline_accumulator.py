"""inline_accumulator: reduce into the target directly; the inverse of accumulate.

    N  ACC[..] = T[i]                N  M  T[i] op= V
    |  M  ACC[..] op= V      ->
    |  T[i] = ACC[..]

`inline_accumulator(op=ACC#1)` names the load of the accumulator. It
recognises exactly the patterns that accumulate and accumulate_partial make:
ACC is a temporary alone in a small `stack` buffer, loaded by a plain `=`
from T[i] (or set to the identity of the reduction, `0 1 -inf inf`), either
alone or inside a nest of single-child scopes (a tile, one element per
iteration); the load's ACC index is `{0}` to `{n-1}`, one per scope around
it, with the nest's dimensions stored whole, so every element is loaded; the
next node is a scope whose only accesses to ACC are reductions of one
operator indexed `{0}` to `{d-1}` over the scopes outside the nest; the node
after it is the same nest storing `T[i] = ACC[..]` (or, after the identity,
`T[i] op= ACC[..]`); and ACC is accessed nowhere else. Each reduction then
updates the element of T that its ACC element stands for, and the nests and
ACC's declaration go.

Legal when
- T[i] names a different element for each iteration of the nest (else two
  elements of ACC would stand for one of T, and the store would keep only
  one of their sums);
- no touch inside the scope reaches T[i]'s stored elements within one run of
  it (it would see the partial result, which T[i] does not hold until the
  store);
- no read in a later iteration of a scope around the pattern reaches T[i]
  unless it is an accumulator read of the same operator: a plain store may
  feed any reduction, but the reductions that replace it carry a value to
  the next iteration only into their own operator (a partial store `op=` is
  such a reduction already).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..affine import NotAffine, affine
from ..analysis import Analysis, Site
from ..dependence import touches
from ..paths import TreePath, node_at, splice, with_body
from ..refs import ref, substitute_expr
from ..tree import Access, Node, Op, Program, Ref, Scope
from .accumulate import IDENTITY, distinct_per_iteration, is_accumulator
from .base import EVERY_TARGET, OP, Move, Resolved
from .examples import FUSED_SOFTMAX

NAME = "inline_accumulator"
TITLE = "Reduce into the target directly"
ARGS = (OP,)
TARGETS = EVERY_TARGET


def _is_load(a: Analysis, op: Op) -> bool:
    buffer = a.program.buffer_of[op.target.array]
    if op.assign != "=" or not is_accumulator(buffer) or buffer.array_names != (op.target.array,) \
            or op.target.array not in a.program.temporaries:
        return False
    if isinstance(op.value, Access):
        return a.program.buffer_of[op.value.array] is not buffer
    return op.value in IDENTITY.values()


def candidates(a: Analysis) -> Iterator[Move]:
    for site in a.sites:
        if _is_load(a, site.op):
            yield Move(NAME, (("op", site.label),), site.line)


@dataclass(frozen=True)
class _Pattern:
    load: Site
    store: Op
    outer: int  # scopes around the load nest (and the reduction scope)
    nest: tuple[Scope, ...]
    nest_path: TreePath
    scope_path: TreePath
    store_path: TreePath
    updates: tuple[Site, ...]
    operator: str

    @property
    def partial(self) -> bool:
        return self.store.assign != "="


def _nest_root(load: Site) -> int:
    """How many single-child scopes directly enclose the load: its tile nest."""
    t = 0
    while t < len(load.chain) and len(load.chain[-1 - t].body) == 1:
        t += 1
    return t


def _update_target(pattern: _Pattern, update: Op) -> Access | None:
    """The element of T that `update`'s ACC element was loaded from, or None when its index is
    not `{0}`..`{d-1}` over the outer scopes and affine over the tile."""
    index = update.target.index
    if index[: pattern.outer] != tuple(Ref(k) for k in range(pattern.outer)):
        return None
    try:
        tile = {pattern.outer + j: affine(i) for j, i in enumerate(index[pattern.outer:])}
    except NotAffine:
        return None
    return substitute_expr(pattern.store.target, lambda d: tile.get(d, ref(d)))


def _pattern(a: Analysis, at: Resolved) -> _Pattern | str:
    load = at.site
    if not _is_load(a, load.op):
        return (f"`{load.label}` is not the load `ACC = T[...]` of a temporary alone in a small `stack` "
                "buffer")
    acc = load.op.target
    t = _nest_root(load)
    outer = len(load.chain) - t
    nest, nest_path = load.chain[outer:], load.path[: outer + 1]
    dims = a.program.buffer_of[acc.array].dims
    if acc.index != tuple(Ref(k) for k in range(len(load.chain))) or len(dims) != len(load.chain) or any(
            d.size != s.size or d.stored is not None for d, s in zip(dims[outer:], nest, strict=True)):
        return (f"the load does not fill `{acc.array}` element by element: its index is not one scope variable "
                "per dimension, in order")
    siblings = a.program.body if outer == 0 else node_at(a.program.body, nest_path[:-1]).body
    i = nest_path[-1]
    following = siblings[i + 1: i + 3]
    if len(following) < 2 or not isinstance(following[0], Scope):
        return "the load is not followed by a scope and then the store"
    store = _store(load.op, following[1], nest)
    if store is None:
        return ("the node after the scope is not the store `T[...] = ACC` with the load's T[...] (or `T[...] op= "
                "ACC` after the identity of `op`) in the load's scopes")
    scope_path, store_path = nest_path[:-1] + (i + 1,), nest_path[:-1] + (i + 2,)
    pattern = _Pattern(load, store, outer, nest, nest_path, scope_path, store_path, (), "")
    updates = []
    for site in a.sites:
        if site.path[: len(nest_path)] in (nest_path, store_path):
            continue
        inside = site.path[: len(scope_path)] == scope_path
        if (inside and site.op.reduction and site.op.target.array == acc.array
                and all(r.array != acc.array for r in site.op.reads)):
            if _update_target(pattern, site.op) is None:
                return f"`{site.label}` updates an element of `{acc.array}` other than its own iteration's"
            updates.append(site)
        elif any(t.access.array == acc.array for t in touches(site.op, site.chain)):
            return f"`{site.label}` accesses `{acc.array}` other than by a reduction `{acc.array}[...] op= ...`"
    operators = {u.op.assign for u in updates}
    if len(operators) != 1:
        return f"the scope updates `{acc.array}` with {len(operators) or 'no'} reduction operators, not one"
    operator = operators.pop()
    if pattern.partial and store.assign != operator:
        return f"the scope reduces `{acc.array}` with `{operator}` but the store adds it with `{store.assign}`"
    return replace(pattern, updates=tuple(updates), operator=operator)


def _store(load: Op, node: Node, nest: tuple[Scope, ...]) -> Op | None:
    """The store that ends the pattern, when `node` is one for `load` in the same nest."""
    for scope in nest:
        if not isinstance(node, Scope) or (node.size, node.kind) != (scope.size, scope.kind) or len(node.body) != 1:
            return None
        node = node.body[0]
    if not isinstance(node, Op) or node.value != load.target:
        return None
    if isinstance(load.value, Access):
        return node if (node.assign, node.target) == ("=", load.value) else None
    return node if IDENTITY.get(node.assign) == load.value else None


def why_not(a: Analysis, at: Resolved) -> str | None:
    pattern = _pattern(a, at)
    if isinstance(pattern, str):
        return pattern
    load, depth, target = pattern.load, pattern.outer, pattern.store.target
    sizes = {depth + j: s.size for j, s in enumerate(pattern.nest)}
    if not distinct_per_iteration(target, sizes, a.program.buffer_of[target.array].dims):
        return (f"`{target.array}` may stand for two elements of `{load.op.target.array}`, and the store would "
                "keep only one of their results")
    store = [t for t in touches(pattern.store, load.chain) if t.write]
    if a.depends(a.touches_in(pattern.scope_path), store, ("=",) * depth, reorderable_reductions=False):
        return f"an access inside the scope touches `{target.array}` where the partial result would now be kept"
    if pattern.partial:
        return None
    private = frozenset({a.program.buffer_of[target.array].name})
    for k in range(depth):
        # Elements compare logically, as the dependent-iteration rule does.
        reads = [t for p, t in a.placed_touches_in(load.path[: k + 1])
                 if p[: len(pattern.nest_path)] != pattern.nest_path and not t.write
                 and not (t.accumulator and t.op.reduction == pattern.operator)]
        if a.depends(store, reads, ("=",) * k + ("<",), reorderable_reductions=False, private=private):
            return (f"a later iteration of an enclosing scope reads the stored element other than by `"
                    f"{pattern.operator}`, which only the store's plain write may feed")
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    pattern = _pattern(a, at)
    assert not isinstance(pattern, str)
    body = a.program.body
    for update in pattern.updates:
        body = splice(body, update.path, (replace(update.op, target=_update_target(pattern, update.op)),))
    body = splice(splice(body, pattern.store_path, ()), pattern.nest_path, ())
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
    (
        # A partial tile of a blocked matmul: the blocks of `k` add to `c`
        # directly again.
        """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap
c_acc f32 [2:1, 4:1, 16] stack

4 16 c[{0},{1}] = 0
2 4 16 c_acc[{0},{1},{2}] = 0
| | 4 16 c_acc[{0},{1},{3}] += a[{1},{0}*4+{2}] * b[{0}*4+{2},{3}]
| | 16 c[{1},{2}] += c_acc[{0},{1},{2}]
""",
        "inline_accumulator(op=c_acc#1)",
        """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap

4 16 c[{0},{1}] = 0
2 4 4 16 c[{1},{3}] += a[{1},{0}*4+{2}] * b[{0}*4+{2},{3}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # The tile's store keeps only the last of the two partial sums that
        # `t[{1}+{2}]` stands for, where the reduction would add both.
        """kernel k(x) -> t

x f32 [4, 4, 4] heap
t f32 [8] heap
acc f32 [4, 4] stack

8 t[{0}] = 0
4 4 acc[{0},{1}] = t[{0}+{1}]
4 4 4 acc[{1},{2}] += x[{0},{1},{2}]
4 4 t[{0}+{1}] = acc[{0},{1}]
""",
        "inline_accumulator(op=acc#1)",
    ),
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
