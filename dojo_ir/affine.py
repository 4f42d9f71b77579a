"""Affine index expressions: `c + sum(a_d * {d})` with integer coefficients.

Index expressions are kept in the tree as written; analyses and moves work on
their affine form, and moves that rewrite an index print it back from this
form so that rewritten indices read the way a person would write them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .tree import Binary, Expr, Num, Ref, Unary


class NotAffine(ValueError):
    """The expression is not an integer affine function of scope references.
    `node` is the offending sub-expression and `reason` says what it is."""

    def __init__(self, node: Expr, reason: str):
        super().__init__(reason)
        self.node = node
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Affine:
    """`const + sum(coef * {depth} for depth, coef in terms)`; terms are
    sorted by depth and never hold a zero coefficient."""

    const: int
    terms: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(terms: dict[int, int], const: int = 0) -> Affine:
        return Affine(const, tuple(sorted((d, c) for d, c in terms.items() if c)))

    @property
    def coefs(self) -> dict[int, int]:
        return dict(self.terms)

    def coef(self, depth: int) -> int:
        for d, c in self.terms:
            if d == depth:
                return c
        return 0

    @property
    def depths(self) -> frozenset[int]:
        return frozenset(d for d, _ in self.terms)

    def __add__(self, other: Affine) -> Affine:
        coefs = self.coefs
        for d, c in other.terms:
            coefs[d] = coefs.get(d, 0) + c
        return Affine.of(coefs, self.const + other.const)

    def scale(self, k: int) -> Affine:
        return Affine.of({d: c * k for d, c in self.terms}, self.const * k)

    def __neg__(self) -> Affine:
        return self.scale(-1)

    def __sub__(self, other: Affine) -> Affine:
        return self + (-other)

    def bounds(self, extents: dict[int, int] | list[int] | tuple[int, ...]) -> tuple[int, int]:
        """The least and greatest value over `0 <= {d} < extents[d]`."""
        lo = hi = self.const
        for d, c in self.terms:
            top = c * (extents[d] - 1)
            lo += min(0, top)
            hi += max(0, top)
        return lo, hi

    def evaluate(self, values) -> int:
        return self.const + sum(c * values[d] for d, c in self.terms)

    def substitute(self, depth: int, replacement: Affine) -> Affine:
        """Replace `{depth}` by `replacement`."""
        c = self.coef(depth)
        rest = Affine(self.const, tuple(t for t in self.terms if t[0] != depth))
        return rest + replacement.scale(c) if c else self

    def to_expr(self) -> Expr:
        """The shortest natural text: `{0}*512+{1}`, `{0}-1`, `3`."""
        expr: Expr | None = None
        for d, c in self.terms:
            term: Expr = Ref(d)
            if abs(c) != 1:
                term = Binary("*", term, Num(str(abs(c))))
            if expr is None:
                expr = Unary("-", term) if c < 0 else term
            else:
                expr = Binary("-" if c < 0 else "+", expr, term)
        if expr is None:
            return Num(str(self.const)) if self.const >= 0 else Unary("-", Num(str(-self.const)))
        if self.const:
            expr = Binary("-" if self.const < 0 else "+", expr, Num(str(abs(self.const))))
        return expr


@lru_cache(maxsize=65536)
def affine(expr: Expr) -> Affine:
    """The affine form of an index expression, or NotAffine naming the part
    that is not (a product of two references, a division, a float, ...)."""
    if isinstance(expr, Num):
        if not expr.is_integer:
            raise NotAffine(expr, f"`{expr.text}` is not an integer")
        return Affine(int(expr.text))
    if isinstance(expr, Ref):
        return Affine(0, ((expr.depth, 1),))
    if isinstance(expr, Unary):
        return -affine(expr.operand)
    if isinstance(expr, Binary):
        if expr.op == "+":
            return affine(expr.left) + affine(expr.right)
        if expr.op == "-":
            return affine(expr.left) - affine(expr.right)
        if expr.op == "*":
            left, right = affine(expr.left), affine(expr.right)
            if not left.terms:
                return right.scale(left.const)
            if not right.terms:
                return left.scale(right.const)
            raise NotAffine(expr, "a product of two scope references is not affine")
        raise NotAffine(expr, "division is not allowed in an index")
    raise NotAffine(expr, f"{type(expr).__name__.lower()} is not allowed in an index")
