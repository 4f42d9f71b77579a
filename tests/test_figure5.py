"""The paper's Figure 5, played with our moves: the softmax spec taken to a
fused, register-accumulating, vectorized, parallel program, one legal move at a
time, and the result checked against the spec. Each move must be among the
legal moves listed at that point, and the recorded derivation must replay."""

from __future__ import annotations

import numpy as np

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.derivation import record, verify
from dojo_ir.library import KERNELS
from dojo_ir.moves import Analysis, apply, find

MOVES = [
    # Fuse the six row loops into one (five joins of the first scope with the next).
    *["join_scopes(op=m#1, depth=0)"] * 5,
    # Keep the row max and the row sum in registers while they are reduced.
    "accumulate(op=m#2, depth=1)",
    "accumulate(op=s#2, depth=1)",
    # One row of temporaries at a time, on the stack (Figure 6's reuse_dims).
    "reuse_dims(buffer=m, dim=0)",
    "set_location(buffer=m, location=stack)",
    "reuse_dims(buffer=e, dim=0)",
    "set_location(buffer=e, location=stack)",
    "reuse_dims(buffer=s, dim=0)",
    "set_location(buffer=s, location=stack)",
    # Tile each row loop by the vector width and vectorize the tiles.
    "split_scope(op=m_acc#2, depth=1, factor=16)",
    "vectorize_scope(op=m_acc#2, depth=2)",
    "split_scope(op=e, depth=1, factor=16)",
    "vectorize_scope(op=e, depth=2)",
    "split_scope(op=s_acc#2, depth=1, factor=16)",
    "vectorize_scope(op=s_acc#2, depth=2)",
    "split_scope(op=y, depth=1, factor=16)",
    "vectorize_scope(op=y, depth=2)",
    # Rows in parallel.
    "parallelize_scope(op=m#1, depth=0)",
]

OPTIMISED_BODY = """\
8:p m[{0}] = -inf
|   m_acc[{0}] = m[{0}]
|   4 16:v m_acc[{0}] max= x[{0},{1}*16+{2}]
|   m[{0}] = m_acc[{0}]
|   4 16:v e[{0},{1}*16+{2}] = exp(x[{0},{1}*16+{2}] - m[{0}])
|   s[{0}] = 0
|   s_acc[{0}] = s[{0}]
|   4 16:v s_acc[{0}] += e[{0},{1}*16+{2}]
|   s[{0}] = s_acc[{0}]
|   4 16:v y[{0},{1}*16+{2}] = e[{0},{1}*16+{2}] / s[{0}]
"""


def optimise():
    spec = load(KERNELS["softmax"].text(m=8, n=64))
    program = spec
    for move in MOVES:
        analysis = Analysis(program)
        assert move in [str(m) for m in find(program, analysis)], f"{move} is not listed"
        program = apply(program, move, analysis)
    return spec, program


def test_softmax_reaches_a_fused_vectorized_parallel_register_accumulating_program() -> None:
    spec, program = optimise()
    text = to_text(program)
    assert text.endswith(OPTIMISED_BODY)
    assert "m f32 [8:1] stack" in text and "e f32 [8:1, 64] stack" in text
    assert check(load(text)) == []
    inputs = random_inputs(spec, seed=5)
    expected, actual = interpret(spec, inputs)["y"], interpret(program, inputs)["y"]
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)


def test_the_walk_replays_from_its_recorded_derivation() -> None:
    spec, program = optimise()
    derived = load(to_text(record(program, MOVES, "softmax.dojo")))
    assert verify(derived, spec) == []
