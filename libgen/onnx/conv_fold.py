"""Per-channel affine nodes after a Conv of constant weights, folded into its weights and bias.

    folded = fold_into_conv(conv, bn, constants, taken)   # None when it cannot be folded
    folded.node        # the Conv, with the new weights and bias, writing the folded node's output
    folded.constants   # the new weights and bias by name, derived from the model's constants

Each of these maps every output channel of the Conv before it by y = a * x + c:
- a BatchNormalization in inference, y = (x - mean) / sqrt(var + epsilon) * scale + bias: with
  s = scale / sqrt(var + epsilon), a = s and c = bias - mean * s;
- a Mul by a constant of one value a channel (`[C, 1, 1]`, `[1, C, 1, 1]`, or one value): a = it;
- an Add of such a constant: c = it.
Conv(x, W, B) followed by one is Conv(x, W * a, B * a + c), one kernel and no pass over the
Conv's output; a chain of them (Inception v2's Conv, BatchNormalization, Mul and Add) folds one
after the other. ONNX Runtime does the same at its default graph optimisations (its Conv with
BatchNormalization, Mul and Add fusions). The new tensors are computed in float64 and rounded once
to the weights' dtype; an Add leaves the weights as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, helper

from .nodes import fresh_name

FLOATS = (np.float32, np.float64)
FOLDED_OPS = frozenset({"BatchNormalization", "Mul", "Add"})


@dataclass(frozen=True)
class Folded:
    """The folded Conv, the constants it reads that the model does not have, and for each of
    them the model's constants it is computed from."""

    node: NodeProto
    constants: dict[str, np.ndarray]
    sources: dict[str, list[str]]


@dataclass(frozen=True)
class _Affine:
    factor: np.ndarray | None  # per channel, float64; None: 1
    shift: np.ndarray  # per channel, float64
    reads: list[str]  # the node's constants


def fold_into_conv(conv: NodeProto, node: NodeProto, constants: Mapping[str, np.ndarray],
                   taken: Collection[str]) -> Folded | None:
    """The Conv computing `node` (one of FOLDED_OPS) of `conv`'s output, when `node` reads that
    output, maps each channel by a constant affine map and has one output, and every weight and
    constant is of one float dtype; else None. New constants get names not in `taken`. (Whether
    anything else reads the Conv's output is the caller's to check.)"""
    if conv.op_type != "Conv" or len(conv.input) < 2 or not node.output or not node.output[0] \
            or any(node.output[1:]) or conv.input[1] not in constants:
        return None
    weight = constants[conv.input[1]]
    has_bias = len(conv.input) > 2 and bool(conv.input[2])
    if weight.dtype.type not in FLOATS or weight.ndim < 3 or has_bias and conv.input[2] not in constants:
        return None
    bias = constants[conv.input[2]] if has_bias else np.zeros(weight.shape[:1], weight.dtype)
    affine = _affine(node, conv.output[0], constants, weight.dtype, weight.shape[0], weight.ndim)
    if affine is None or bias.dtype != weight.dtype or bias.shape != weight.shape[:1]:
        return None
    suffix, new, sources = node.name or node.output[0], {}, {}
    weight_name = conv.input[1]
    if affine.factor is not None:
        weight_name = fresh_name(f"{conv.input[1]}.{suffix}", taken)
        new[weight_name] = (weight.astype(np.float64) * affine.factor.reshape(-1, *[1] * (weight.ndim - 1))).astype(
            weight.dtype)
        sources[weight_name] = [conv.input[1], *affine.reads]
    scaled = bias.astype(np.float64) * (1 if affine.factor is None else affine.factor)
    bias_name = fresh_name(f"{conv.input[2] if has_bias else conv.input[1] + '.bias'}.{suffix}", {*taken, *new})
    new[bias_name] = (scaled + affine.shift).astype(weight.dtype)
    sources[bias_name] = [*conv.input[2:3], *affine.reads] if has_bias else list(affine.reads)
    folded = helper.make_node("Conv", [conv.input[0], weight_name, bias_name], [node.output[0]], name=conv.name)
    folded.attribute.extend(conv.attribute)
    return Folded(folded, new, sources)


def _affine(node: NodeProto, value: str, constants: Mapping[str, np.ndarray], dtype: np.dtype, channels: int,
            rank: int) -> _Affine | None:
    """`node`'s map of each channel of `value` (an output of `rank` dimensions, `channels` of them)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "BatchNormalization":
        return _batchnorm(node, value, constants, dtype, channels)
    if node.op_type not in ("Mul", "Add") or len(node.input) != 2 or value not in node.input:
        return None
    (other,) = [name for name in node.input if name != value] or [None]
    per_channel = _per_channel(constants.get(other), dtype, channels, rank)
    if per_channel is None:
        return None
    if node.op_type == "Mul":
        return _Affine(per_channel, np.zeros(channels), [other])
    return _Affine(None, per_channel, [other])


def _per_channel(constant: np.ndarray | None, dtype: np.dtype, channels: int, rank: int) -> np.ndarray | None:
    """A constant that broadcasts over an output as one value a channel, as `channels` float64s."""
    if constant is None or constant.dtype != dtype or constant.ndim > rank:
        return None
    shape = (1,) * (rank - constant.ndim) + constant.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(constant.reshape(-1).astype(np.float64), (channels,)).copy()


def _batchnorm(bn: NodeProto, value: str, constants: Mapping[str, np.ndarray], dtype: np.dtype,
               channels: int) -> _Affine | None:
    if len(bn.input) != 5 or bn.input[0] != value:
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
    # opset 6's is_test=0 and opset 14's training_mode=1 normalise by the batch's statistics
    if attributes.get("training_mode", 0) or attributes.get("spatial", 1) != 1 \
            or set(attributes) - {"epsilon", "momentum", "training_mode", "spatial"}:
        return None
    if not all(n in constants for n in bn.input[1:]):
        return None
    scale, shift, mean, var = (constants[n] for n in bn.input[1:])
    if any(a.dtype != dtype or a.shape != (channels,) for a in (scale, shift, mean, var)):
        return None
    variance = var.astype(np.float64) + attributes.get("epsilon", 1e-5)
    if not np.all(variance > 0):  # a NaN or a negative variance: the node computes what ONNX Runtime does
        return None
    factor = scale.astype(np.float64) / np.sqrt(variance)
    return _Affine(factor, shift - mean.astype(np.float64) * factor, list(bn.input[1:]))
