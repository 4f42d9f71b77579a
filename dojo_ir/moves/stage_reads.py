"""stage_reads: copy the part of an array that a scope reads into a temporary first.

    N  M  K  J  c[..] += a[..] * b[{0}*K+{2},{3}]         N  K  J  b_s[{0},{1},{2}] = b[{0}*K+{1},{2}]
                                                  ->      |  M  K  J  c[..] += a[..] * b_s[{0},{2},{3}]

`stage_reads(op=X, depth=d, buffer=A)` names the scope S at depth d around
operation X and an array A that S reads (by its array name) (TVM's `cache_read`, Exo's
`stage_mem`). A new temporary `A_s` (`A_s2`, ... if taken) holds the box of
A that one run of S reads; a copy nest placed just before S, in the same
scopes, fills it, and every read of A inside S reads `A_s` instead.

Every index of a checked program is affine (FORMAT.md), so its least and
greatest values over a box of scopes always exist. Each index of A splits
into an outer part, over the scopes around S, and an inner part, over S and
the scopes inside it (with the constant). The outer part is the box's
offset; the inner part, from its least value `lo` to its greatest `hi` over
every read of A in S, gives the box's extent in that dimension,
`hi - lo + 1`. `A_s` has one logical dimension per scope around S
(`N:1`, indexed `{k}`) and then one per dimension of A whose extent is above
1, stored whole; dimensions of extent 1 are dropped. The `N:1` dimensions
add no storage, but make each iteration of the scopes around S fill elements
of its own: the dependent-iteration rule and the private-buffer rule of
parallel scopes compare logical elements (as for `accumulate`'s tiles). `A_s`
is on the `heap`, like the library's temporaries; set_location, swap_dims,
pad_dim and reuse_dims shape it afterwards.

Legal when
- A is read inside S, and no operation inside S writes any array of A's
  buffer (the copy must see the values S would read; nothing runs between the
  copy and S);
- every read of A in S reads a box: its dimensions use distinct scopes, each
  through an index whose values leave no gap (not a diagonal `x[{1},{1}]` nor
  a stride `x[{1}*2]`), and the reads agree on each dimension's outer part, so
  one offset places them all. Several reads stage the box around them; the
  elements between them are copied too, and are in bounds, since A's bounds
  are a box;
- every scope around S runs its iterations one after another (sequential or
  `:u`): iterations running at once would share the one heap temporary. To
  stage a tile per GPU block, stage first, store the `N:1` dimensions of the
  scopes to map whole (`unreuse_dims`), map them, then move the temporary to
  `shared` memory and fold them again (`set_location`, `reuse_dims`);
- A is not `shared` (the copy would lie outside the `:b` scope its accesses
  need);
- no write in an earlier iteration of a scope around S reaches an element the
  copy reads: the copy is a plain read, so such a value would be a dependent
  iteration. A write earlier in the same iteration may hide it from that rule;
  the test does not look for one, so it is safe rather than exact.

Listed where some read of A in S uses the scope directly around S: there the
box moves from one iteration of that scope to the next, so it is smaller than
A and a copy one scope further out would not do the same work less often.
The inverse is `unstage_reads`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..affine import Affine, affine
from ..analysis import Analysis
from ..dependence import touches
from ..paths import TreePath, map_ops, node_at, splice, with_body
from ..printer import expr_text
from ..refs import ref
from ..tree import Access, Buffer, Dim, Expr, Node, Op, Program, Ref, Scope
from .accumulate import copy_nest
from .base import DEPTH, EVERY_TARGET, OP, Move, Param, Resolved
from .buffers import declared, fresh_name, with_reads
from .examples import MATMUL_B_PACKED, MATMUL_IN_K_BLOCKS
from .reuse_dims import SEQUENTIAL

NAME = "stage_reads"
TITLE = "Copy what the scope reads into a temporary"
ARGS = (OP, DEPTH, Param("buffer", "array"))
TARGETS = EVERY_TARGET


def split(form: Affine, depth: int) -> tuple[Affine, Affine]:
    """`form` as its outer part (the scopes above `depth`, no constant) and its
    inner part (the constant and the scopes at `depth` and below)."""
    outer = Affine.of({d: c for d, c in form.terms if d < depth})
    return outer, form - outer


def _gapless(form: Affine, sizes: tuple[int, ...]) -> bool:
    """Whether `form` takes every integer between its least and greatest value
    over `0 <= {d} < sizes[d]`: taken by increasing step, each step is at most
    one past what the smaller ones reach (else the value just above that reach
    is missed)."""
    reach = 0
    for d, c in sorted(form.terms, key=lambda t: abs(t[1])):
        if sizes[d] > 1:
            if abs(c) > reach + 1:
                return False
            reach += abs(c) * (sizes[d] - 1)
    return True


def box_problem(forms: tuple[Affine, ...], sizes: tuple[int, ...], depth: int) -> str | None:
    """Why the elements that an access with index `forms`, in scopes of
    `sizes`, reads over the scopes from `depth` down are not a box, or None."""
    owner: dict[int, int] = {}
    for k, form in enumerate(forms):
        _, inner = split(form, depth)
        for d, _ in inner.terms:
            if sizes[d] > 1 and owner.setdefault(d, k) != k:
                return f"dimensions {owner[d]} and {k} both use the scope at depth {d}"
        if not _gapless(inner, sizes):
            return f"dimension {k} steps over elements"
    return None


@dataclass(frozen=True)
class Plan:
    """The staging of A at S: the temporary, its copy nest and how reads map."""

    path: TreePath  # S's
    array: str  # A
    lows: tuple[int, ...]  # per dimension of A: the least value of the inner part
    extents: tuple[int, ...]
    declaration: Buffer
    copy: Node

    @property
    def depth(self) -> int:
        return len(self.path) - 1

    def staged(self, access: Access) -> Access:
        """A read of A in S as the read of the temporary."""
        index: list[Expr] = [Ref(k) for k in range(self.depth)]
        for k, i in enumerate(access.index):
            if self.extents[k] > 1:
                _, inner = split(affine(i), self.depth)
                index.append((inner - Affine(self.lows[k])).to_expr())
        return Access(self.declaration.name, tuple(index))


def _plan(a: Analysis, at: Resolved) -> Plan | str:
    """The staging `move` asks for, or why it is not legal."""
    site, path = at.site, at.path
    depth = len(path) - 1
    array, buffer = str(at.arg("buffer")), at.buffer
    if buffer is None:
        return f"no array `{array}`; the arrays are {', '.join(a.program.buffer_of)}"
    inside = a.touches_in(path)
    reads = [t for t in inside if not t.write and t.access.array == array]
    if not reads:
        return f"the scope does not read `{array}`"
    own = set(buffer.array_names)
    written = next((t for t in inside if t.write and t.access.array in own), None)
    if written is not None:
        return (f"`{written.access.array}` is written inside the scope (`{expr_text(written.access, True)}`), so "
                f"a copy of `{array}` made before it could go stale")
    if buffer.location == "shared":
        return f"`{array}` is in `shared` memory, which only a `:b` scope's accesses may touch, and the copy is outside"
    concurrent = next((s for s in site.chain[:depth] if s.kind not in SEQUENTIAL), None)
    if concurrent is not None:
        return (f"the scope `{concurrent.token}` around it runs its iterations at once, and they would share the "
                "one heap temporary")
    offsets: list[Affine] = []
    lows, highs = [], []
    parts = [[split(form, depth) for form in t.forms] for t in reads]  # per read, per dimension: (outer, inner)
    for k in range(len(buffer.dims)):
        outers = {p[k][0] for p in parts}
        if len(outers) > 1:
            first, second = list(outers)[:2]
            return (f"the reads of `{array}` offset dimension {k} differently by the scopes around it (`"
                    f"{expr_text(first.to_expr(), True)}` and `{expr_text(second.to_expr(), True)}`), so no one box "
                    "moves with them")
        bounds = [p[k][1].bounds(t.sizes) for p, t in zip(parts, reads, strict=True)]
        lows.append(min(lo for lo, _ in bounds))
        highs.append(max(hi for _, hi in bounds))
        offsets.append(outers.pop() + Affine(lows[-1]))
    for t in reads:
        problem = box_problem(t.forms, t.sizes, depth)
        if problem:
            return f"`{expr_text(t.access, True)}` does not read a box of `{array}`: {problem}"
    extents = tuple(hi - lo + 1 for lo, hi in zip(lows, highs, strict=True))
    name = fresh_name(a.program, f"{array}_s")
    kept = [k for k, e in enumerate(extents) if e > 1]
    outer_scopes = site.chain[:depth]
    dims = tuple(Dim(s.size, 1 if s.size > 1 else None) for s in outer_scopes) + tuple(Dim(extents[k]) for k in kept)
    declaration = Buffer(name, buffer.dtype, dims, "heap")
    # The copy nest sits where S does: its scopes are at depths depth, depth+1, ...
    where = {k: depth + j for j, k in enumerate(kept)}
    source = tuple((offsets[k] + (ref(where[k]) if k in where else Affine(0))).to_expr()
                   for k in range(len(extents)))
    target = Access(name, tuple(Ref(d) for d in range(depth + len(kept))))
    copy = copy_nest(tuple(Scope(extents[k], "", ()) for k in kept), Op(target, "=", Access(array, source)))
    plan = Plan(path, array, tuple(lows), extents, declaration, copy)
    if _carried_into_copy(a, plan, outer_scopes, buffer):
        return (f"an earlier iteration of a scope around it writes an element of `{array}` that the copy reads; "
                "read by a plain copy it would be a dependent iteration")
    return plan


def _carried_into_copy(a: Analysis, plan: Plan, outer: tuple[Scope, ...], buffer: Buffer) -> bool:
    """Could a write in an earlier iteration of a scope around S reach an
    element the copy reads? Elements compare logically, as the
    dependent-iteration rule does."""
    node, chain = plan.copy, outer
    while isinstance(node, Scope):
        chain, node = chain + (node,), node.body[0]
    assert isinstance(node, Op)
    read = [t for t in touches(node, chain) if not t.write]
    for k in range(plan.depth):
        writes = [t for t in a.touches_in(plan.path[: k + 1]) if t.write]
        if a.depends(writes, read, ("=",) * k + ("<",), reorderable_reductions=False,
                     private=frozenset({buffer.name})):
            return True
    return False


def candidates(a: Analysis) -> Iterator[Move]:
    for site in a.sites:
        for depth in range(1, len(site.chain)):
            path = site.path[: depth + 1]
            # each scope once, from its first operation, and only where the scope around it moves the box
            if (a.first_site(path) is not site or site.chain[depth - 1].size == 1
                    or any(s.kind not in SEQUENTIAL for s in site.chain[:depth])):
                continue
            inside = a.touches_in(path)
            written = {a.program.buffer_of[t.access.array].name for t in inside if t.write}
            arrays = dict.fromkeys(
                t.access.array for t in inside
                if not t.write and any(f.coef(depth - 1) for f in t.forms)
                and a.program.buffer_of[t.access.array].name not in written)
            for array in arrays:
                yield Move(NAME, (("op", site.label), ("depth", depth), ("buffer", array)), site.line)


def why_not(a: Analysis, at: Resolved) -> str | None:
    plan = _plan(a, at)
    return plan if isinstance(plan, str) else None


def rewrite(a: Analysis, at: Resolved) -> Program:
    plan = _plan(a, at)
    assert not isinstance(plan, str)
    scope = node_at(a.program.body, plan.path)
    assert isinstance(scope, Scope)
    body = map_ops(scope.body, lambda op: replace(op, value=with_reads(op.value, plan.array, plan.staged)))
    staged = replace(scope, body=body)
    return with_body(declared(a.program, plan.declaration), splice(a.program.body, plan.path, (plan.copy, staged)))


EXAMPLES = [
    (
        # Packing a tile of matmul's `b` once per block of `k`: each row of
        # `a` then reads the same 4 x 16 tile.
        MATMUL_IN_K_BLOCKS,
        "stage_reads(op=c#2, depth=1, buffer=b)",
        MATMUL_B_PACKED,
    ),
    (
        # A three-point stencil in blocks of 3: each block reads a window of
        # 5 elements of `x`, which the copy brings together once.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [6] heap

2 3 y[{0}*3+{1}] = x[{0}*3+{1}] + x[{0}*3+{1}+1] + x[{0}*3+{1}+2]
""",
        "stage_reads(op=y, depth=1, buffer=x)",
        """kernel k(x) -> y

x f32 [8] heap
y f32 [6] heap
x_s f32 [2:1, 5] heap

2 5 x_s[{0},{1}] = x[{0}*3+{1}]
| 3 y[{0}*3+{1}] = x_s[{0},{1}] + x_s[{0},{1}+1] + x_s[{0},{1}+2]
""",
    ),
    (
        # A row of `a` is the same for every column: staged before the column
        # scope, its offset is the row; the dimension of extent 1 is dropped.
        """kernel mm(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap

3 5 c[{0},{1}] = 0
| | 4 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]
""",
        "stage_reads(op=c#1, depth=1, buffer=a)",
        """kernel mm(a, b) -> c

a f32 [3, 4] heap
b f32 [4, 5] heap
c f32 [3, 5] heap
a_s f32 [3:1, 4] heap

3 4 a_s[{0},{1}] = a[{0},{1}]
| 5 c[{0},{1}] = 0
| | 4 c[{0},{1}] += a_s[{0},{2}] * b[{2},{1}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # `t` is written inside the scope: a copy made before it would go stale.
        """kernel k(x) -> y

x f32 [2, 4] heap
y f32 [2, 4] heap
t f32 [2, 4] heap

2 4 t[{0},{1}] = exp(x[{0},{1}])
| | y[{0},{1}] = t[{0},{1}] * 2
""",
        "stage_reads(op=y, depth=1, buffer=t)",
    ),
    (
        # The diagonal of each block is not a box.
        """kernel k(x) -> y

x f32 [4, 4] heap
y f32 [4] heap

2 2 y[{0}*2+{1}] = x[{0}*2+{1},{0}*2+{1}]
""",
        "stage_reads(op=y, depth=1, buffer=x)",
    ),
    (
        # Every other element: the copy would hold the ones between too.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [4] heap

2 2 y[{0}*2+{1}] = x[{0}*4+{1}*2]
""",
        "stage_reads(op=y, depth=1, buffer=x)",
    ),
    (
        # No array `z`.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

2 4 y[{0}*4+{1}] = x[{0}*4+{1}]
""",
        "stage_reads(op=y, depth=1, buffer=z)",
    ),
    (
        # The threads of the parallel scope would share the one temporary.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

2:p 4 y[{0}*4+{1}] = x[{0}*4+{1}]
""",
        "stage_reads(op=y, depth=1, buffer=x)",
    ),
]
