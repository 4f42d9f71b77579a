"""fission: split a scope in two; the inverse of join_scopes.

    N  A               N  A
    |  B       ->      N  B

`fission(op=X, depth=d)` names the scope at depth d around operation X; it
becomes two scopes of the same size and kind, the second starting with the
child that holds X (which must not be the first child). References `{d}`
keep their meaning because both scopes sit at depth d.

Legal when no element is touched by the two parts in different iterations
(one touch a write). Fission runs every iteration of the first part before
any of the second, which reverses exactly the pairs where the first part's
iteration is later (`>`); the `<` pairs are refused too, so that
join_scopes, which asks the same question, can always undo the move. Two
updates of the same reduction operator may be reordered (that only
reassociates).

The dependent-iteration rule accepts a read that an earlier iteration of a
scope could feed when the same iteration writes the element first, from a
scope the two share. Split, a read of the second part no longer shares the
split scope with a writer in the first, so such a read that uses the split
scope (or a deeper one) in its index is refused (see `_loses_a_kill`).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..affine import affine
from ..analysis import Analysis
from ..dependence import Touch
from ..paths import TreePath, iter_paths, splice, with_body
from ..tree import Program, Scope
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved
from .examples import FUSED_SOFTMAX

NAME = "fission"
TITLE = "Split the scope before this statement"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope):
            for child in range(1, len(node.body)):
                site = a.first_site(path + (child,))
                yield Move(NAME, (("op", site.label), ("depth", len(path) - 1)), site.line)


def _parts(a: Analysis, at: Resolved) -> tuple[TreePath, Scope, int]:
    """The scope's path, the scope, and the index of the child that starts the second part."""
    site, path, scope = at.site, at.path, at.scope
    return path, scope, site.path[len(path)]


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope, cut = _parts(a, at)
    if scope.kind:
        return f"the scope is mapped (`{scope.token}`); only a sequential scope can be split in two, so unmap it first"
    if cut == 0:
        return f"`{at.arg('op')}` is in the scope's first child, so the first part would be empty"
    depth = len(path) - 1
    first = [t for i in range(cut) for t in a.touches_in(path + (i,))]
    second = [t for i in range(cut, len(scope.body)) for t in a.touches_in(path + (i,))]
    for relation in ("<", ">"):
        if a.depends(first, second, ("=",) * depth + (relation,)):
            return ("the two parts touch the same element in different iterations, so running all of the first "
                    "part before the second would change the order of a write and another access")
    if _loses_a_kill(a, path, second):
        return ("the second part reads an element that an earlier iteration of an enclosing scope writes; only "
                "a write earlier in the same iteration makes that legal, and once the scope is split the "
                "dependent-iteration rule may no longer see it")
    return None


def _loses_a_kill(a: Analysis, path: TreePath, second: list[Touch]) -> bool:
    """The dependent-iteration rule lets a read take a value written in an
    earlier iteration of a scope when the same iteration writes the element
    first, with the same index, in a scope that the read shares and that its
    index does not use. A read of the second part that uses the split scope
    or a deeper one no longer shares the split scope with a writer in the
    first part, so any such read that an earlier iteration of an enclosing
    scope can reach (other than a reduction's accumulator fed by its own
    operator or a plain write) is refused, whether or not such a writer hid
    it: the test is safe rather than exact."""
    depth = len(path) - 1
    logical = frozenset(b.name for b in a.program.buffers)
    for read in second:
        if read.write or all(d < depth for i in read.access.index for d in affine(i).depths):
            continue
        for k in range(depth):
            writes = [w for w in a.touches_in(path[: k + 1]) if w.write
                      and not (read.accumulator and w.op.reduction in (None, read.op.reduction))]
            if a.depends(writes, [read], ("=",) * k + ("<",), reorderable_reductions=False, private=logical):
                return True
    return False


def rewrite(a: Analysis, at: Resolved) -> Program:
    path, scope, cut = _parts(a, at)
    parts = (Scope(scope.size, scope.kind, scope.body[:cut]), Scope(scope.size, scope.kind, scope.body[cut:]))
    return with_body(a.program, splice(a.program.body, path, parts))


EXAMPLES = [
    (
        # A fused softmax row split where the sum begins: the second part
        # reads `e` only in the row that wrote it.
        FUSED_SOFTMAX,
        "fission(op=s#1, depth=0)",
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
4 s[{0}] = 0
| 8 s[{0}] += e[{0},{1}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # A mapped scope must be unmapped before it is split.
        """kernel k(x) -> y, z

x f32 [4, 8] heap
y f32 [4, 8] heap
z f32 [4, 8] heap

4 8:u y[{0},{1}] = x[{0},{1}] + 1
| |   z[{0},{1}] = y[{0},{1}] * 2
""",
        "fission(op=z, depth=1)",
    ),
    (
        # Iteration i reads t[i+1] before iteration i+1 overwrites it; split,
        # every write would come before every read.
        """kernel k(x) -> y

x f32 [5] heap
y f32 [4] heap
t f32 [5] heap

5 t[{0}] = x[{0}]
4 t[{0}] = x[{0}] * 2
| y[{0}] = t[{0}+1]
""",
        "fission(op=y, depth=0)",
    ),
    (
        # Each row rewrites `t` before reading it, which is what makes the
        # read legal; split, the read would take `t[{1}]` from the previous
        # row's first part as far as the dependent-iteration rule can tell.
        """kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [8] heap

4 8 t[{1}] = x[{0},{1}]
| | y[{0},{1}] = t[{1}] * 2
""",
        "fission(op=y, depth=1)",
    ),
    (
        # `m#1` is the scope's first child: there is nothing to split off before it.
        """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 y[{0},{1}] = exp(x[{0},{1}] - m[{0}])
""",
        "fission(op=m#1, depth=0)",
    ),
]
