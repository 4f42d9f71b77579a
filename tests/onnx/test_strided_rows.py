"""A convolution strided along its rows in the direct form reads its input split into phases
(libgen/onnx/strided_rows.py): each tap a contiguous row, where the stride made it a gather."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.passes import heuristic
from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import advance
from runner.local import LocalRunner
from tests.onnx.single_node import check_node, normal

CASES = [
    # x, w, attributes: rows too long, or channels too few, for channels as lanes
    ((1, 3, 40, 40), (8, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # SqueezeNet's stem
    ((1, 3, 37, 37), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # ResNet-50's stem: 4 taps a phase
    ((1, 4, 9, 23), (6, 4, 2, 5), {"pads": [0, 2, 0, 1], "strides": [1, 3]}),  # 3 phases of 2, 2 and 1 taps
    ((1, 2, 10, 11), (4, 2, 1, 1), {"strides": [2, 2]}),  # one tap: the second phase never read
    ((1, 3, 50), (5, 3, 4), {"strides": [2], "pads": [1, 2]}),  # 1-D
    ((1, 4, 12, 30), (6, 2, 3, 3), {"strides": [2, 2], "group": 2, "dilations": [2, 1]}),
]


def _kernel(x: tuple[int, ...], w: tuple[int, ...], attributes: dict, bias: bool = False) -> str:
    weights = normal(*w, seed=1) / np.float32(np.sqrt(np.prod(w[1:])))
    inputs = {"x": normal(*x), "w": weights, **({"b": normal(w[0], seed=2)} if bias else {})}
    return check_node("Conv", inputs, attributes, constants=("w", "b") if bias else ("w",))


@pytest.mark.parametrize("x, w, attributes", CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_strided_rows_read_by_phases_agree_with_onnx_runtime(x, w, attributes: dict, bias: bool) -> None:
    text = _kernel(x, w, attributes, bias)
    stride, taps = attributes["strides"][-1], w[-1]
    assert "_phases[" in text and "* wp[" in text and text.count("+= ") == 1
    assert f"{-(-taps // stride) * stride}] heap" in next(line for line in text.splitlines() if line.startswith("wp "))


@st.composite
def strided_convs(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], dict]:
    rank = draw(st.integers(1, 2))
    taps = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 3), min_size=rank - 1, max_size=rank - 1)) + [draw(st.integers(2, 4))]
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * rank, max_size=2 * rank))
    image = [draw(st.integers(k + 1, k + 12)) for k in taps]
    group = draw(st.sampled_from([1, 2]))
    return (1, 2 * group, *image), (3 * group, 2, *taps), {"strides": strides, "pads": pads, "group": group}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided_convs())
def test_any_strided_conv_by_phases_agrees_with_onnx_runtime(conv) -> None:
    x, w, attributes = conv
    assert "_phases[" in _kernel(x, w, attributes)


def test_rows_without_a_stride_or_weights_known_at_import_are_read_as_they_are() -> None:
    assert "_phases" not in _kernel((1, 3, 12, 12), (4, 3, 3, 3), {"strides": [2, 1]})
    inputs = {"x": normal(1, 3, 12, 12), "w": normal(4, 3, 3, 3, seed=1)}
    assert "_phases" not in check_node("Conv", inputs, {"strides": [2, 2]})


@pytest.mark.parametrize("target", ["native", "x86-avx2"])
def test_heuristic_schedule_of_a_stem_computes_what_the_spec_does(target: str) -> None:
    spec = load(_kernel(*CASES[1], bias=True))
    result = LocalRunner().run(advance(spec, heuristic(spec, get_target(target))), target=target, repeats=1, spec=spec)
    assert result.error is None and result.verified, result.error


def test_heuristic_starts_each_row_of_the_output_beside_the_product_that_accumulates_it() -> None:
    """An output larger than the cache (a 7x7 stride 2 convolution at rows too long for channels as
    lanes): started by a pass of its own (channels outermost), it is read back from memory by the
    product; brought row by row into the product's scope of rows, each row is started while it is
    about to be read."""
    spec = load(_kernel((1, 8, 160, 160), (32, 8, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}, bias=True))
    program = advance(spec, heuristic(spec, get_target("x86-avx512")))
    sites = Analysis(program).sites
    start = next(s for s in sites if s.op.target.array == "y" and not s.op.reduction and
                 any(a.array == "b" for a in s.op.reads))
    product = next(s for s in sites if s.op.reduction)
    assert start.path[0] == product.path[0] and start.chain[0].size == 80
