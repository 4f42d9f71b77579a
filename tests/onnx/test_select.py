"""Booleans that only select (libgen/onnx/select.py): a Where or a Cast of a boolean becomes one
kernel that computes its condition, exact against ONNX Runtime on every integer, and infinities
where the formula is exact for them; the rest is refused with the reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from dojo_ir import interpret, load
from libgen.onnx.importer import Imported, import_model
from libgen.onnx.select import casts_late

I64 = np.iinfo(np.int64)
INF = float("inf")


def model_of(nodes: list[onnx.NodeProto], inputs: Mapping[str, np.ndarray], outputs: Sequence[str],
             constants: Mapping[str, np.ndarray] | None = None, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """The model of `nodes`; its first output of `dtype`, any other boolean."""
    graph = helper.make_graph(
        nodes, "select", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                          for n, v in inputs.items()],
        [helper.make_tensor_value_info(n, dtype if i == 0 else TensorProto.BOOL, None)
         for i, n in enumerate(outputs)],
        [numpy_helper.from_array(v, n) for n, v in (constants or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_imported(imported: Imported, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict:
    """The import's calls by the reference interpreter and its other nodes by onnx's reference
    implementation, in the order of the graph the import saw."""
    env = {**feeds, **{t.name: numpy_helper.to_array(t) for t in model.graph.initializer},
           **{n: d.value for n, d in imported.constants.items()}}
    calls = {call.nodes[0]: call for call in imported.calls}
    for node, record in zip(casts_late(model).graph.node, imported.nodes, strict=True):
        if record["name"] in calls:
            call = calls[record["name"]]
            program = load(imported.kernels[call.kernel])
            results = interpret(program, dict(zip(program.inputs, (env[n] for n in call.inputs), strict=True)))
            env.update(zip(call.outputs, (results[n] for n in program.outputs), strict=True))
        elif not record.get("computed_in"):
            inputs = {n: env[n] for n in node.input if n}
            evaluator = ReferenceEvaluator(helper.make_model(helper.make_graph(
                [node], "one", [helper.make_tensor_value_info(n, 0, None) for n in inputs],
                [helper.make_tensor_value_info(n, 0, None) for n in node.output]),
                opset_imports=[helper.make_opsetid("", 17)]))
            env.update(zip(node.output, evaluator.run(None, inputs), strict=True))
    return env


def check(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], on_onnxruntime: Sequence[str] = ()) -> Imported:
    """Assert that the model imports whole, but for the nodes `on_onnxruntime`, and computes
    ONNX Runtime's outputs exactly."""
    imported = import_model(model)
    assert [s.node for s in imported.skipped] == list(on_onnxruntime), imported.skipped
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    env = run_imported(imported, model, feeds)
    for name, want in zip(names, session.run(None, dict(feeds)), strict=True):
        np.testing.assert_array_equal(env[name], want, err_msg=name)
    return imported


def where_of(condition: list[onnx.NodeProto], a: str = "a", b: str = "b") -> list[onnx.NodeProto]:
    return [*condition, helper.make_node("Where", ["c", a, b], ["y"], name="/where")]


EXTREMES = np.array([I64.min, I64.min + 1, -2**40, -1, 0, 1, 2**40, I64.max - 1, I64.max], np.int64)


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_comparisons_are_exact_at_the_extremes(op: str, dtype: type) -> None:
    values = EXTREMES if dtype == np.int64 else np.array([-2**31, -2**31 + 1, -1, 0, 1, 2**31 - 1], np.int32)
    i, j = (v.reshape(-1) for v in np.meshgrid(values, values))  # every pair, equal ones among them
    a, b = np.arange(i.size, dtype=np.float32), -np.arange(i.size, dtype=np.float32) - 1
    imported = check(model_of(where_of([helper.make_node(op, ["i", "j"], ["c"], name="/cmp")]),
                              {"i": i, "j": j, "a": a, "b": b}, ["y"]), {"i": i, "j": j, "a": a, "b": b})
    assert [call.nodes for call in imported.calls] == [("/where", )]
    assert imported.nodes[0]["computed_in"] == ["/where"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(I64.min, I64.max) | st.sampled_from(EXTREMES.tolist()), min_size=2, max_size=12),
       st.sampled_from(["Less", "GreaterOrEqual", "Equal"]))
def test_integer_comparisons_agree_with_onnxruntime(values: list[int], op: str) -> None:
    i = np.array(values, np.int64)
    j = np.roll(i, 1)
    feeds = {"i": i, "j": j}
    nodes = [helper.make_node(op, ["i", "j"], ["k"], name="/cmp"), helper.make_node("Not", ["k"], ["c"], name="/not"),
             helper.make_node("Cast", ["c"], ["y"], name="/cast", to=TensorProto.INT64)]
    check(model_of(nodes, feeds, ["y"], dtype=TensorProto.INT64), feeds)


