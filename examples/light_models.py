"""The CNNs the onnx package ships as test data, made runnable: seeded random weights in place of
their ConstantOfShape placeholders.

    python examples/light_models.py --out build/light              # the nine models, 224 x 224
    python examples/light_models.py --out build/light squeezenet --size 112

    import light_models
    model = light_models.runnable("resnet50", seed=0)
    feeds = light_models.sample_inputs(model, seed=0)

`onnx/backend/test/data/light/light_*.onnx` keep each model's structure and its small tensors, but
every weight is a `ConstantOfShape` filling the weight's shape with 0.02: run as they are, each
convolution's outputs are all alike and a comparison of two runtimes says little. `runnable`
replaces each placeholder by an initializer drawn from a generator seeded by the seed and the
weight's name (the same model every time), scaled by what reads it so that activations stay near
unit size through a deep net:

- a Conv's or a Gemm's weights: He's normal initialisation, standard deviation sqrt(2 / fan_in),
  the fan-in read from the shape the node sees (after a Reshape or Unsqueeze on the way);
- a bias, or the shift added after a normalisation: 0.1 standard deviation;
- a BatchNormalization's scale, or a per-channel Mul after it: 1 + 0.1 standard deviation;
- a BatchNormalization's mean and variance: the statistics of its input on `sample_inputs(model,
  seed)`, per channel, as a network would have learnt them, so that each normalisation does
  normalise. The model's own statistics are replaced too: they belong to weights that are not here
  (inception_v2's first variances are 647 to 52,908, densenet's go down to 1e-12).

The initializers are taken out of the graph's inputs (IR version 4 and later allow it), so that
runtimes may treat them as the constants they are: ONNX Runtime does not fold an initializer a
caller could override. `size` sets the images' height and width, for models whose shapes follow
from it (SqueezeNet's classifier ends in a global pool); a fixed Reshape or a pool wider than its
image refuses it, as ResNet-50's, ShuffleNet's and VGG-19's do at 112.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
NAMES = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512")
PASS_THROUGH = ("Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten")  # a weight's views on its way to its reader
BIAS_SCALE = 0.1


class LightModelError(ValueError):
    """A model that is not one of the light models, or a size its shapes do not allow."""


def path_of(name: str) -> Path:
    if name not in NAMES:
        raise LightModelError(f"{name!r} is not a light model of the onnx package: one of {', '.join(NAMES)}")
    return LIGHT / f"light_{name}.onnx"


def runnable(name: str, seed: int = 0, size: int | None = None) -> onnx.ModelProto:
    """The light model NAME with seeded weights and calibrated normalisations (the module's doc)."""
    model = onnx.load(str(path_of(name)))
    if size is not None:
        _resize_images(model, size, name)
    model = _with_weights(model, seed)
    if size is not None:
        _check_runs(model, name, size)
    model = _calibrated(model, sample_inputs(model, seed))
    onnx.checker.check_model(model, full_check=True)
    return model


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal values for every input of the graph that is not an initializer."""
    rng = np.random.default_rng(seed)
    constants = {i.name for i in model.graph.initializer}
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in constants}


def _resize_images(model: onnx.ModelProto, size: int, name: str) -> None:
    constants = {i.name for i in model.graph.initializer}
    (image,) = (i for i in model.graph.input if i.name not in constants)
    dims = image.type.tensor_type.shape.dim
    dims[2].dim_value = dims[3].dim_value = size
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True).graph
    except onnx.shape_inference.InferenceError as error:
        raise LightModelError(f"{name} does not take {size} x {size} images: {error}") from None
    del model.graph.output[:]
    model.graph.output.extend(inferred.output)


def _check_runs(model: onnx.ModelProto, name: str, size: int) -> None:
    """Shape inference lets through a pool wider than its image and a Reshape to the wrong size:
    running tells."""
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # the error is raised here, not logged
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, sample_inputs(model))
    except (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.RuntimeException,
            ort.capi.onnxruntime_pybind11_state.InvalidArgument) as error:
        raise LightModelError(f"{name} does not take {size} x {size} images: {str(error).splitlines()[0]}") from None


def _readers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for position, value in enumerate(node.input):
            readers.setdefault(value, []).append((node, position))
    return readers


def _final_reader(value: str, readers: dict) -> tuple[onnx.NodeProto, int, str]:
    """The node that reads VALUE through any views, the position it reads it at, and the name of
    what it reads there."""
    while True:
        node, position = readers[value][0]
        if node.op_type not in PASS_THROUGH or position != 0:
            return node, position, value
        value = node.output[0]


def _fan_in(node: onnx.NodeProto, shape: Sequence[int]) -> int:
    if node.op_type == "Gemm":
        transposed = any(a.name == "transB" and a.i for a in node.attribute)
        return shape[1] if transposed else shape[0]
    return int(np.prod(shape[1:]))  # Conv: (out channels, in channels / groups, taps...)


def _weight(node: onnx.NodeProto, position: int, shape: Sequence[int], seen: Sequence[int],
            rng: np.random.Generator) -> np.ndarray:
    """A value for the placeholder of SHAPE read at POSITION of NODE, which sees it as SEEN."""
    normal = rng.standard_normal(shape)
    if node.op_type in ("Conv", "Gemm", "MatMul") and position == 1:
        return normal * np.sqrt(2 / _fan_in(node, seen))
    if node.op_type == "BatchNormalization" and position == 4:  # a variance, until calibrated
        return np.ones(shape)
    if (node.op_type, position) in (("BatchNormalization", 1), ("Mul", 1)):
        return 1 + BIAS_SCALE * normal
    return BIAS_SCALE * normal  # biases, shifts, means (calibrated later)


def _with_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    readers = _readers(model.graph)
    weights, kept = [], []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in constants:
            kept.append(node)
            continue
        (name,) = node.output
        if name not in readers:
            continue  # a placeholder nothing reads: left out with its node
        shape = [int(d) for d in constants[node.input[0]]]
        reader, position, seen = _final_reader(name, readers)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        value = _weight(reader, position, shape, shapes.get(seen, shape), rng).astype(np.float32)
        weights.append(numpy_helper.from_array(value, name))
    graph = model.graph
    still_read = {value for node in kept for value in node.input}
    initializers = [i for i in graph.initializer if i.name in still_read] + weights
    names = {i.name for i in initializers}
    inputs = [i for i in graph.input if i.name not in constants and i.name not in names]
    new_graph = helper.make_graph(kept, graph.name, inputs, list(graph.output), initializers)
    result = helper.make_model(new_graph, opset_imports=list(model.opset_import), producer_name="light_models")
    result.ir_version = max(model.ir_version, 4)
    return result


def _calibrated(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """MODEL with each BatchNormalization's mean and variance set to its input's statistics on FEEDS.

    A normalisation's input depends on the normalisations before it, so they are set in waves: one
    ONNX Runtime session whose graph takes every mean and variance as an input and outputs every
    normalisation's input; each run sets the normalisations whose ancestors are all set."""
    norms = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    if not norms:
        return model
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    statistics = [name for n in norms for name in n.input[3:5]]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    kept = [i for i in probe.graph.initializer if i.name not in statistics]
    del probe.graph.initializer[:]
    probe.graph.initializer.extend(kept)
    probe.graph.input.extend(helper.make_tensor_value_info(s, onnx.TensorProto.FLOAT, constants[s].shape)
                             for s in statistics)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None) for n in norms)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    for wave in _waves(model.graph, norms):
        values = session.run([norms[i].input[0] for i in wave], {**feeds, **{s: constants[s] for s in statistics}})
        for i, x in zip(wave, values, strict=True):
            axes = (0, *range(2, x.ndim))
            constants[norms[i].input[3]] = x.mean(axis=axes, dtype=np.float64).astype(np.float32)
            constants[norms[i].input[4]] = x.var(axis=axes, dtype=np.float64).astype(np.float32)
    del model.graph.initializer[:]
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    return model


