"""The paper's Figure 5, played with our moves: the softmax spec taken to a
fused, register-accumulating, vectorized, parallel program, one legal move at a
time, and the result checked against the spec. Each move must be among the
legal moves listed at that point, and the recorded derivation must replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dojo_ir import check, interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import record, verify
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "softmax.dojo"
# The walk of examples/softmax.dojo: fuse the six row loops; keep the row max
# and sum in registers; one row of temporaries at a time on the stack; tile
# each row loop by 16 and vectorize the tiles; rows in parallel.
MOVES = load(EXAMPLE.read_text()).derivation.moves

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


def test_the_example_file_replays_from_the_library_spec_at_the_paper_shape() -> None:
    example = load(EXAMPLE.read_text())
    assert verify(example, load(KERNELS["softmax"].text())) == []


def test_the_walk_replays_from_its_recorded_derivation() -> None:
    spec, program = optimise()
    derived = load(to_text(record(program, MOVES, "softmax.dojo")))
    assert verify(derived, spec) == []
