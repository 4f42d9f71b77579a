"""The integer feasibility solver behind the dependence analysis
(`dojo_ir.solve`): does an integer point in a box satisfy a few linear
equalities (`sum + const == 0`) and inequalities (`sum + const <= 0`)?"""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dojo_ir.solve import Constraint, feasible


def eq(const: int, *coefs: tuple[int, int]) -> Constraint:
    return Constraint(tuple(coefs), const, True)


def le(const: int, *coefs: tuple[int, int]) -> Constraint:
    return Constraint(tuple(coefs), const, False)


@pytest.mark.parametrize(
    "bounds, constraints, expected",
    [
        pytest.param([(0, 9)], [], True, id="no-constraints"),
        pytest.param([], [], True, id="no-variables"),
        pytest.param([], [le(1)], False, id="false-constant-inequality"),
        pytest.param([(0, 9)], [eq(-7, (0, 1))], True, id="x-equals-7"),
        pytest.param([(0, 5)], [eq(-7, (0, 1))], False, id="x-equals-7-outside-the-box"),
        pytest.param([(0, 9), (0, 9)], [eq(-3, (0, 1), (1, 1))], True, id="x-plus-y-equals-3"),
        pytest.param([(0, 9), (0, 9)], [eq(-7, (0, 2), (1, 4))], False, id="gcd-2x-plus-4y-equals-7"),
        pytest.param([(0, 99), (0, 99), (0, 99)], [eq(-31, (0, 6), (1, 10), (2, 15))], True, id="gcd-is-one"),
        pytest.param([(0, 99), (0, 99), (0, 99)], [eq(-5, (0, 6), (1, 10), (2, 15))], False, id="gcd-passes-box-fails"),
        pytest.param([(-50, 50), (-50, 50)], [eq(-1, (0, 3), (1, -6))], False, id="gcd-3x-minus-6y-equals-1"),
        pytest.param(
            # a later iteration (i < i') of `z[{0}+1]` and `z[{0}]`: i + 1 == i'
            [(0, 6), (0, 6)], [eq(1, (0, 1), (1, -1)), le(1, (0, 1), (1, -1))], True, id="shift-by-one-is-carried",
        ),
        pytest.param(
            # `c[{0}*4+{1}]` against itself in a later iteration of {0}: 4i + j == 4i' + j', i < i', 0 <= j, j' < 4
            [(0, 3), (0, 3), (0, 3), (0, 3)],
            [eq(0, (0, 4), (1, 1), (2, -4), (3, -1)), le(1, (0, 1), (2, -1))],
            False,
            id="tiled-index-is-not-carried",
        ),
        pytest.param([(0, 9), (0, 9)], [le(1, (0, 1), (1, -1)), le(1, (1, 1), (0, -1))], False, id="x-lt-y-and-y-lt-x"),
        pytest.param([(0, 3)], [le(5, (0, -2))], True, id="negative-coefficient-inequality"),
        pytest.param([(0, 1)], [le(5, (0, -2))], False, id="negative-coefficient-inequality-outside-the-box"),
        pytest.param(
            [(0, 1000), (0, 1000)], [eq(-1001, (0, 2), (1, 2))], False, id="odd-target-even-coefficients-wide-box",
        ),
        pytest.param([(0, 1000), (0, 1000)], [eq(-999, (0, 3), (1, 5))], True, id="wide-box-with-a-solution"),
    ],
)
def test_hand_made_systems(bounds, constraints, expected) -> None:
    assert feasible(bounds, constraints) is expected


def test_the_budget_turns_into_unknown_not_into_a_wrong_answer() -> None:
    # feasible (x = y = z = 0), but bound propagation alone cannot show it: the box must be split,
    # and a one-step budget allows no split
    bounds = [(0, 1000), (0, 1000), (0, 1000)]
    constraints = [eq(0, (0, 1), (1, 1), (2, -1)), le(-10, (2, -1))]
    assert feasible(bounds, constraints, budget=1) is None
    assert feasible(bounds, constraints) is True


def test_the_input_bounds_are_not_modified() -> None:
    bounds = [(0, 9), (0, 9)]
    feasible(bounds, [eq(-3, (0, 1), (1, 1))])
    assert bounds == [(0, 9), (0, 9)]


# -- against brute force -------------------------------------------------------------------


@st.composite
def systems(draw):
    n = draw(st.integers(2, 4))
    bounds = []
    for _ in range(n):
        low = draw(st.integers(-3, 3))
        bounds.append((low, low + draw(st.integers(0, 5))))  # at most 6 values
    constraints = []
    for _ in range(draw(st.integers(1, 3))):
        coefs = tuple((v, c) for v in range(n) if (c := draw(st.integers(-4, 4))))
        constraints.append(Constraint(coefs, draw(st.integers(-12, 12)), draw(st.booleans())))
    return bounds, constraints


def brute_force(bounds, constraints) -> bool:
    for point in product(*(range(low, high + 1) for low, high in bounds)):
        if all(
            (c.const + sum(a * point[v] for v, a in c.coefs)) == 0
            if c.equality
            else (c.const + sum(a * point[v] for v, a in c.coefs)) <= 0
            for c in constraints
        ):
            return True
    return False


@settings(max_examples=400, deadline=None)
@given(systems())
def test_feasible_agrees_with_brute_force(system) -> None:
    bounds, constraints = system
    answer = feasible(bounds, constraints)
    if answer is None:  # allowed only when the budget ran out; it must not on systems this small
        assert feasible(bounds, constraints, budget=10**6) is not None
        answer = feasible(bounds, constraints, budget=10**6)
    assert answer is brute_force(bounds, constraints)


@settings(max_examples=200, deadline=None)
@given(systems(), st.integers(1, 8))
def test_a_small_budget_answers_unknown_or_right(system, budget: int) -> None:
    bounds, constraints = system
    answer = feasible(bounds, constraints, budget=budget)
    assert answer is None or answer is brute_force(bounds, constraints)
