"""The padding of a temporary's rows that a widened vector reads is zeroed before it is read
(codegen/padding.py): a row of 6 lanes computed as a vector of 8 loads two elements that no
operation writes, and memory nothing wrote is often subnormal when read as floats, which costs
Intel cores a microcode assist per multiply-add (conv2's schedule ran 5.5x slower for it)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from agent.passes import heuristic
from codegen import generate, get_target
from codegen.build import build
from codegen.c import generate_c
from codegen.padding import read_padding
from dojo_ir import interpret, load, random_inputs
from dojo_ir.derivation import advance
from dojo_ir.library import KERNELS
from runner.verify import decode, encode

# A staged row of 8 of x's elements, padded to 16, read by a 6-lane reduction three times over:
# as one vector of 8, its reads reach index 2 + 7 = 9, past the 7 that any access reaches.
STAGED = """\
kernel staged(x, w) -> y

x f32 [4, 56] heap
w f32 [3] heap
y f32 [4, 6] heap
s f32 [4, 16] {location}

4 8:v s[{{0}},{{1}}] = x[{{0}},{{1}}+48]
4 6 y[{{0}},{{1}}] = 0
4 3 6:v y[{{0}},{{2}}] += s[{{0}},{{1}}+{{2}}] * w[{{1}}]
"""

ZEROED = ["for (long dojo_r = 0; dojo_r < 4; ++dojo_r)",
          "    for (long dojo_k = 8; dojo_k < 16; ++dojo_k) b_s[dojo_r * 16 + dojo_k] = 0;"]


def kernel_lines(program) -> list[str]:
    source = generate_c(program, get_target("native"), with_main=False)
    return [line.strip() for line in source[source.index("static void kernel("):].splitlines()]


@pytest.mark.parametrize("location", ["stack", "heap"])
def test_the_padding_a_widened_read_reaches_is_zeroed_before_the_kernel_reads_it(location: str) -> None:
    program = load(STAGED.format(location=location))
    assert read_padding(program) == {"s": 8}
    lines = kernel_lines(program)
    zeroed = next(i for i, line in enumerate(lines) if line == ZEROED[0].strip())
    assert lines[zeroed + 1] == ZEROED[1].strip()
    first_use = next(i for i, line in enumerate(lines)
                     if "b_s[" in line and "dojo_r" not in line and "aligned(64)" not in line)
    assert zeroed < first_use
    if location == "stack":  # right after its declaration, each time it is declared
        assert lines[zeroed - 1] == "float b_s[64] __attribute__((aligned(64)));"


def test_the_staged_kernel_still_matches_the_interpreter(tmp_path) -> None:
    target = get_target("native")
    if not target.runnable():
        pytest.skip("needs gcc for this host")
    program = load(STAGED.format(location="stack"))
    inputs = random_inputs(program, seed=3)
    binary = build(generate(program, target), target, tmp_path)
    (tmp_path / "in").write_bytes(encode(program, inputs))
    subprocess.run([str(binary.path), str(tmp_path / "in"), str(tmp_path / "out"), "0", "0", "1"], check=True)
    actual = decode(program, (tmp_path / "out").read_bytes())
    np.testing.assert_allclose(actual["y"], interpret(program, inputs)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text", [
    STAGED.format(location="stack").replace("s f32 [4, 16]", "s f32 [4, 8]"),  # too short to load whole: 6 lanes loaded
    STAGED.format(location="stack").replace("6:v y[{0},{2}] +=", "6 y[{0},{2}] +="),  # not a vector
])
def test_no_padding_is_zeroed_where_no_widened_read_reaches_it(text: str) -> None:
    program = load(text)
    assert read_padding(program) == {}
    assert not any("dojo_r" in line for line in kernel_lines(program))


def test_the_tuned_conv2_zeroes_its_staged_rows_padding() -> None:
    """The heuristic stages the input rows that the 6-lane tail of conv2's output rows read, padded
    from 8 to 16: the 8 elements past the staged ones are zeroed, the accumulators' 2 too. (With
    56 output channels, no whole vectors of 16: with 64 the channels would take the vectors.)"""
    spec = load(KERNELS["conv2"].text(co=56))
    tuned = advance(spec, heuristic(spec, get_target("x86-avx512")))
    padding = read_padding(tuned)
    staged = next(b for b in tuned.buffers if b.name.startswith("x_s"))
    assert padding[staged.name] == 8 and staged.dims[-1].size == 16
