"""RotaryEmbedding agrees with ONNX Runtime on both layouts, halves and neighbours, partial
rotation, and constant positions; positions known only when the model runs are indirection."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from libgen.onnx.catalogue import kernel_for
from libgen.onnx.importer import import_model
from libgen.onnx.nodes import Node, Unsupported, Value
from tests.onnx.single_node import check_node, normal
from tests.onnx.test_importer import assert_calls_match_ort, model, tensor

OPSET = 23


def caches(*shape: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    angles = np.random.default_rng(seed).uniform(0, 2 * np.pi, shape)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("x, attributes, half", [
    ((2, 3, 5, 8), {}, 4),  # [batch, heads, sequence, head]
    ((2, 3, 5, 8), {"interleaved": 1}, 4),
    ((2, 3, 5, 8), {"rotary_embedding_dim": 4}, 2),  # the last 4 features copied
    ((2, 5, 24), {"num_heads": 3}, 4),  # [batch, sequence, heads * head]
    ((2, 5, 24), {"num_heads": 3, "rotary_embedding_dim": 6, "interleaved": 1}, 3),
    ((1, 1, 7, 2), {}, 1),  # one pair, one head
])
def test_rotary_embedding(x: tuple[int, ...], attributes: dict, half: int) -> None:
    batch, sequence = x[0], x[1] if len(x) == 3 else x[2]
    cos, sin = caches(batch, sequence, half)
    check_node("RotaryEmbedding", {"x": normal(*x), "cos": cos, "sin": sin}, attributes, opset=OPSET)


def test_constant_positions_pick_the_caches_rows_at_import() -> None:
    cos, sin = caches(16, 4)
    positions = np.array([[3, 4, 5, 6, 7], [0, 1, 2, 3, 4]], np.int64)
    text = check_node("RotaryEmbedding", {"x": normal(2, 3, 5, 8), "cos": cos, "sin": sin, "position_ids": positions},
                      {}, constants=("cos", "sin", "position_ids"), opset=OPSET)
    assert "cos f32 [2, 5, 4]" in text  # the rows at the positions, not the 16-row cache


def test_positions_known_only_when_the_model_runs_are_indirection() -> None:
    cos, sin = caches(16, 4)
    inputs = (Value("x", "f32", (2, 3, 5, 8)), Value("cos", "f32", (16, 4), cos), Value("sin", "f32", (16, 4), sin),
              Value("position_ids", "i64", (2, 5)))
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("rope", "RotaryEmbedding", inputs, (Value("y", "f32", (2, 3, 5, 8)),), {}, OPSET))
    assert caught.value.feature == "indirection"


@pytest.mark.parametrize("x, attributes, cache", [
    ((2, 5, 24), {}, (2, 5, 4)),  # 3-D without num_heads
    ((2, 3, 5, 8), {"rotary_embedding_dim": 3}, (2, 5, 1)),  # odd
    ((2, 3, 5, 8), {}, (1, 5, 4)),  # a cache of another batch: ONNX Runtime refuses it too
])
def test_inconsistent_shapes_are_invalid(x: tuple[int, ...], attributes: dict, cache: tuple[int, ...]) -> None:
    cos, sin = caches(*cache)
    inputs = (Value("x", "f32", x), Value("cos", "f32", cache), Value("sin", "f32", cache))
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("rope", "RotaryEmbedding", inputs, (Value("y", "f32", x),), attributes, OPSET))
    assert caught.value.feature == "invalid"


def test_an_imported_rotary_embedding_reads_its_derived_rows() -> None:
    cos, sin = caches(16, 4)
    positions = np.arange(10, dtype=np.int64).reshape(2, 5)
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin"),
             numpy_helper.from_array(positions, "pos")]
    proto = model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rope")],
                  [tensor("x", [2, 3, 5, 8])], [tensor("y", [2, 3, 5, 8])], inits, opset=OPSET)
    imported = import_model(proto)
    (call,) = imported.calls
    assert call.inputs == ("x", "cos.pos", "sin.pos")
    assert {n: d.sources for n, d in imported.constants.items()} == {"cos.pos": ("cos", "pos"),
                                                                      "sin.pos": ("sin", "pos")}
    assert_calls_match_ort(imported, proto, {"x": normal(2, 3, 5, 8)})
