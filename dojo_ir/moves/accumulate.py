"""accumulate: keep a reduction's partial result in a register-sized temporary.

    N  T[i] op= V              N  ACC[..] = T[i]
                       ->      |  M  ACC[..] op= V
                               |  T[i] = ACC[..]

`accumulate(op=X, depth=d)` names a reduction X (`+= *= max= min=`) and the
scope S at depth d around it, which the target T[i] does not use (X reduces
along S). S is replaced by three nodes: ACC loaded from the target, S with X
updating ACC instead, and the target stored back. The arithmetic happens in
the same order on the same dtype, so results are bitwise identical.

When T[i] uses no scope inside S, ACC holds one element. When it does, ACC is
a tile: one element per iteration of those tile scopes (matmul's 6 x 4 x 16
block of `c` inside its `k` scope, which the compiler then keeps in vector
registers), and the load and the store become loop nests over copies of the
tile scopes, in their order and with their kinds (`:u` and `:v` stay, so the
copies are unrolled and vectorised like the reduction):

    N  K  6:u 16:v T[..] += V        N  6:u 16:v ACC[..] = T[..]
                              ->     |  K  6:u 16:v ACC[..] += V
                                     |  6:u 16:v T[..] = ACC[..]

ACC is a new `stack` buffer named `<array>_acc` (`_acc2`, ... if taken). It
has one logical dimension per scope around S (`N:1`, indexed `{k}`; none
when S is at the root), then one per tile scope, stored whole. A scalar
would store the same as the `N:1` dimensions, but parallelize_scope and
map_gpu compare a thread's stack temporaries by logical element, so with a
scalar every iteration of those scopes would seem to share ACC and they
could no longer be mapped.

Legal when
- T[i] does not use S;
- T[i] names a different element for each iteration of the tile scopes (so
  each element of ACC stands for one element of T), and the tile has at most
  `MAX_TILE` elements (it must fit in registers, or at least in the stack);
- no touch inside S other than X's update of its own target reaches the
  target's stored elements within one run of S (so holding the partial
  results elsewhere changes nothing S computes);
- no write in an earlier iteration of a scope around S reaches an element
  that the new load reads (the load is a plain read, so such a value would
  be a dependent iteration; a reduction could carry it, a load cannot). A
  write earlier in the same iteration would hide it from that rule; the
  test does not look for one, so it is safe rather than exact;
- no scope from S down to X is `:p :g :b :w` (a reduction along threads
  needs more than one register);
- a `shared` target is still accessed inside a `:b` scope by the new load and
  store;
- the target is not already an accumulator (a small `stack` buffer):
  accumulating an accumulator only adds a copy.
The inverse is `inline_accumulator`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from math import prod

from ..affine import NotAffine, affine
from ..analysis import Analysis, Site
from ..dependence import touches
from ..paths import TreePath, node_at, splice, with_body
from ..refs import ref, substitute_expr
from ..tree import FLOAT_DTYPES, Access, Buffer, Dim, Node, Num, Op, Program, Ref, Scope, Unary, walk_expr
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .buffers import declared, fresh_name
from .examples import FUSED_SOFTMAX, MATMUL_IN_K_BLOCKS

NAME = "accumulate"
TITLE = "Accumulate in a register"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET

MAX_TILE = 1024  # elements: twice an AVX-512 register file of f32, and 4 KiB of stack per thread
_THREADED = "pgbw"  # kinds whose iterations run at once, unlike `u` and `v`


def used_depths(access: Access) -> frozenset[int]:
    """The depths of the scopes whose variables `access`'s index uses."""
    return frozenset(e.depth for i in access.index for e in walk_expr(i) if isinstance(e, Ref))


def tile_depths(op: Op, chain: tuple[Scope, ...], depth: int) -> tuple[int, ...]:
    """The scopes inside the one at `depth` that `op`'s target uses: the accumulator's tile."""
    used = used_depths(op.target)
    return tuple(d for d in range(depth + 1, len(chain)) if d in used)


def reduction_scopes(a: Analysis, name: str) -> Iterator[Move]:
    """`name(op=X, depth=d)` for every reduction X and scope S at depth d around it that does
    not index its target: where accumulate and accumulate_partial might apply."""
    for site in a.sites:
        if site.op.reduction:
            used = used_depths(site.op.target)
            for depth in range(len(site.chain)):
                if depth not in used:
                    yield Move(name, (("op", site.label), ("depth", depth)), site.line)