@pytest.mark.parametrize(("a", "b"), [(0.0, -INF), (-INF, 0.0), (2.5, INF), (INF, -3.0), (-INF, INF), (INF, -INF),
                                      (-INF, -INF), (0.0, -3.4028234663852886e38), (1.0, 0.0), (-2.0, 7.0)])
def test_constant_values_are_selected_exactly_even_when_infinite(a: float, b: float) -> None:
    mask = np.array([[1, 0, 3, 0, -5]], np.int64)
    nodes = where_of([helper.make_node("Cast", ["mask"], ["c"], name="/cast", to=TensorProto.BOOL)], "ca", "cb")
    constants = {"ca": np.array(a, np.float32), "cb": np.array([b], np.float32)}
    check(model_of(nodes, {"mask": mask}, ["y"], constants), {"mask": mask})


def test_tensor_values_broadcast_with_the_condition() -> None:
    feeds = {"mask": np.array([[0, 2, 0, 1, 1]], np.int64), "a": np.arange(15, dtype=np.float32).reshape(3, 5),
             "b": np.array([[-1.0], [-INF], [INF]], np.float32)}  # infinities, selected or not: exact
    feeds["mask"][0, 0] = 0
    nodes = where_of([helper.make_node("Cast", ["mask"], ["c"], name="/cast", to=TensorProto.BOOL)])
    imported = check(model_of(nodes, feeds, ["y"]), feeds)
    assert "Exact unless the value not selected is NaN" in imported.kernels["where"]


def test_logic_and_a_cast_of_a_boolean_to_a_number() -> None:
    feeds = {"i": np.array([[0, 1, 2, 0]], np.int32), "j": np.array([[0], [5], [-1]], np.int64)}
    nodes = [helper.make_node("Cast", ["i"], ["bi"], name="/bi", to=TensorProto.BOOL),
             helper.make_node("Cast", ["j"], ["bj"], name="/bj", to=TensorProto.BOOL),
             helper.make_node("Xor", ["bi", "bj"], ["x"], name="/xor"),
             helper.make_node("Or", ["x", "bi"], ["o"], name="/or"),
             helper.make_node("And", ["o", "bj"], ["n"], name="/and"),
             helper.make_node("Equal", ["n", "bi"], ["e"], name="/equal"),
             helper.make_node("Not", ["e"], ["z"], name="/not"),
             helper.make_node("Cast", ["z"], ["y"], name="/cast", to=TensorProto.FLOAT)]
    imported = check(model_of(nodes, feeds, ["y"]), feeds)
    assert len(imported.calls) == 1 and all(record.get("computed_in") == ["/cast"] for record in imported.nodes[:-1])


def test_an_expanded_mask_is_read_at_its_own_shape() -> None:
    feeds = {"mask": np.array([[1, 0, 1]], np.int64)}
    nodes = [helper.make_node("Cast", ["mask"], ["m"], name="/cast", to=TensorProto.BOOL),
             helper.make_node("Expand", ["m", "shape"], ["c"], name="/expand")]
    model = model_of(where_of(nodes, "zero", "low"), feeds, ["y"],
                     {"shape": np.array([2, 4, 3], np.int64), "zero": np.array(0, np.float32),
                      "low": np.array(-INF, np.float32)})
    imported = check(model, feeds)
    assert "c i64 [1, 3] heap" in imported.kernels["where"] and "y f32 [2, 4, 3] heap" in imported.kernels["where"]


def test_a_mask_moved_around_before_its_logic_is_cast_after_the_moves() -> None:
    """torch.onnx's mask: Cast(mask) -> Flatten -> Gather (constant indices) -> Reshape -> And -> Where,
    with a Shape of the cast; the moves then move integers and the Where computes the rest."""
    feeds = {"mask": np.array([[1, 1, 0, 1]], np.int64)}
    nodes = [helper.make_node("Cast", ["mask"], ["m"], name="/cast", to=TensorProto.BOOL),
             helper.make_node("Shape", ["m"], ["s"], name="/shape"),
             helper.make_node("Flatten", ["m"], ["f"], name="/flatten", axis=2),
             helper.make_node("Gather", ["f", "indices"], ["g"], name="/gather", axis=0),
             helper.make_node("Reshape", ["g", "s"], ["r"], name="/reshape"),
             helper.make_node("And", ["r", "true"], ["c"], name="/and")]
    model = model_of(where_of(nodes, "zero", "low"), feeds, ["y"],
                     {"indices": np.array([[3, 2, 1, 0]], np.int64), "true": np.array(True),
                      "zero": np.array(0, np.float32), "low": np.array(-INF, np.float32)})
    moved = casts_late(model)
    assert [n.op_type for n in moved.graph.node] == ["Shape", "Flatten", "Gather", "Reshape", "Cast", "And", "Where"]
    imported = check(model, feeds, on_onnxruntime=["/gather"])  # of integers
    assert {r["name"] for r in imported.nodes if r.get("computed_in")} == {"/cast", "/and"}


