"""Depthwise convolutions whose vector lanes are blocks of channels (libgen/onnx/depthwise.py):
they agree with ONNX Runtime across strides, dilations, pads and kernel shapes, the import takes
them only where the direct form's rows run part empty, and the heuristic pass's schedule computes
what the spec does."""

from __future__ import annotations

from math import prod

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.passes import heuristic
from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.derivation import advance
from dojo_ir.tree import walk_ops
from libgen.onnx.depthwise import blocked_weights, fits
from libgen.onnx.nodes import Value
from libgen.onnx.ops.linear import Window
from runner.local import LocalRunner
from tests.onnx.single_node import check_node, normal

CASES = [
    # x, w, attributes
    ((1, 32, 14, 14), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # ShuffleNet's stride 2, 14 -> 7
    ((2, 16, 7, 7), (16, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # stride 1 at 7x7, a batch of 2
    ((1, 16, 6, 5), (16, 1, 2, 3), {"pads": [0, 1, 1, 0], "dilations": [2, 1]}),
    ((1, 16, 9, 9), (16, 1, 1, 1), {}),  # no padding: the input blocked, not zeroed first
    ((1, 16, 11), (16, 1, 5), {"pads": [2, 2], "strides": [2]}),  # 1-D
    ((1, 40, 8, 8), (40, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # 2 blocks and 8 channels of a third
    ((1, 24, 5, 5), (24, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # ShuffleNet's 136 as 8 blocks and a half
]


def _conv(x: tuple[int, ...], w: tuple[int, ...], attributes: dict, bias: bool, seed: int = 0) -> str:
    inputs = {"x": normal(*x, seed=seed), "w": normal(*w, seed=seed + 1),
              "b": normal(w[0], seed=seed + 2) if bias else None}
    return check_node("Conv", inputs, {**attributes, "group": x[1]}, constants=("w", "b") if bias else ("w",))


@pytest.mark.parametrize("x, w, attributes", CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_depthwise_conv_with_channels_as_lanes_agrees_with_onnx_runtime(x, w, attributes, bias: bool) -> None:
    text = _conv(x, w, attributes, bias)
    assert "+= xb[" in text and "* wb[" in text


@pytest.mark.parametrize("x, w, attributes", CASES)
def test_each_element_of_the_padded_input_is_written_once(x, w, attributes) -> None:
    """The zeros go around the input only, not over the whole padded array before the input is
    copied in: the lines that write it cover it exactly (and agree with ONNX Runtime, above)."""
    program = load(_conv(x, w, attributes, bias=False))
    for padded in (b for b in program.buffers if b.name.startswith("xb")):
        written = sum(prod(s.size for s in chain) for op, chain in walk_ops(program.body)
                      if op.target.array == padded.name)
        assert written == prod(padded.storage_shape)


@st.composite
def depthwise_convs(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], dict]:
    """A 2-D depthwise Conv of a multiple of 8 channels, any kernel, stride, dilation and pads that
    fit an image whose output rows are short."""
    channels = 8 * draw(st.integers(2, 6))
    taps = [draw(st.integers(1, 4)) for _ in range(2)]
    strides, dilations = [draw(st.integers(1, 3)) for _ in range(2)], [draw(st.integers(1, 2)) for _ in range(2)]
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    image = [draw(st.integers(max(1, (k - 1) * d + 1 - pads[i] - pads[i + 2]), 12))
             for i, (k, d) in enumerate(zip(taps, dilations, strict=True))]
    attributes = {"pads": pads, "strides": strides, "dilations": dilations}
    return (draw(st.integers(1, 2)), channels, *image), (channels, 1, *taps), attributes


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(depthwise_convs(), st.integers(0, 99))
def test_any_depthwise_conv_with_channels_as_lanes_agrees_with_onnx_runtime(conv, seed: int) -> None:
    x, w, attributes = conv
    assert "+= xb[" in _conv(x, w, attributes, bias=True, seed=seed)


def _window(row: int) -> Window:
    return Window((row, row), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (row, row))


@pytest.mark.parametrize("w, group, constant, row, taken", [
    ((272, 1, 3, 3), 272, True, 7, True),
    ((112, 1, 3, 3), 112, True, 14, True),
    ((112, 1, 3, 3), 112, True, 28, False),  # the direct form's rows fill its vectors
    ((136, 1, 3, 3), 136, True, 14, True),  # 8.5 blocks: the last half is a product of its own
    ((20, 1, 3, 3), 20, True, 7, False),  # not a multiple of AVX2's vector
    ((64, 2, 3, 3), 32, True, 7, False),  # two input channels a group
    ((32, 1, 3, 3), 32, False, 7, False),  # weights known only when the model runs
])
def test_fits_constant_whole_blocks_of_channels_one_a_group_and_short_rows(w, group: int, constant: bool, row: int,
                                                                          taken: bool) -> None:
    weights = normal(*w) if constant else None
    assert fits(Value("w", "f32", w, weights), group, _window(row)) is taken


def test_blocked_weights_put_a_block_of_channels_innermost() -> None:
    w = normal(48, 1, 3, 2)
    blocked = blocked_weights(w)
    assert blocked.shape == (3, 3, 2, 16)
    assert blocked[2, 1, 0, 5] == w[2 * 16 + 5, 0, 1, 0]
    assert blocked.flags.c_contiguous


def test_blocked_weights_fill_the_last_block_with_zero_channels() -> None:
    w = normal(24, 1, 3, 3)
    blocked = blocked_weights(w)
    assert blocked.shape == (2, 3, 3, 16)
    assert blocked[1, 2, 0, 7] == w[23, 0, 2, 0] and not blocked[1, :, :, 8:].any()


@pytest.mark.parametrize("target", ["native", "x86-avx2"])
def test_heuristic_schedules_compute_what_the_spec_does(target: str) -> None:
    """Compiled and run against the reference interpreter: ShuffleNet's stride 2 at a small image,
    and 40 channels, whose last block is half of one."""
    for x, w, attributes in (CASES[0], CASES[5]):
        spec = load(_conv(x, w, attributes, bias=True))
        result = LocalRunner().run(advance(spec, heuristic(spec, get_target(target))), target=target, repeats=1,
                                   spec=spec)
        assert result.error is None and result.verified, (w, result.error)