def _waves(graph: onnx.GraphProto, norms: list[onnx.NodeProto]) -> list[list[int]]:
    """The normalisations' indices grouped by how many normalisations lie on the longest path above each."""
    producer = {out: node for node in graph.node for out in node.output}
    index = {id(n): i for i, n in enumerate(norms)}
    depth: dict[str, int] = {}  # a value's count of normalisations on the longest path to it

    def depth_of(value: str) -> int:
        stack = [value]
        while stack:  # iteratively: densenet is deeper than Python's recursion limit
            top = stack[-1]
            node = producer.get(top)
            missing = [v for v in (node.input if node else ()) if v not in depth]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            below = max((depth[v] for v in node.input), default=0) if node else 0
            depth[top] = below + (node is not None and id(node) in index)
        return depth[value]

    waves: dict[int, list[int]] = {}
    for norm in norms:
        waves.setdefault(depth_of(norm.input[0]), []).append(index[id(norm)])
    return [waves[d] for d in sorted(waves)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=list(NAMES), help=f"default: all of {', '.join(NAMES)}")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, help="the images' height and width (default: the model's, 224)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        try:
            model = runnable(name, args.seed, args.size)
        except LightModelError as error:
            print(f"light_models: {error}", file=sys.stderr)
            return 1
        onnx.save(model, str(args.out / f"{name}.onnx"))
        print(args.out / f"{name}.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
