"""If, Loop and Scan, whose bodies read the values around them as exporters write them: imported
(each a node without a kernel, for control flow), run by ONNX Runtime inside `dojo model run`,
with the rest of the model on the library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from libgen.onnx.importer import ModelError, import_model
from libgen.onnx.run import ModelRunner
from tests.onnx.test_model_run import expected, library_of


def _value(name: str, shape: list[int], dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _if() -> onnx.GraphProto:
    then = helper.make_graph([helper.make_node("Relu", ["h"], ["t"])], "then", [], [_value("t", [3, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [_value("e", [3, 4])])
    nodes = [helper.make_node("Exp", ["x"], ["h"], name="exp"),  # read by both branches
             helper.make_node("If", ["c"], ["b"], name="if", then_branch=then, else_branch=other),
             helper.make_node("Add", ["b", "x"], ["y"], name="add")]
    return helper.make_graph(nodes, "if", [_value("x", [3, 4]), _value("c", [], TensorProto.BOOL)],
                             [_value("y", [3, 4])])


def _loop() -> onnx.GraphProto:
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["cond_out"]),
                              helper.make_node("Add", ["sum", "h"], ["sum_out"])],  # `h` is the outer value
                             "body", [_value("i", [], TensorProto.INT64), _value("cond", [], TensorProto.BOOL),
                                      _value("sum", [3, 4])],
                             [_value("cond_out", [], TensorProto.BOOL), _value("sum_out", [3, 4])])
    nodes = [helper.make_node("Exp", ["x"], ["h"], name="exp"),
             helper.make_node("Loop", ["n", "", "x"], ["s"], name="loop", body=body),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return helper.make_graph(nodes, "loop", [_value("x", [3, 4]), _value("n", [], TensorProto.INT64)],
                             [_value("y", [3, 4])])


def _scan() -> onnx.GraphProto:
    body = helper.make_graph([helper.make_node("Mul", ["row", "h"], ["scaled"]),  # `h` is the outer value
                              helper.make_node("Add", ["acc", "scaled"], ["acc_out"]),
                              helper.make_node("Identity", ["acc_out"], ["row_out"])],
                             "body", [_value("acc", [4]), _value("row", [4])], [_value("acc_out", [4]),
                                                                                _value("row_out", [4])])
    nodes = [helper.make_node("Sigmoid", ["w"], ["h"], name="sigmoid"),
             helper.make_node("Scan", ["init", "x"], ["total", "rows"], name="scan", body=body, num_scan_inputs=1),
             helper.make_node("Relu", ["rows"], ["y"], name="relu")]
    return helper.make_graph(nodes, "scan", [_value("init", [4]), _value("x", [3, 4]), _value("w", [4])],
                             [_value("y", [3, 4]), _value("total", [4])])


FEEDS = {
    "if": lambda flag: {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "c": np.array(flag)},
    "loop": lambda count: {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                           "n": np.array(count, np.int64)},
    "scan": lambda _: {"init": np.zeros(4, np.float32), "x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                       "w": np.arange(4, dtype=np.float32)},
}


@pytest.mark.parametrize(("name", "graph", "values", "on_library"), [
    ("if", _if, [True, False], ["exp", "add"]),
    ("loop", _loop, [0, 3], ["exp"]),  # shape inference leaves a Loop's outputs unknown: the Relu after it too
    ("scan", _scan, [None], ["sigmoid", "relu"]),
])
def test_a_body_reading_outer_values_imports_and_runs_on_onnxruntime(name: str, graph, values: list,
                                                                     on_library: list[str], tmp_path: Path) -> None:
    model = helper.make_model(graph(), opset_imports=[helper.make_opsetid("", 17)])
    imported = import_model(model)
    control = next(s for s in imported.skipped if s.node == name)
    assert control.feature == "control flow"
    path, library = library_of(model, tmp_path, f"cf_{name}")
    runner = ModelRunner(path, library)
    assert runner.placement[name] == "onnxruntime" and runner.library_nodes == on_library
    for value in values:
        feeds = FEEDS[name](value)
        got, want = runner.run(feeds), expected(path, feeds)
        for output in want:
            np.testing.assert_allclose(got[output], want[output], rtol=1e-5, atol=1e-6)


def test_a_body_reading_a_value_nobody_makes_is_refused_with_the_whole_message() -> None:
    broken = _if()
    broken.node[0].output[0] = "other"  # the branches read `h`, which nothing makes now
    with pytest.raises(ModelError) as raised:
        import_model(helper.make_model(broken, opset_imports=[helper.make_opsetid("", 17)]))
    message = str(raised.value)
    assert message.startswith("if.onnx: error: not a valid ONNX model: ") and "\n" not in message
    assert "input 'h'" in message and "Name: if OpType: If" in message
