"""Integer feasibility of small linear systems over boxes.

Dependence questions ("can an element written in iteration i be read in a
later iteration?") become: do integers x_k with lo_k <= x_k <= hi_k satisfy a
few linear equalities and inequalities? Scope sizes are known, so the box is
finite and the question is decidable. This solver propagates bounds, applies
the GCD test, and splits the widest domain; on the affine systems that
kernels produce it settles in a handful of steps. When a problem outgrows the
step budget it answers None (unknown), and each caller decides which way to
be conservative.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

Coefs = tuple[tuple[int, int], ...]  # (variable, coefficient) pairs


@dataclass(frozen=True, slots=True)
class Constraint:
    """`sum(c * x[v]) + const == 0` (equality) or `<= 0` (otherwise)."""

    coefs: Coefs
    const: int
    equality: bool


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _propagate(lo: list[int], hi: list[int], constraints: list[Constraint]) -> bool:
    """Tighten the bounds to a fixed point; False if some domain empties."""
    changed = True
    rounds = 0
    while changed and rounds < 64:
        changed = False
        rounds += 1
        for c in constraints:
            low = high = c.const
            for v, a in c.coefs:
                if a > 0:
                    low += a * lo[v]
                    high += a * hi[v]
                else:
                    low += a * hi[v]
                    high += a * lo[v]
            if low > 0 or (c.equality and high < 0):
                return False
            for v, a in c.coefs:
                # Bounds on a*x[v] from the rest of the sum.
                rest_low = low - (a * lo[v] if a > 0 else a * hi[v])
                upper = -rest_low  # a*x <= -rest_low
                if a > 0:
                    new_hi = upper // a
                    if new_hi < hi[v]:
                        hi[v], changed = new_hi, True
                else:
                    new_lo = _ceil_div(upper, a)
                    if new_lo > lo[v]:
                        lo[v], changed = new_lo, True
                if c.equality:
                    rest_high = high - (a * hi[v] if a > 0 else a * lo[v])
                    lower = -rest_high  # a*x >= -rest_high
                    if a > 0:
                        new_lo = _ceil_div(lower, a)
                        if new_lo > lo[v]:
                            lo[v], changed = new_lo, True
                    else:
                        new_hi = lower // a
                        if new_hi < hi[v]:
                            hi[v], changed = new_hi, True
                if lo[v] > hi[v]:
                    return False
    return True


def _gcd_fails(constraints: list[Constraint], lo: list[int], hi: list[int]) -> bool:
    for c in constraints:
        if not c.equality:
            continue
        g = 0
        const = c.const
        for v, a in c.coefs:
            if lo[v] == hi[v]:
                const += a * lo[v]
            else:
                g = gcd(g, a)
        if (g == 0 and const != 0) or (g and const % g):
            return True
    return False


def _holds(c: Constraint, point: list[int]) -> bool:
    value = c.const + sum(a * point[v] for v, a in c.coefs)
    return value == 0 if c.equality else value <= 0


def _eliminate(bounds: list[tuple[int, int]], constraints: list[Constraint]) -> list[Constraint] | None:
    """Solve every equality that has a unit coefficient for that variable and
    substitute it everywhere, so that the usual index equations (`{0} = {0}`,
    `{0}*512+{1} = ...`) disappear before any search. The eliminated
    variable's bounds become inequalities. None if a constant constraint
    fails."""
    rows = [(dict(c.coefs), c.const, c.equality) for c in constraints]
    while True:
        pivot = next(((i, v) for i, (coefs, _, eq) in enumerate(rows) if eq
                      for v, a in coefs.items() if a in (1, -1)), None)
        if pivot is None:
            break
        i, var = pivot
        coefs, const, _ = rows.pop(i)
        sign = coefs.pop(var)
        # var = -sign * (const + sum(coefs))
        value = {v: -sign * a for v, a in coefs.items()}
        value_const = -sign * const
        lo, hi = bounds[var]
        rows.append(({v: -a for v, a in value.items()}, lo - value_const, False))  # lo <= var
        rows.append((dict(value), value_const - hi, False))  # var <= hi
        substituted = []
        for other, other_const, eq in rows:
            a = other.pop(var, 0)
            if a:
                for v, b in value.items():
                    other[v] = other.get(v, 0) + a * b
                other_const += a * value_const
                other = {v: b for v, b in other.items() if b}
            substituted.append((other, other_const, eq))
        rows = substituted
    kept = []
    for coefs, const, eq in rows:
        if not coefs:
            if (eq and const != 0) or const > 0:
                return None
            continue
        kept.append(Constraint(tuple(coefs.items()), const, eq))
    return kept


def feasible(bounds: list[tuple[int, int]], constraints: list[Constraint], budget: int = 4096) -> bool | None:
    """True if an integer point in `bounds` satisfies every constraint, False
    if none does, None if the step budget ran out first."""
    if any(lo > hi for lo, hi in bounds):
        return False
    reduced = _eliminate(bounds, constraints)
    if reduced is None:
        return False
    used = sorted({v for c in reduced for v, _ in c.coefs})
    if not used:
        return True
    renumber = {v: i for i, v in enumerate(used)}
    constraints = [Constraint(tuple((renumber[v], a) for v, a in c.coefs), c.const, c.equality) for c in reduced]
    steps = 0
    stack = [([bounds[v][0] for v in used], [bounds[v][1] for v in used])]
    while stack:
        steps += 1
        if steps > budget:
            return None
        lo, hi = stack.pop()
        if not _propagate(lo, hi, constraints) or _gcd_fails(constraints, lo, hi):
            continue
        widest = max(range(len(lo)), key=lambda v: hi[v] - lo[v])
        if lo[widest] == hi[widest]:
            if all(_holds(c, lo) for c in constraints):
                return True
            continue
        mid = (lo[widest] + hi[widest]) // 2
        upper_lo, upper_hi = lo[:], hi[:]
        upper_lo[widest] = mid + 1
        hi[widest] = mid
        stack.append((upper_lo, upper_hi))
        stack.append((lo, hi))
    return False
