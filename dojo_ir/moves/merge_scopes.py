"""merge_scopes: the inverse of a split.

    N/f f  x[{0}*f+{1}] = ...      ->      N  x[{0}] = ...
    N%f    x[{0}+N/f*f] = ...

`merge_scopes(op=X, depth=d)` merges the sequential scope at depth d with its
only child, a sequential scope of size f. Legal when every reference to the
two scopes comes in the combination `{d}*f+{d+1}` (times a constant), in
indices and in values alike, so that it can be written `{d}` of the merged
scope. The order of iterations is unchanged.

A tail that `split_scope` left (a sequential scope of fewer than f
iterations right after, whose body is the merged body with `{d}` shifted to
start where the tiles end, comments aside) is taken back in: the merged
scope runs its iterations too. Any other next scope stays where it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..affine import Affine, NotAffine, affine
from ..analysis import Analysis
from ..paths import iter_paths, siblings, splice, uncommented, with_body
from ..refs import ref, shifted, substitute_expr
from ..tree import Access, Binary, Call, Expr, Node, Op, Program, Ref, Scope, Unary, walk_expr
from .base import DEPTH, EVERY_TARGET, OP, Move, Resolved

NAME = "merge_scopes"
TITLE = "Merge with the inner scope"
ARGS = (OP, DEPTH)
TARGETS = EVERY_TARGET


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and len(node.body) == 1 and isinstance(node.body[0], Scope):
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


class _Unmergeable(Exception):
    pass


def _merge_form(form: Affine, depth: int, inner: int) -> Affine:
    outer, lane = form.coef(depth), form.coef(depth + 1)
    if outer != lane * inner:
        raise _Unmergeable
    terms = {d - 1 if d > depth + 1 else d: c for d, c in form.terms if d not in (depth, depth + 1)}
    if lane:
        terms[depth] = lane
    return Affine.of(terms, form.const)


def _mentions(expr: Expr, depth: int) -> bool:
    return any(isinstance(e, Ref) and e.depth in (depth, depth + 1) for e in walk_expr(expr))


def _merge_expr(expr: Expr, depth: int, inner: int) -> Expr:
    """Rewrite every maximal affine part that mentions the two scopes."""
    if isinstance(expr, Access):
        return replace(expr, index=tuple(_merge_form(affine(i), depth, inner).to_expr() if _mentions(i, depth)
                                         else _shift(i, depth) for i in expr.index))
    if _mentions(expr, depth):
        try:
            return _merge_form(affine(expr), depth, inner).to_expr()
        except NotAffine:
            pass
    if isinstance(expr, Ref):
        return _shift(expr, depth)
    if isinstance(expr, Unary):
        return replace(expr, operand=_merge_expr(expr.operand, depth, inner))
    if isinstance(expr, Binary):
        return replace(expr, left=_merge_expr(expr.left, depth, inner), right=_merge_expr(expr.right, depth, inner))
    if isinstance(expr, Call):
        return replace(expr, args=tuple(_merge_expr(x, depth, inner) for x in expr.args))
    return expr


def _shift(expr: Expr, depth: int) -> Expr:
    """Renumber references below the merged pair (`{d}` -> `{d-1}`); a lone
    reference to one of the pair cannot be written with the merged scope."""

    def sub(d: int):
        if d in (depth, depth + 1):
            raise _Unmergeable
        return ref(d - 1 if d > depth + 1 else d)

    return substitute_expr(expr, sub)


def _merge_body(nodes: tuple[Node, ...], depth: int, inner: int) -> tuple[Node, ...]:
    merged = []
    for node in nodes:
        if isinstance(node, Op):
            merged.append(replace(node, target=_merge_expr(node.target, depth, inner),
                                  value=_merge_expr(node.value, depth, inner)))
        else:
            merged.append(replace(node, body=_merge_body(node.body, depth, inner)))
    return tuple(merged)


def _merged(a: Analysis, at: Resolved) -> tuple[tuple, Scope, bool] | str:
    """The merged scope's path, the scope, and whether it takes in the tail
    after it; or why the scopes cannot be merged."""
    path, scope = at.path, at.scope
    if len(scope.body) != 1 or not isinstance(scope.body[0], Scope):
        return "the scope does not hold exactly one scope"
    inner = scope.body[0]
    if scope.kind or inner.kind:
        return "both scopes must be sequential"
    try:
        body = _merge_body(inner.body, len(path) - 1, inner.size)
    except _Unmergeable:
        return (f"some reference to the two scopes is not of the form `{{d}}*{inner.size}+{{d+1}}`, "
                "so it cannot be written with one merged scope")
    size, rest = scope.size * inner.size, siblings(a.program.body, path)[path[-1] + 1:]
    if rest and _is_tail(rest[0], body, len(path) - 1, size, inner.size):
        return path, Scope(size + rest[0].size, "", body), True
    return path, Scope(size, "", body), False


def _is_tail(node: Node, body: tuple[Node, ...], depth: int, start: int, factor: int) -> bool:
    """Whether `node` runs `body` on from iteration `start`, as the tail of a split by `factor`."""
    return (isinstance(node, Scope) and not node.kind and node.size < factor
            and uncommented(node.body) == uncommented(shifted(body, depth, start)))


def why_not(a: Analysis, at: Resolved) -> str | None:
    merged = _merged(a, at)
    return merged if isinstance(merged, str) else None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path, scope, with_tail = _merged(a, at)
    body = splice(a.program.body, path, (scope,))
    if with_tail:
        body = splice(body, path[:-1] + (path[-1] + 1,), ())
    return with_body(a.program, body)


EXAMPLES = [
    (
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

2 4 3 y[{0}*4+{1},{2}] = x[{0}*4+{1},{2}] * ({0}*4+{1})
""",
        "merge_scopes(op=y, depth=0)",
        """kernel k(x) -> y

x f32 [8, 3] heap
y f32 [8, 3] heap

8 3 y[{0},{1}] = x[{0},{1}] * {0}
""",
    ),
    (
        # The tail of a split by 4 is taken back in.
        """kernel k(x) -> y

x f32 [10] heap
y f32 [10] heap

2 4 y[{0}*4+{1}] = x[{0}*4+{1}] * ({0} * 4 + {1})
2 y[{0}+8] = x[{0}+8] * ({0} + 8)
""",
        "merge_scopes(op=y#1, depth=0)",
        """kernel k(x) -> y

x f32 [10] heap
y f32 [10] heap

10 y[{0}] = x[{0}] * {0}
""",
    ),
    (
        # The scope after reads other elements than the tiles would next, so it stays.
        """kernel k(x) -> y

x f32 [10] heap
y f32 [10] heap

2 4 y[{0}*4+{1}] = x[{0}*4+{1}]
2 y[{0}+8] = x[{0}+7]
""",
        "merge_scopes(op=y#1, depth=0)",
        """kernel k(x) -> y

x f32 [10] heap
y f32 [10] heap

8 y[{0}] = x[{0}]
2 y[{0}+8] = x[{0}+7]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # `x[{1},{0}]` uses the inner scope alone.
        """kernel k(x) -> y

x f32 [4, 4] heap
y f32 [4, 4] heap

4 4 y[{0},{1}] = x[{1},{0}]
""",
        "merge_scopes(op=y, depth=0)",
    ),
]