def candidates(a: Analysis) -> Iterator[Move]:
    return reduction_scopes(a, NAME)


def is_accumulator(buffer: Buffer) -> bool:
    """A `stack` buffer of at most a tile: values the code generator keeps in registers."""
    return buffer.location == "stack" and prod(buffer.storage_shape) <= MAX_TILE


def distinct_per_iteration(access: Access, sizes: dict[int, int], dims: tuple[Dim, ...]) -> bool:
    """Does `access` name a different logical element for each iteration of the scopes
    `sizes` (depth -> size), the other scopes fixed? Decided on the row-major offset of the
    logical index (in bounds, so one offset per element): sorted by coefficient, each step
    must jump past everything the smaller ones reach. Safe rather than exact."""
    try:
        forms = [affine(i) for i in access.index]
    except NotAffine:
        return False
    coefs = dict.fromkeys(sizes, 0)
    stride = 1
    for form, dim in zip(reversed(forms), reversed(dims), strict=True):
        for depth in sizes:
            coefs[depth] += form.coef(depth) * stride
        stride *= dim.size
    reach = 0
    for depth in sorted(sizes, key=lambda d: abs(coefs[d])):
        if sizes[depth] > 1 and abs(coefs[depth]) <= reach:
            return False
        reach += abs(coefs[depth]) * (sizes[depth] - 1)
    return True


def _carried_into_load(a: Analysis, load: Op, chain: tuple[Scope, ...], depth: int, scope_path: TreePath) -> bool:
    """Could a write in an earlier iteration of a scope around the load reach
    an element it reads? Elements compare logically, as the dependent
    iteration rule does: folded storage reused across iterations is the
    point of `D:K`, not a flow."""
    read = [t for t in touches(load, chain) if not t.write]
    private = frozenset({a.program.buffer_of[load.value.array].name})
    for k in range(depth):
        writes = [t for t in a.touches_in(scope_path[: k + 1]) if t.write]
        if a.depends(writes, read, ("=",) * k + ("<",), reorderable_reductions=False, private=private):
            return True
    return False


def _target_buffer(a: Analysis, site: Site) -> Buffer:
    return a.program.buffer_of[site.op.target.array]


def copy_nest(scopes: tuple[Scope, ...], op: Op) -> Node:
    """`op` inside empty copies of `scopes`, outermost first."""
    node: Node = op
    for scope in reversed(scopes):
        node = Scope(scope.size, scope.kind, (node,))
    return node


IDENTITY = {"+=": Num("0"), "*=": Num("1"), "max=": Unary("-", Num("inf")), "min=": Num("inf")}


class Plan:
    """The nodes that replace S: the accumulator, its load and store nests, X's new target.
    `partial` starts the accumulator at the reduction's identity and adds it to the target at
    the end (`T op= ACC`) instead of loading and storing the target."""

    def __init__(self, a: Analysis, site: Site, depth: int, partial: bool):
        self.tile = tile_depths(site.op, site.chain, depth)
        self.tile_scopes = tuple(site.chain[d] for d in self.tile)
        name = fresh_name(a.program, f"{site.op.target.array}_acc")
        outer = tuple(Ref(k) for k in range(depth))
        self.update_target = Access(name, outer + tuple(Ref(d) for d in self.tile))
        # In the nests, the tile scope at depth tile[j] is the copy at depth `depth + j`.
        renumber = {d: depth + j for j, d in enumerate(self.tile)}
        acc = Access(name, outer + tuple(Ref(renumber[d]) for d in self.tile))
        target = substitute_expr(site.op.target, lambda d: ref(renumber.get(d, d)))
        self.chain = site.chain[:depth] + self.tile_scopes
        self.load = Op(acc, "=", IDENTITY[site.op.assign] if partial else target)
        self.store = Op(target, site.op.assign if partial else "=", acc)
        dims = tuple(Dim(s.size, 1 if s.size > 1 else None) for s in site.chain[:depth])
        dims += tuple(Dim(s.size) for s in self.tile_scopes)
        self.declaration = Buffer(name, _target_buffer(a, site).dtype, dims, "stack")


