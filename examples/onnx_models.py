"""ONNX models built with `onnx.helper` and seeded random weights, for `dojo import` and `dojo model run`.

    python examples/onnx_models.py --out build/models            # encoder.onnx conv_block.onnx ... topk.onnx
    python examples/onnx_models.py --out build/models --small    # the tests' sizes

    import onnx_models
    model = onnx_models.encoder_layer(batch=2, seq=16, hidden=32, heads=2, ffn=64)

- `encoder_layer`: a post-norm transformer encoder layer: Q, K and V projections, heads split with
  Reshape and Transpose, softmax(Q K^T / sqrt(d)) V, heads merged, the output projection, a residual
  and LayerNormalization, then a feed-forward with Gelu, a residual and LayerNormalization. Gelu
  is the operator with approximate="tanh" (opset 20), or with approximate="none"
  (`gelu_form="none"`), or its tanh formula in Mul, Pow, Tanh and Add nodes (`gelu_form="formula"`), or
  the exact form with Erf as torch's exporter writes it (`gelu_form="erf"`).
- `conv_block`: Conv, BatchNormalization, Relu, MaxPool, Conv, BatchNormalization, Relu,
  GlobalAveragePool, Flatten, Gemm.
- `upsample_block`: Resize (bilinear, twice the size), Conv, Relu, Resize (nearest, back).
- `with_topk`: a MatMul, then TopK (a comparison: not expressible), then Mul and Softmax.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21


class Graph:
    """Nodes and initializers collected in order; `node` returns its output's name."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        scale = 1 / math.sqrt(shape[0]) if scale is None else scale
        self.constant(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, outputs: int = 1, **attributes: object) -> str:
        results = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), results, name=name, **attributes))
        return results[0]

    def model(self, name: str, inputs: Sequence[tuple[str, Sequence[int]]], outputs: Sequence[str]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                                                     for n, s in inputs], [], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred[o] for o in outputs)
        onnx.checker.check_model(model, full_check=True)
        return model


def linear(g: Graph, x: str, name: str, n_in: int, n_out: int) -> str:
    y = g.node("MatMul", [x, g.weight(f"{name}.weight", n_in, n_out)], f"{name}/MatMul")
    return g.node("Add", [y, g.weight(f"{name}.bias", n_out, scale=0.1)], f"{name}/Add")


def layer_norm(g: Graph, x: str, name: str, width: int) -> str:
    gamma = g.constant(f"{name}.weight", (1 + 0.1 * g.rng.standard_normal(width)).astype(np.float32))
    beta = g.weight(f"{name}.bias", width, scale=0.1)
    return g.node("LayerNormalization", [x, gamma, beta], f"{name}/LayerNormalization", axis=-1, epsilon=1e-5)


def gelu(g: Graph, x: str, name: str, form: str) -> str:
    if form in ("tanh", "none"):
        return g.node("Gelu", [x], f"{name}/Gelu", approximate=form)
    half, one = g.constant(f"{name}.half", np.float32(0.5)), g.constant(f"{name}.one", np.float32(1))
    if form == "erf":  # 0.5 x (1 + erf(x / sqrt 2))
        root2 = g.constant(f"{name}.sqrt2", np.float32(math.sqrt(2)))
        inner = g.node("Erf", [g.node("Div", [x, root2], f"{name}/Div")], f"{name}/Erf")
    elif form == "formula":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.node("Pow", [x, g.constant(f"{name}.three", np.float32(3))], f"{name}/Pow")
        scaled = g.node("Mul", [cube, g.constant(f"{name}.c", np.float32(0.044715))], f"{name}/Mul_c")
        inner = g.node("Tanh", [g.node("Mul", [g.node("Add", [x, scaled], f"{name}/Add_c"), g.constant(
            f"{name}.k", np.float32(math.sqrt(2 / math.pi)))], f"{name}/Mul_k")], f"{name}/Tanh")
    else:
        raise ValueError(f"gelu form `{form}`: tanh, none, formula or erf")
    shifted = g.node("Add", [inner, one], f"{name}/Add_1")
    return g.node("Mul", [g.node("Mul", [x, half], f"{name}/Mul_half"), shifted], f"{name}/Mul")


def encoder_layer(batch: int = 4, seq: int = 128, hidden: int = 256, heads: int = 4, ffn: int = 1024,
                  gelu_form: str = "tanh", seed: int = 0) -> onnx.ModelProto:
    """A post-norm transformer encoder layer on x [batch, seq, hidden]."""
    assert hidden % heads == 0, "the heads split the hidden size"
    g, d = Graph(seed), hidden // heads
    split = g.constant("split_heads", np.array([batch, seq, heads, d], np.int64))
    merge = g.constant("merge_heads", np.array([batch, seq, hidden], np.int64))

    def heads_of(name: str, perm: list[int]) -> str:
        projected = linear(g, "x", f"/attn/{name}", hidden, hidden)
        return g.node("Transpose", [g.node("Reshape", [projected, split], f"/attn/{name}/Reshape")],
                      f"/attn/{name}/Transpose", perm=perm)

    q, k, v = heads_of("q", [0, 2, 1, 3]), heads_of("k", [0, 2, 3, 1]), heads_of("v", [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], "/attn/scores/MatMul")
    scaled = g.node("Div", [scores, g.constant("attn.scale", np.float32(math.sqrt(d)))], "/attn/scores/Div")
    weights = g.node("Softmax", [scaled], "/attn/Softmax", axis=-1)
    context = g.node("MatMul", [weights, v], "/attn/context/MatMul")
    merged = g.node("Reshape", [g.node("Transpose", [context], "/attn/merge/Transpose", perm=[0, 2, 1, 3]), merge],
                    "/attn/merge/Reshape")
    attended = linear(g, merged, "/attn/out", hidden, hidden)
    norm1 = layer_norm(g, g.node("Add", ["x", attended], "/attn/residual/Add"), "/norm1", hidden)
    inner = gelu(g, linear(g, norm1, "/ffn/up", hidden, ffn), "/ffn/gelu", gelu_form)
    down = linear(g, inner, "/ffn/down", ffn, hidden)
    norm2 = layer_norm(g, g.node("Add", [norm1, down], "/ffn/residual/Add"), "/norm2", hidden)
    return g.model("encoder_layer", [("x", (batch, seq, hidden))], [norm2])


