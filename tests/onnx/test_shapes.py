"""Static shapes from the inputs' shapes: `--input-shape` fixes symbolic dimensions, and shape
arithmetic that exporters write (Shape -> Gather -> Concat, Equal -> Where -> Expand) resolves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from libgen.onnx.importer import ModelError, import_model
from libgen.onnx.shapes import ShapeError, parse_input_shapes, with_input_shapes
from server.cli import main


def _int64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def exporter_model(batch: int | str = "batch") -> onnx.ModelProto:
    """x [batch, 6] -> Relu -> reshaped to [batch, 2, 3] through Shape/Gather/Concat, then expanded
    to [batch, 4, 2, 3] by a target computed as torch.onnx writes it: Where(Equal(t, -1), ones, t)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="/relu"),
        helper.make_node("Shape", ["r"], ["shape"], name="/shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="/gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "zeros"], ["n1"], name="/unsqueeze"),
        helper.make_node("Concat", ["n1", "two_three"], ["target"], name="/concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="/reshape"),
        helper.make_node("Concat", ["n1", "minus_ones"], ["wanted"], name="/concat2", axis=0),
        helper.make_node("Equal", ["wanted", "minus_ones4"], ["is_free"], name="/equal"),
        helper.make_node("Where", ["is_free", "ones4", "wanted"], ["expand_to"], name="/where"),
        helper.make_node("Unsqueeze", ["y", "ones1"], ["y1"], name="/unsqueeze2"),
        helper.make_node("Expand", ["y1", "expand_to"], ["z"], name="/expand"),
        helper.make_node("Exp", ["z"], ["e"], name="/exp"),
    ]
    constants = [numpy_helper.from_array(np.array(0, np.int64), "zero"), _int64("zeros", [0]),
                 _int64("two_three", [2, 3]), _int64("minus_ones", [4, -1, -1]), _int64("minus_ones4", [-1] * 4),
                 _int64("ones4", [1] * 4), _int64("ones1", [1])]
    graph = helper.make_graph(nodes, "exporter", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_arithmetic_through_where_and_expand_resolves() -> None:
    imported = import_model(exporter_model(batch=5))
    assert imported.skipped == ()
    assert "y f32 [5, 4, 2, 3] heap" in imported.kernels["exp_"]


def test_a_symbolic_dimension_is_dynamic_until_fixed() -> None:
    dynamic = import_model(exporter_model())
    assert {s.node: s.feature for s in dynamic.skipped}["/exp"] == "dynamic shape"
    fixed = import_model(exporter_model(), input_shapes={"x": (3, 6)})
    assert fixed.skipped == ()
    assert fixed.to_json()["input_shapes"] == {"x": [3, 6]}
    assert fixed.to_json()["inputs"] == [{"name": "x", "dtype": "f32", "shape": [3, 6]}]
    assert any("[3, 4, 2, 3]" in text for text in fixed.kernels.values())


def test_unresolved_shapes_write_nothing_in_the_working_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # ONNX Runtime's public infer_shapes saves the model to ./sym_shape_infer_temp.onnx in this case
    monkeypatch.chdir(tmp_path)
    import_model(exporter_model())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("texts", "expected"), [
    (["ids=1,128", "mask=1,128"], {"ids": (1, 128), "mask": (1, 128)}),
    (["a=b=2"], {"a=b": (2,)}),  # a name may hold `=`: the last one separates
    (["s="], {"s": ()}),
    (["x=3", "x=3"], {"x": (3,)}),
])
def test_input_shapes_parse(texts: list[str], expected: dict) -> None:
    assert parse_input_shapes(texts) == expected


@pytest.mark.parametrize(("texts", "message"), [
    (["ids"], "--input-shape ids: expected NAME=D,D,... (for example ids=1,128)"),
    (["=1,2"], "--input-shape =1,2: expected NAME=D,D,..."),
    (["ids=1,x"], "--input-shape ids=1,x: the dimensions must be integers separated by commas"),
    (["ids=1,2", "ids=1,3"], "--input-shape ids=1,3: `ids` is given twice, with different shapes"),
])
def test_malformed_input_shapes_name_the_option(texts: list[str], message: str) -> None:
    with pytest.raises(ShapeError) as error:
        parse_input_shapes(texts)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(("shapes", "message"), [
    ({"y": (3, 6)}, "--input-shape y=3,6: the model has no input `y` (its inputs: `x`)"),
    ({"x": (3, 6, 1)}, "--input-shape x=3,6,1: input `x` has rank 2 ([batch, 6]), not 3"),
    ({"x": (0, 6)}, "--input-shape x=0,6: every size must be at least 1"),
    ({"x": (-2, 6)}, "--input-shape x=-2,6: every size must be at least 1"),
    ({"x": (3, 7)}, "--input-shape x=3,7: dimension 1 of input `x` is 6 in the model"),
])
def test_input_shapes_that_do_not_fit_the_model_are_refused(shapes: dict, message: str) -> None:
    with pytest.raises(ShapeError) as error:
        with_input_shapes(exporter_model(), shapes)
    assert str(error.value) == message
    with pytest.raises(ModelError) as error:
        import_model(exporter_model(), input_shapes=shapes)
    assert str(error.value) == f"exporter.onnx: error: {message}"


def test_an_initializer_is_not_an_input_to_fix() -> None:
    with pytest.raises(ShapeError, match="the model has no input `zero` "):
        with_input_shapes(exporter_model(), {"zero": ()})


def test_the_command_fixes_shapes_and_records_them(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(exporter_model(), str(path))
    out = tmp_path / "out"
    assert main(["import", str(path), "--out", str(out), "--input-shape", "x=2,6", "--strict"]) == 0
    assert json.loads((out / "model.json").read_text())["input_shapes"] == {"x": [2, 6]}
    capsys.readouterr()
    assert main(["import", str(path), "--out", str(tmp_path / "bad"), "--input-shape", "x=2"]) == 1
    assert capsys.readouterr().err.strip() == ("m.onnx: error: --input-shape x=2: input `x` has "
                                               "rank 2 ([batch, 6]), not 1")
    assert main(["import", str(path), "--out", str(tmp_path / "bad"), "--input-shape", "x:2"]) == 1
    assert "dojo import: error: --input-shape x:2: expected NAME=D,D,..." in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