def check(a: Analysis, at: Resolved, partial: bool) -> str | None:
    """Why `move` (accumulate, or its partial form) is not legal, or None."""
    site, path = at.site, at.path
    depth = len(path) - 1
    op = site.op
    if not op.reduction:
        return f"`{site.label}` is not a reduction"
    if depth in used_depths(op.target):
        return (f"the target `{op.target.array}` is indexed by the scope at depth {depth}, so the scope does not "
                "reduce into it")
    threaded = [s.token for s in site.chain[depth:] if s.kind and s.kind in _THREADED]
    if threaded:
        return (f"the reduction runs along a `{threaded[0]}` scope, whose iterations run at once; one register "
                "cannot gather their updates")
    buffer = _target_buffer(a, site)
    if is_accumulator(buffer):
        return f"`{op.target.array}` is already an accumulator, a small `stack` buffer"
    if partial and op.assign in ("max=", "min=") and buffer.dtype not in FLOAT_DTYPES:
        return f"`{op.assign}` on `{buffer.dtype}` has no identity to start from (no `inf` for integers)"
    plan = Plan(a, site, depth, partial)
    tile = prod(s.size for s in plan.tile_scopes)
    if tile > MAX_TILE:
        return (f"the target takes {tile} elements inside the scope at depth {depth}, more than the "
                f"{MAX_TILE} an accumulator may hold")
    sizes = {d: site.chain[d].size for d in plan.tile}
    if not distinct_per_iteration(op.target, sizes, buffer.dims):
        return (f"the target `{op.target.array}` may name one element in two iterations of the scopes inside "
                "the scope, so the accumulator's elements would not stand for one element each")
    # X's value reads stay: they see the target as it is while X runs.
    others = [t for p, t in a.placed_touches_in(path) if p != site.path or not (t.write or t.accumulator)]
    if a.depends(others, [t for t in touches(op, site.chain) if t.write], ("=",) * depth,
                 reorderable_reductions=False):
        return (f"another access inside the scope touches an element of `{op.target.array}` that is being "
                "reduced, so it must see every update as it happens")
    if not partial and _carried_into_load(a, plan.load, plan.chain, depth, path[:-1]):
        return ("an earlier iteration of an enclosing scope writes a reduced element, so loading it into "
                "the accumulator would be a dependent iteration (accumulate_partial adds to it instead)")
    if buffer.location == "shared" and not any(s.kind == "b" for s in site.chain[:depth]):
        return f"`{op.target.array}` is `shared`, and the load and store would lie outside every `:b` scope"
    return None


def transform(a: Analysis, at: Resolved, partial: bool) -> Program:
    """The program after `move` (accumulate, or its partial form)."""
    site, path = at.site, at.path
    plan = Plan(a, site, len(path) - 1, partial)
    body = splice(a.program.body, site.path, (replace(site.op, target=plan.update_target),))
    nodes = (copy_nest(plan.tile_scopes, plan.load), node_at(body, path), copy_nest(plan.tile_scopes, plan.store))
    return with_body(declared(a.program, plan.declaration), splice(body, path, nodes))


def why_not(a: Analysis, at: Resolved) -> str | None:
    return check(a, at, partial=False)


def rewrite(a: Analysis, at: Resolved) -> Program:
    return transform(a, at, partial=False)


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
    (
        # A tile of matmul's `c`: the row's two vectors of columns stay in
        # registers through the whole `k` scope.
        """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap

4 16 c[{0},{1}] = 0
4 8 2:u 8:v c[{0},{2}*8+{3}] += a[{0},{1}] * b[{1},{2}*8+{3}]
""",
        "accumulate(op=c#2, depth=1)",
        """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap
c_acc f32 [4:1, 2, 8] stack

4 16 c[{0},{1}] = 0
4 2:u 8:v c_acc[{0},{1},{2}] = c[{0},{1}*8+{2}]
| 8 2:u 8:v c_acc[{0},{2},{3}] += a[{0},{1}] * b[{1},{2}*8+{3}]
| 2:u 8:v c[{0},{1}*8+{2}] = c_acc[{0},{1},{2}]
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
        # Two iterations of the tile update `t[{1}+{2}]` alike: no element of
        # an accumulator could stand for it.
        """kernel k(x) -> t

x f32 [4, 4, 4] heap
t f32 [8] heap

8 t[{0}] = 0
4 4 4 t[{1}+{2}] += x[{0},{1},{2}]
""",
        "accumulate(op=t#2, depth=0)",
    ),
    (
        # A k block after the first loads what the one before stored: a
        # dependent iteration (accumulate_partial adds to it instead).
        MATMUL_IN_K_BLOCKS,
        "accumulate(op=c#2, depth=2)",
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
