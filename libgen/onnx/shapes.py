"""Every shape of a model, static, from the shapes of its inputs.

    shapes = parse_input_shapes(["ids=1,128", "mask=1,128"])    # {"ids": (1, 128), ...}; ShapeError if malformed
    model = with_input_shapes(model, shapes)                   # the inputs' symbolic dimensions fixed
    model = infer_shapes(model)                                 # every value's shape in graph.value_info

Exporters compute shapes with the graph itself: torch.onnx's reshape targets go through
Shape -> Gather -> Concat chains, its masks' through Equal -> Where -> Expand. onnx's own shape
inference, even with data propagation, loses a dimension at the first operator whose data it does
not propagate (Where, Expand), and everything after it is "dynamic shape". ONNX Runtime's symbolic
shape inference (`onnxruntime.tools.symbolic_shape_infer`, which ORT's transformer tools use on
the same exports) computes those values with sympy and resolves every dimension of
all-MiniLM-L6-v2 exported either way by torch.onnx, in 0.4 to 0.5 s; it ships with ONNX Runtime,
which the import needs anyway, and it only annotates the graph, so the nodes the import maps stay
the model's own. onnxslim also resolves them, but in 4 to 9 s and by rewriting the graph (a MatMul
and its Add into a Gemm between Reshapes), so the nodes would no longer be the model's.

Where symbolic inference cannot run (a domain or an operator it does not know, an opset below 7,
a model it finds invalid) the import falls back to onnx's inference with data propagation, as
before; a dimension neither resolves stays symbolic, and its nodes are "dynamic shape".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import onnx

OPTION = "--input-shape"


class ShapeError(ValueError):
    """A `--input-shape` that is malformed or does not fit the model; the message names the option."""


def parse_input_shapes(texts: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=D,D,...` each (`NAME=` for a scalar), by input name."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, equals, dims = text.rpartition("=")
        if not equals or not name:
            raise ShapeError(f"{OPTION} {text}: expected NAME=D,D,... (for example ids=1,128)")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            raise ShapeError(f"{OPTION} {text}: the dimensions must be integers separated by commas") from None
        if name in shapes and shapes[name] != shape:
            raise ShapeError(f"{OPTION} {text}: `{name}` is given twice, with different shapes")
        shapes[name] = shape
    return shapes


def with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of `model` whose inputs have `shapes`; ShapeError for an input the model lacks, a
    rank other than the input's, a size below 1, or a size where the model fixes another."""
    if not shapes:
        return model
    initializers = {t.name for t in model.graph.initializer}
    inputs = {value.name: value for value in model.graph.input if value.name not in initializers}
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    by_name = {value.name: value for value in fixed.graph.input}
    for name, shape in shapes.items():
        shown = f"{OPTION} {name}={','.join(map(str, shape))}"
        if name not in inputs:
            known = ", ".join(f"`{n}`" for n in inputs) or "none"
            raise ShapeError(f"{shown}: the model has no input `{name}` (its inputs: {known})")
        if any(d < 1 for d in shape):
            raise ShapeError(f"{shown}: every size must be at least 1")
        tensor = inputs[name].type.tensor_type
        if not inputs[name].type.HasField("tensor_type"):
            raise ShapeError(f"{shown}: input `{name}` is not a tensor")
        if tensor.HasField("shape"):
            dims = tensor.shape.dim
            if len(dims) != len(shape):
                raise ShapeError(f"{shown}: input `{name}` has rank {len(dims)} "
                                 f"([{', '.join(_shown(d) for d in dims)}]), not {len(shape)}")
            clash = next((i for i, d in enumerate(dims) if d.HasField("dim_value") and d.dim_value != shape[i]), None)
            if clash is not None:
                raise ShapeError(f"{shown}: dimension {clash} of input `{name}` is {dims[clash].dim_value} in the "
                                 "model")
        target = by_name[name].type.tensor_type
        target.ClearField("shape")
        for size in shape:
            target.shape.dim.add().dim_value = size
        target.shape.SetInParent()  # a scalar has a shape of no dimensions, not an unknown one
    return fixed


def _shown(dim: onnx.TensorShapeProto.Dimension) -> str:
    return str(dim.dim_value) if dim.HasField("dim_value") else dim.dim_param or "?"


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the shapes of its values in graph.value_info: ONNX Runtime's symbolic shape
    inference where it runs, then onnx's (which raises onnx's errors for an invalid model)."""
    inferred = _symbolic(model)
    # onnx's after ONNX Runtime's: where ONNX Runtime's stops short (a Dropout's mask of opset 9 left
    # SqueezeNet's classifier without shapes), onnx's fills in what it can from the shapes it was given
    return onnx.shape_inference.infer_shapes(model if inferred is None else inferred, strict_mode=False,
                                             data_prop=True)


def _symbolic(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """ONNX Runtime's symbolic shape inference, or None when it cannot run. Its public
    `infer_shapes` writes `sym_shape_infer_temp.onnx` into the working directory when a shape
    stays unknown; its loop (the same steps) leaves the unknown dimensions symbolic instead."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        return None
    logging.getLogger("onnxruntime.tools.symbolic_shape_infer").setLevel(logging.ERROR)
    if any(o.domain in ("", "ai.onnx") and o.version < 7 for o in model.opset_import):
        return None
    try:
        inference = SymbolicShapeInference(2**31 - 1, auto_merge=False, guess_output_rank=False, verbose=0)
        inference._preprocess(model)
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        return inference.out_mp_
    except Exception:  # noqa: BLE001 - any failure of the library: its exceptions are untyped
        return None