def conv_block(batch: int = 8, channels: int = 3, size: int = 32, features: Sequence[int] = (16, 32),
               classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Two convolutions with batch norm and ReLU, a max pool between them, global average pooling
    and a classifier, on images x [batch, channels, size, size]."""
    g = Graph(seed)
    x, width = "x", channels
    for i, out in enumerate(features, start=1):
        w = g.weight(f"conv{i}.weight", out, width, 3, 3, scale=1 / math.sqrt(9 * width))
        x = g.node("Conv", [x, w, g.weight(f"conv{i}.bias", out, scale=0.1)], f"/conv{i}/Conv", pads=[1, 1, 1, 1])
        stats = [g.constant(f"bn{i}.{n}", v.astype(np.float32)) for n, v in (
            ("scale", 1 + 0.1 * g.rng.standard_normal(out)), ("bias", 0.1 * g.rng.standard_normal(out)),
            ("mean", 0.1 * g.rng.standard_normal(out)), ("var", 1 + 0.1 * np.abs(g.rng.standard_normal(out))))]
        x = g.node("Relu", [g.node("BatchNormalization", [x, *stats], f"/bn{i}/BatchNormalization", epsilon=1e-5)],
                   f"/relu{i}/Relu")
        if i == 1:
            x = g.node("MaxPool", [x], "/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2])
        width = out
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x], "/gap/GlobalAveragePool")], "/flatten/Flatten")
    logits = g.node("Gemm", [pooled, g.weight("fc.weight", classes, width), g.weight("fc.bias", classes, scale=0.1)],
                    "/fc/Gemm", transB=1)
    return g.model("conv_block", [("x", (batch, channels, size, size))], [logits])


def upsample_block(batch: int = 1, channels: int = 4, size: int = 16, features: int = 8,
                   seed: int = 0) -> onnx.ModelProto:
    """x [batch, channels, size, size] resized bilinearly to twice its size, a convolution and a
    Relu there, then resized back to `size` by nearest: a decoder's upsampling around a convolution."""
    g = Graph(seed)
    up = g.node("Resize", ["x", "", g.constant("up.scales", np.array([1, 1, 2, 2], np.float32))], "/up/Resize",
                mode="linear")
    w = g.weight("conv.weight", features, channels, 3, 3, scale=1 / math.sqrt(9 * channels))
    conv = g.node("Conv", [up, w, g.weight("conv.bias", features, scale=0.1)], "/conv/Conv", pads=[1, 1, 1, 1])
    relu = g.node("Relu", [conv], "/relu/Relu")
    down = g.node("Resize", [relu, "", "", g.constant("down.sizes", np.array([batch, features, size, size]))],
                  "/down/Resize", mode="nearest")
    return g.model("upsample_block", [("x", (batch, channels, size, size))], [down])


def with_topk(rows: int = 4, width: int = 16, k: int = 3, seed: int = 0) -> onnx.ModelProto:
    """MatMul, TopK (not expressible: it compares), then Mul and Softmax over the k largest."""
    g = Graph(seed)
    scores = g.node("MatMul", ["x", g.weight("w", width, width)], "/proj/MatMul")
    top = g.node("TopK", [scores, g.constant("k", np.array([k], np.int64))], "/TopK", outputs=2, axis=-1)
    scaled = g.node("Mul", [top, g.constant("temperature", np.float32(0.5))], "/scale/Mul")
    return g.model("with_topk", [("x", (rows, width))], [g.node("Softmax", [scaled], "/Softmax", axis=-1)])


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {"encoder": encoder_layer, "conv_block": conv_block,
                                                     "upsample": upsample_block, "topk": with_topk}
SMALL = {"encoder": {"batch": 2, "seq": 5, "hidden": 12, "heads": 3, "ffn": 20},
         "conv_block": {"batch": 2, "channels": 3, "size": 8, "features": (6, 8), "classes": 5},  # conv2 by Winograd
         "upsample": {"batch": 1, "channels": 2, "size": 5, "features": 3},
         "topk": {"rows": 3, "width": 7}}


def write(directory: Path, small: bool = False) -> list[Path]:
    """Every model as DIRECTORY/NAME.onnx, at the default sizes or the small ones."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in MODELS.items():
        path = directory / f"{name}.onnx"
        onnx.save(build(**(SMALL[name] if small else {})), str(path))
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory to write the .onnx files into")
    parser.add_argument("--small", action="store_true", help="the tests' sizes")
    args = parser.parse_args(argv)
    for path in write(args.out, args.small):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
