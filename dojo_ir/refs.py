"""The scope references `{d}` of operations: rewriting them when scopes move,
and asking where one is used as a number.

When scopes are split, merged or swapped, `{d}` in the operations below them
must be renumbered or replaced. Indices are rewritten through their affine
form and printed back in natural form (`{0}*1024+{1}*512+{2}`); an index that
only renumbers keeps the text it had. Values (`{d}` used as a number) are
rewritten structurally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .affine import Affine, affine
from .tree import Access, Binary, Call, Expr, Node, Op, Ref, Unary, map_leaves

Substitution = Callable[[int], Affine]  # old depth -> its value in the new scopes


def _is_ref(form: Affine) -> int | None:
    return form.terms[0][0] if form.const == 0 and len(form.terms) == 1 and form.terms[0][1] == 1 else None


def substitute_expr(expr: Expr, sub: Substitution) -> Expr:
    """`expr` with every `{d}` replaced by `sub(d)`."""
    def leaf(e: Expr) -> Expr:
        if isinstance(e, Ref):
            form = sub(e.depth)
            depth = _is_ref(form)
            return Ref(depth) if depth is not None else form.to_expr()
        if isinstance(e, Access):
            return replace(e, index=tuple(_index(i, sub) for i in e.index))
        return e

    return map_leaves(expr, leaf)


def _index(index: Expr, sub: Substitution) -> Expr:
    form = affine(index)
    new = Affine(form.const)
    renumber_only = True
    for depth, coef in form.terms:
        replacement = sub(depth)
        renumber_only &= _is_ref(replacement) is not None
        new = new + replacement.scale(coef)
    return substitute_expr(index, sub) if renumber_only else new.to_expr()


def substitute_op(op: Op, sub: Substitution) -> Op:
    return replace(op, target=substitute_expr(op.target, sub), value=substitute_expr(op.value, sub))


def substitute(nodes: tuple[Node, ...], sub: Substitution) -> tuple[Node, ...]:
    """`nodes` with every `{d}` in their operations replaced by `sub(d)`."""
    return tuple(
        substitute_op(n, sub) if isinstance(n, Op) else replace(n, body=substitute(n.body, sub)) for n in nodes
    )


def ref(depth: int) -> Affine:
    return Affine(0, ((depth, 1),))


def shifted(nodes: tuple[Node, ...], depth: int, start: int) -> tuple[Node, ...]:
    """`nodes`, the body of a scope at `depth`, as the body of a scope whose
    iterations begin at `start`: `{depth}` becomes `{depth}+start`."""
    return substitute(nodes, lambda d: ref(d) + Affine(start) if d == depth else ref(d))


def used_as_value(expr: Expr, depth: int) -> bool:
    """Does `{depth}` occur in `expr` outside the indices of its accesses?"""
    if isinstance(expr, Ref):
        return expr.depth == depth
    if isinstance(expr, Unary):
        return used_as_value(expr.operand, depth)
    if isinstance(expr, Binary):
        return used_as_value(expr.left, depth) or used_as_value(expr.right, depth)
    if isinstance(expr, Call):
        return any(used_as_value(arg, depth) for arg in expr.args)
    return False
