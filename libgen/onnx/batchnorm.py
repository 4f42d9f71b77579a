"""A BatchNormalization of constant statistics after a Conv of constant weights, folded into them.

    folded = fold_into_conv(conv, bn, constants, taken)   # None when it cannot be folded
    folded.node        # the Conv, with the new weights and bias, writing the BatchNormalization's output
    folded.constants   # the new weights and bias by name, derived from the model's constants

In inference, BatchNormalization is y = (x - mean) / sqrt(var + epsilon) * scale + bias per channel,
an affine map of each output channel of the Conv before it. With s = scale / sqrt(var + epsilon),
Conv(x, W, B) followed by it is Conv(x, W * s, (B - mean) * s + bias), one kernel and no pass over
the Conv's output: ONNX Runtime does the same at its default graph optimisations. The new tensors
are computed in float64 and rounded once to the weights' dtype.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, helper

from .nodes import fresh_name

FLOATS = (np.float32, np.float64)


@dataclass(frozen=True)
class Folded:
    """The folded Conv, the constants it reads that the model does not have, and for each of
    them the model's constants it is computed from."""

    node: NodeProto
    constants: dict[str, np.ndarray]
    sources: dict[str, list[str]]


def fold_into_conv(conv: NodeProto, bn: NodeProto, constants: Mapping[str, np.ndarray],
                   taken: Collection[str]) -> Folded | None:
    """The Conv computing `bn` of `conv`'s output, when `bn` reads that output, is in inference mode
    with one output and per-channel statistics, and every weight and statistic is a constant of one
    float dtype; else None. New constants get names not in `taken`. (Whether anything else reads
    the Conv's output is the caller's to check.)"""
    if conv.op_type != "Conv" or bn.op_type != "BatchNormalization" or len(bn.input) != 5 or len(conv.input) < 2 \
            or bn.input[0] != conv.output[0] or not bn.output[0] or any(bn.output[1:]):
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
    # opset 6's is_test=0 and opset 14's training_mode=1 normalise by the batch's statistics
    if attributes.get("training_mode", 0) or attributes.get("spatial", 1) != 1 \
            or set(attributes) - {"epsilon", "momentum", "training_mode", "spatial"}:
        return None
    has_bias = len(conv.input) > 2 and bool(conv.input[2])
    weights = [conv.input[1], *conv.input[2:3]] if has_bias else [conv.input[1]]
    if not all(n in constants for n in [*weights, *bn.input[1:]]):
        return None
    weight = constants[conv.input[1]]
    bias = constants[conv.input[2]] if has_bias else np.zeros(weight.shape[:1], weight.dtype)
    scale, shift, mean, var = (constants[n] for n in bn.input[1:])
    channels = weight.shape[:1]
    if weight.dtype.type not in FLOATS or weight.ndim < 3 or any(
            a.dtype != weight.dtype or a.shape != channels for a in (bias, scale, shift, mean, var)):
        return None
    variance = var.astype(np.float64) + attributes.get("epsilon", 1e-5)
    if not np.all(variance > 0):  # a NaN or a negative variance: the node computes what ONNX Runtime does
        return None
    factor = scale.astype(np.float64) / np.sqrt(variance)
    new_weight = (weight.astype(np.float64) * factor.reshape(-1, *[1] * (weight.ndim - 1))).astype(weight.dtype)
    new_bias = ((bias.astype(np.float64) - mean) * factor + shift).astype(weight.dtype)
    suffix = bn.name or bn.output[0]
    weight_name = fresh_name(f"{conv.input[1]}.{suffix}", taken)
    bias_name = fresh_name(f"{conv.input[2] if has_bias else conv.input[1] + '.bias'}.{suffix}", {*taken, weight_name})
    node = helper.make_node("Conv", [conv.input[0], weight_name, bias_name], [bn.output[0]], name=conv.name)
    node.attribute.extend(conv.attribute)
    statistics = list(bn.input[1:])
    return Folded(node, {weight_name: new_weight, bias_name: new_bias},
                  {weight_name: [conv.input[1], *statistics], bias_name: [*weights[1:], *statistics]})
