"""split_scope by a factor that does not divide the scope, beyond its own examples: which factors
are listed, which are legal, and that for any size and factor the tiles and the tail compute what
the scope did, print and parse back, pass the checker and merge back into it."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.moves import apply, find, why_not
from dojo_ir.tree import Program

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rows(n: int, m: int) -> Program:
    """Two operations and a deeper scope in a scope of n rows: `{0}` as a value and in indices,
    `{1}` of the inner scopes in indices and as a value."""
    return load(f"""kernel k(x) -> y, s

x f32 [{n}, {m}] heap
y f32 [{n}, {m}] heap
s f32 [{n}] heap

{n} s[{{0}}] = {{0}}
| {m} y[{{0}},{{1}}] = x[{{0}},{{1}}] * {{1}} + s[{{0}}]
| {m} s[{{0}}] += y[{{0}},{{1}}]
""")


def factors_listed(program: Program, op: str, depth: int) -> list[int]:
    return [dict(m.args)["factor"] for m in find(program)
            if m.name == "split_scope" and dict(m.args)["op"] == op and dict(m.args)["depth"] == depth]


def test_the_listing_offers_divisors_small_factors_and_powers_of_two() -> None:
    assert factors_listed(rows(40, 3), "s#1", 0) == list(range(2, 17)) + [20, 32]
    assert factors_listed(rows(1024, 3), "s#1", 0) == list(range(2, 17)) + [32, 64, 128, 256, 512]
    assert factors_listed(rows(5, 3), "s#1", 0) == [2, 3, 4]
    assert factors_listed(rows(2, 3), "s#1", 0) == []


def test_a_factor_that_is_not_listed_is_legal_when_written() -> None:
    program = rows(40, 3)
    assert 17 not in factors_listed(program, "s#1", 0)
    assert why_not(program, "split_scope(op=s#1, depth=0, factor=17)") is None
    text = to_text(apply(program, "split_scope(op=s#1, depth=0, factor=17)"))
    assert "\n2 17 s[{0}*17+{1}] = {0} * 17 + {1}\n" in text
    assert "\n6 s[{0}+34] = {0} + 34\n" in text


def test_only_a_mapped_scope_or_a_factor_outside_one_to_the_size_is_refused() -> None:
    program = rows(40, 3)
    for factor in (40, 41):
        reason = why_not(program, f"split_scope(op=s#1, depth=0, factor={factor})")
        assert reason == "the factor must lie strictly between 1 and the scope's size, 40"
    unrolled = apply(program, "unroll_scope(op=y, depth=1)")
    assert "mapped" in why_not(unrolled, "split_scope(op=y, depth=1, factor=2)")


@PROPERTY
@given(st.integers(3, 40), st.integers(3, 12), st.booleans(), st.data())
def test_tiles_and_tail_compute_what_the_scope_did(n: int, m: int, inner: bool, data: st.DataObject) -> None:
    program = rows(n, m)
    op, depth, size = ("y", 1, m) if inner else ("s#1", 0, n)
    factor = data.draw(st.integers(2, size - 1), label="factor")
    move = f"split_scope(op={op}, depth={depth}, factor={factor})"
    split = apply(program, move)
    assert load(to_text(split)) == split
    assert check(split) == []
    # the scope's place holds the tiles, then the tail if there is one
    around = split.body[0].body if inner else split.body
    at, tail = (1 if inner else 0), size % factor
    assert len(around) == (3 if inner else 1) + bool(tail)
    assert (around[at].size, around[at].body[0].size) == (size // factor, factor)
    assert not tail or around[at + 1].size == tail
    inputs = random_inputs(program, n * m)
    expected, actual = interpret(program, inputs), interpret(split, inputs)
    for name in program.outputs:  # the same operations in the same order: the same bits
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=f"{move}\n{to_text(split)}")
    tiled = "y#1" if inner and tail else op  # the tail writes `y` too
    assert apply(split, f"merge_scopes(op={tiled}, depth={depth})") == program


def test_a_tail_may_not_share_what_each_thread_of_a_parallel_scope_holds_alone() -> None:
    """Each thread of the `:p` scope has its own row `t` (as the code generator declares it inside
    the loop): a split by a divisor keeps that, and so does any split inside the `:p` scope; a tail
    outside it would copy the scope, and `t`, used by both copies, would be declared outside them."""
    program = load("""kernel k(x) -> y

x f32 [10, 4, 8] heap
y f32 [10, 4, 8] heap
t f32 [10:1, 4:1, 8] stack

10 4:p 8 t[{0},{1},{2}] = x[{0},{1},{2}] * 2
|  |   8 y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""")
    assert "holds its own `t`" in why_not(program, "split_scope(op=t, depth=0, factor=3)")
    assert why_not(program, "split_scope(op=t, depth=0, factor=5)") is None
    assert why_not(program, "split_scope(op=t, depth=2, factor=3)") is None
    shared = apply(program, "unmap_scope(op=t, depth=1)")  # sequential: nothing is private
    assert why_not(shared, "split_scope(op=t, depth=0, factor=3)") is None