@pytest.mark.parametrize(("nodes", "dtype", "feature", "detail"), [
    ([helper.make_node("Less", ["x", "x2"], ["c"])], np.float32, "control flow",
     "Less of `x` (f32): the format's arithmetic propagates NaN and makes inf - inf NaN, so only integers are "
     "compared exactly"),
    ([helper.make_node("IsNaN", ["x"], ["c"])], np.float32, "control flow",
     "IsNaN of `x` (f32): every function of the format propagates NaN, so no expression tells a NaN apart from a "
     "number"),
    ([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BOOL)], np.float64, "control flow",
     "Cast of `x` to BOOL (f64): every function of the format propagates NaN"),
    ([helper.make_node("Cast", ["x"], ["c"], to=TensorProto.BOOL)], np.bool_, "dtype",
     "the boolean `x` is an input of the model"),
])
def test_what_has_no_exact_form_is_refused_with_the_reason(nodes: list, dtype: type, feature: str,
                                                           detail: str) -> None:
    x = np.zeros((2, 3), dtype)
    model = model_of(where_of(nodes), {"x": x, "x2": x, "a": np.zeros((2, 3), np.float32),
                                       "b": np.zeros((2, 3), np.float32)}, ["y"])
    skipped = {s.node: s for s in import_model(model).skipped}
    assert skipped["/where"].feature == feature and skipped["/where"].detail.startswith(detail)


def test_a_boolean_read_elsewhere_stays_on_onnxruntime() -> None:
    feeds = {"i": np.array([1, 0, 2], np.int64), "a": np.ones(3, np.float32), "b": np.zeros(3, np.float32)}
    nodes = where_of([helper.make_node("Cast", ["i"], ["c"], name="/cast", to=TensorProto.BOOL)])
    imported = import_model(model_of(nodes, feeds, ["y", "c"]))
    assert [s.node for s in imported.skipped] == ["/cast"] and imported.calls[0].nodes == ("/where",)


def test_a_varying_boolean_constant_becomes_a_derived_constant() -> None:
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    nodes = [helper.make_node("Where", ["causal", "x", "low"], ["y"], name="/where")]
    model = model_of(nodes, feeds, ["y"], {"causal": np.tril(np.ones((2, 3), bool)),
                                           "low": np.array(-INF, np.float32)})
    imported = check(model, feeds)
    assert list(imported.constants) == ["causal.i64"]


FINITE_OR_INFINITE = st.floats(width=32, allow_nan=False) | st.sampled_from([INF, -INF, 0.0, -0.0])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), FINITE_OR_INFINITE, FINITE_OR_INFINITE), min_size=1, max_size=10))
def test_tensors_are_selected_exactly_infinities_included(rows: list[tuple[int, float, float]]) -> None:
    mask, a, b = (np.array(column, dtype) for column, dtype in zip(zip(*rows, strict=True),
                                                                   (np.int64, np.float32, np.float32), strict=True))
    feeds = {"mask": mask, "a": a, "b": b}
    nodes = where_of([helper.make_node("Cast", ["mask"], ["m"], name="/cast", to=TensorProto.BOOL),
                      helper.make_node("Not", ["m"], ["c"], name="/not")])
    check(model_of(nodes, feeds, ["y"]), feeds)


def guarded_softmax(outputs: Sequence[str] = ("y",)) -> onnx.ModelProto:
    """Where(IsNaN(s), 0, s) after a Softmax s, as torch's scaled_dot_product_attention writes it."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], name="/softmax", axis=-1),
             helper.make_node("IsNaN", ["s"], ["c"], name="/isnan"),
             helper.make_node("Where", ["c", "zero", "s"], ["y"], name="/where")]
    graph = helper.make_graph(nodes, "guard", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(np.array([0], np.float32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_softmax_guarded_against_empty_rows_is_one_kernel_that_zeroes_them() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    x[0, 1, :] = -INF  # a row the mask emptied: NaN in the softmax, 0 after the guard
    x[1, 2, 1:] = -INF
    model = guarded_softmax()
    imported = import_model(model)
    assert imported.skipped == () and [call.nodes for call in imported.calls] == [("/where",)]
    assert {r["name"]: r.get("computed_in") for r in imported.nodes} == {
        "/softmax": ["/where"], "/isnan": ["/where"], "/where": None}
    assert "a row holding a NaN or +inf gives NaN, where the model gives 0" in imported.kernels["softmax"]
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_imported(imported, model, {"x": x})["y"]
    assert np.all(got[0, 1] == 0) and np.all(want[0, 1] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_softmax_read_elsewhere_keeps_its_kernel() -> None:
    imported = import_model(guarded_softmax(outputs=("y", "s")))
    assert [call.nodes for call in imported.calls] == [("/softmax",), ("/where",)]
    assert [s.node for s in imported.skipped] == []  # the IsNaN is computed inside the Where's kernel
