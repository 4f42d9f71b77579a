"""`import_model`: small models built with onnx.helper, checked node by node against ONNX Runtime."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dojo_ir import interpret, load
from libgen.onnx.importer import Call, ModelError, import_model, write_import
from libgen.onnx.nodes import identifier
from tests.onnx.single_node import normal

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset=21):
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def every_value(proto: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of the graph as ONNX Runtime computes it, initializers included."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(inferred)
    known = {o.name for o in exposed.graph.output}
    exposed.graph.output.extend(v for v in inferred.graph.value_info if v.name not in known)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(names, feed), strict=True))
    values.update(feed)
    values.update({t.name: numpy_helper.to_array(t) for t in proto.graph.initializer})
    return values


def assert_calls_match_ort(imported, proto, feed):
    """Each written kernel, run by the reference interpreter on its call's ORT inputs, gives ORT's
    outputs for its node(s)."""
    values = every_value(proto, feed)
    values.update((name, derived.value) for name, derived in imported.constants.items())
    for call in imported.calls:
        text = imported.kernels[call.kernel]
        program = load(text)
        got = interpret(program, dict(zip(program.inputs, (values[v] for v in call.inputs), strict=True)))
        for array, value in zip(program.outputs, call.outputs, strict=True):
            np.testing.assert_allclose(got[array], values[value], rtol=1e-4, atol=1e-5, err_msg=text)


def chain():
    nodes = [helper.make_node("Add", ["x", "bias"], ["s"], name="/add"),
             helper.make_node("Relu", ["s"], ["r"], name="/relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="/matmul")]
    initializers = [numpy_helper.from_array(normal(7, seed=1), "bias"), numpy_helper.from_array(normal(7, 4, seed=2),
                                                                                                "w")]
    return model(nodes, [tensor("x", [3, 5, 7])], [tensor("y", [3, 5, 4])], initializers)


def test_a_chain_becomes_one_kernel_per_node_in_graph_order():
    imported = import_model(chain())
    assert [c.nodes for c in imported.calls] == [("/add",), ("/relu",), ("/matmul",)]
    assert imported.calls[0] == Call("add", ("/add",), ("x", "bias"), ("s",))
    assert not imported.skipped
    assert_calls_match_ort(imported, chain(), {"x": normal(3, 5, 7)})


def test_each_file_parses_and_names_its_model_and_node(tmp_path):
    proto = chain()
    path = tmp_path / "encoder.onnx"
    onnx.save(proto, path)
    written = write_import(import_model(path), tmp_path / "out")
    assert sorted(p.name for p in written) == ["add.dojo", "matmul.dojo", "model.json", "relu.dojo"]
    text = (tmp_path / "out" / "matmul.dojo").read_text()
    assert text.startswith('# From encoder.onnx, node "/matmul" (MatMul).')
    for p in written[:-1]:
        load(p.read_text())


def test_model_json_maps_nodes_to_files(tmp_path):
    write_import(import_model(chain()), tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    assert doc["format"] == 1 and doc["model"] == "tiny.onnx" and doc["fused"] is False
    assert doc["inputs"] == [{"name": "x", "dtype": "f32", "shape": [3, 5, 7]}]
    assert doc["outputs"] == [{"name": "y", "dtype": "f32", "shape": [3, 5, 4]}]
    assert doc["calls"][2] == {"kernel": "matmul", "file": "matmul.dojo", "nodes": ["/matmul"], "inputs": ["r", "w"],
                               "outputs": ["y"]}
    assert [(n["name"], n["op"], n["kernel"], n["unsupported"]) for n in doc["nodes"]] == [
        ("/add", "Add", "add", None), ("/relu", "Relu", "relu", None), ("/matmul", "MatMul", "matmul", None)]


def test_a_reimport_removes_the_kernels_it_no_longer_writes_and_nothing_else(tmp_path):
    write_import(import_model(chain()), tmp_path)
    (tmp_path / "notes.dojo").write_text("mine")
    fused = write_import(import_model(chain(), fuse=True), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(p.name for p in fused), "notes.dojo"])
    assert not (tmp_path / "relu.dojo").exists()


def test_an_unsupported_node_in_the_middle_is_skipped_and_the_rest_imported():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("TopK", ["r", "k"], ["values", "indices"], name="topk", axis=-1),
             helper.make_node("Exp", ["values"], ["y"], name="exp")]
    proto = model(nodes, [tensor("x", [3, 7])], [tensor("y", [3, 2])],
                  [numpy_helper.from_array(np.array([2], np.int64), "k")])
    imported = import_model(proto)
    (skipped,) = imported.skipped
    assert (skipped.node, skipped.op, skipped.feature) == ("topk", "TopK", "data-dependent range")
    assert [c.nodes for c in imported.calls] == [("relu",), ("exp",)]
    record = imported.to_json()["nodes"][1]
    assert record["kernel"] is None and record["unsupported"]["feature"] == "data-dependent range"
    assert_calls_match_ort(imported, proto, {"x": normal(3, 7)})


@pytest.mark.parametrize("opset", [9, 12])
def test_an_optional_output_nothing_reads_is_left_out(opset):
    # SqueezeNet and AlexNet (opset 9) name Dropout's mask, of no inferred shape there, and never read it
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="dropout"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    proto = model(nodes, [tensor("x", [3, 5])], [tensor("z", [3, 5])], opset=opset)
    imported = import_model(proto)
    assert imported.skipped == ()
    assert [(c.nodes, c.outputs) for c in imported.calls] == [(("dropout",), ("y",)), (("relu",), ("z",))]
    assert imported.to_json()["nodes"][0]["outputs"] == ["y", "mask"]  # model.json keeps the model's node
    assert_calls_match_ort(imported, proto, {"x": normal(3, 5)})


def test_an_optional_output_that_is_read_is_still_refused():
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="dropout"),
             helper.make_node("Not", ["mask"], ["kept"], name="not")]
    proto = model(nodes, [tensor("x", [3, 5])], [tensor("y", [3, 5]), tensor("kept", [3, 5], TensorProto.BOOL)])
    assert [(s.node, s.feature) for s in import_model(proto).skipped] == [("dropout", "dtype"), ("not", "dtype")]


def test_a_symbolic_dimension_skips_the_nodes_that_see_it():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Exp", ["z"], ["w"], name="exp")]
    proto = model(nodes, [tensor("x", ["batch", 5]), tensor("z", [3, 5])], [tensor("y", ["batch", 5]),
                                                                         tensor("w", [3, 5])])
    imported = import_model(proto)
    (skipped,) = imported.skipped
    assert skipped.feature == "dynamic shape" and "`x`" in skipped.detail and "batch" in skipped.detail
    assert [c.nodes for c in imported.calls] == [("exp",)]
    assert imported.to_json()["inputs"][0] == {"name": "x", "dtype": "f32", "shape": ["batch", 5]}


def test_an_empty_tensor_skips_its_node():
    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"], name="slice"),
             helper.make_node("Relu", ["x"], ["z"], name="relu")]
    starts, ends = (numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("s", 2), ("e", 2)))
    proto = model(nodes, [tensor("x", [5])], [tensor("y", [0]), tensor("z", [5])], [starts, ends])
    imported = import_model(proto)
    (skipped,) = imported.skipped
    assert (skipped.node, skipped.feature) == ("slice", "empty tensor") and "[0]" in skipped.detail
    assert [c.nodes for c in imported.calls] == [("relu",)]


def test_a_dtype_the_format_lacks_is_skipped():
    proto = model([helper.make_node("Abs", ["x"], ["y"], name="abs")], [tensor("x", [3], TensorProto.FLOAT16)],
                  [tensor("y", [3], TensorProto.FLOAT16)])
    (skipped,) = import_model(proto).skipped
    assert skipped.feature == "dtype" and "float16" in skipped.detail


def test_a_reshape_fed_by_a_shape_chain_sees_its_constant_shape():
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape")]
    initializers = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                    numpy_helper.from_array(np.array([0], np.int64), "axes"),
                    numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    proto = model(nodes, [tensor("x", [3, 5, 7])], [tensor("y", [3, 35])], initializers)
    imported = import_model(proto)
    assert not imported.skipped
    assert [c.nodes for c in imported.calls] == [("reshape",)]
    folded = [n["name"] for n in imported.to_json()["nodes"] if n["kernel"] is None and n["unsupported"] is None]
    assert folded == ["shape", "gather", "unsqueeze", "concat"]
    assert_calls_match_ort(imported, proto, {"x": normal(3, 5, 7)})


def test_constant_nodes_are_folded_into_their_consumers():
    nodes = [helper.make_node("Constant", [], ["two"], name="const", value_float=2.0),
             helper.make_node("Mul", ["x", "two"], ["y"], name="mul")]
    proto = model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])])
    imported = import_model(proto)
    assert "* 2" in imported.kernels["mul"] and imported.calls[0].inputs == ("x",)
    assert_calls_match_ort(imported, proto, {"x": normal(4, 8)})


def test_identical_nodes_share_one_kernel():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node("Relu", ["x2"], ["b"], name=""),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    proto = model(nodes, [tensor("x", [3, 5]), tensor("x2", [3, 5])], [tensor("y", [3, 5])])
    imported = import_model(proto)
    assert sorted(imported.kernels) == ["add", "relu"]
    assert [c.kernel for c in imported.calls] == ["relu", "relu", "add"]
    assert imported.calls[1].nodes == ("Relu_1",)  # an unnamed node gets its operator and position
    assert "1 more node" in imported.kernels["relu"]
    assert_calls_match_ort(imported, proto, {"x": normal(3, 5), "x2": normal(3, 5, seed=1)})


def test_a_made_up_node_name_is_none_the_graph_gives():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="Relu_1"), helper.make_node("Relu", ["a"], ["b"], name=""),
             helper.make_node("Relu", ["b"], ["y"], name="Relu_1")]
    proto = model(nodes, [tensor("x", [3, 5])], [tensor("y", [3, 5])])
    names = [record["name"] for record in import_model(proto).nodes]
    assert len(set(names)) == 3 and names[0] == "Relu_1"


def test_different_shapes_of_one_operator_get_numbered_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["z"], ["b"], name="r2")]
    proto = model(nodes, [tensor("x", [3, 5]), tensor("z", [4, 8])], [tensor("a", [3, 5]), tensor("b", [4, 8])])
    imported = import_model(proto)
    assert sorted(imported.kernels) == ["relu", "relu_2"]
    for name in imported.kernels:
        assert identifier(name) == name and load(imported.kernels[name]).name == name


def test_a_foreign_domain_operator_is_not_written():
    proto = model([helper.make_node("Fancy", ["x"], ["y"], name="fancy", domain="com.example")],
                  [tensor("x", [3])], [tensor("y", [3])])
    proto.opset_import.append(helper.make_opsetid("com.example", 1))
    (skipped,) = import_model(proto).skipped
    assert skipped.feature == "not written" and "com.example" in skipped.detail


def test_the_opset_reaches_the_catalogue():
    proto = model([helper.make_node("Clip", ["x"], ["y"], name="clip", min=-0.5, max=0.5)], [tensor("x", [3, 5])],
                  [tensor("y", [3, 5])], opset=6)
    imported = import_model(proto)
    assert "0.5" in imported.kernels["clip"]
    assert_calls_match_ort(imported, proto, {"x": normal(3, 5)})


def test_fusing_joins_an_elementwise_chain():
    imported = import_model(chain(), fuse=True)
    assert imported.fused and any(len(c.nodes) > 1 for c in imported.calls)
    assert {n for c in imported.calls for n in c.nodes} == {"/add", "/relu", "/matmul"}
    assert_calls_match_ort(imported, chain(), {"x": normal(3, 5, 7)})


def conv_bn(*, bias=True, group=1, bn_attributes=None, stats_as_input=False, conv_output_too=False,
            opset=21, then=None, variance_shift=0.0):
    """x [2, 4, 6, 5] -> Conv (3x3, 6 channels, pads 1) -> BatchNormalization -> y, and `then`
    (an operator reading y) when given."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"))
        conv_inputs.append("b")
    stats = {"scale": 1 + 0.2 * rng.standard_normal(6), "shift": 0.3 * rng.standard_normal(6),
             "mean": 0.3 * rng.standard_normal(6), "var": 0.5 + rng.random(6) + variance_shift}
    inputs = [tensor("x", [2, 4, 6, 5])]
    for name, value in stats.items():
        if stats_as_input and name == "mean":
            inputs.append(tensor(name, [6]))
        else:
            inits.append(numpy_helper.from_array(value.astype(np.float32), name))
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], name="conv", pads=[1, 1, 1, 1], group=group),
             helper.make_node("BatchNormalization", ["c", *stats], ["y"], name="bn", **(bn_attributes or {}))]
    outputs = [tensor("y", [2, 6, 6, 5])] + ([tensor("c", [2, 6, 6, 5])] if conv_output_too else [])
    if then is not None:
        nodes.append(helper.make_node(then, ["y"], ["z"], name="then"))
        outputs = [tensor("z", None)]
    return model(nodes, inputs, outputs, inits, opset=opset)


def feed_of(proto):
    feed = {"x": normal(2, 4, 6, 5)}
    if any(i.name == "mean" for i in proto.graph.input):
        feed["mean"] = normal(6, seed=5)
    return feed


@pytest.mark.parametrize("variant", [{}, {"bias": False}, {"group": 2}, {"bn_attributes": {"epsilon": 0.01}},
                                     {"opset": 9, "bn_attributes": {"momentum": 0.8}}],
                         ids=["bias", "no-bias", "groups", "epsilon", "opset-9"])
def test_a_batchnorm_after_a_conv_folds_into_its_weights(variant, tmp_path):
    proto = conv_bn(**variant)
    imported = import_model(proto)
    (call,) = imported.calls
    assert call.nodes == ("conv", "bn") and call.outputs == ("y",)
    derived = imported.constants
    assert call.inputs[1:] == tuple(derived) and call.inputs[0] == "x"
    assert set(derived[call.inputs[1]].sources) == {"w", "scale", "shift", "mean", "var"}
    assert "BatchNormalization" not in imported.kernels[call.kernel].split("\n\n", 1)[1]  # only in its comment
    assert_calls_match_ort(imported, proto, feed_of(proto))
    write_import(imported, tmp_path)
    doc = json.loads((tmp_path / "model.json").read_text())
    assert [c["name"] for c in doc["constants"]] == list(derived)
    assert [n["kernel"] for n in doc["nodes"]] == [call.kernel, call.kernel]
    with np.load(tmp_path / "constants.npz") as written:
        for name, value in derived.items():
            np.testing.assert_array_equal(written[name], value.value)


@pytest.mark.parametrize("variant", [{"bn_attributes": {"training_mode": 1}, "opset": 15}, {"stats_as_input": True},
                                     {"conv_output_too": True}, {"variance_shift": -2.0}],
                         ids=["training", "statistics-not-constant", "conv-output-used-elsewhere", "negative-variance"])
def test_a_batchnorm_that_cannot_fold_stays_a_kernel_of_its_own(variant):
    proto = conv_bn(**variant)
    imported = import_model(proto)
    calls = [c.nodes for c in imported.calls]
    assert ("conv",) in calls and not any("bn" in nodes and "conv" in nodes for nodes in calls)
    assert not imported.constants and not imported.to_json()["constants"]
    if "bn_attributes" not in variant:  # ORT refuses training mode; a negative variance gives NaNs on both sides
        assert_calls_match_ort(imported, proto, feed_of(proto))


def conv_bn_scaled(scale_shape, shift_shape, swap=False):
    """conv_bn, then (as Inception v2 writes it) a Mul by `scale_shape` and an Add of `shift_shape`
    constants, the Add's operands swapped when `swap`."""
    proto = conv_bn()
    rng = np.random.default_rng(4)
    proto.graph.initializer.extend([
        numpy_helper.from_array((1 + 0.3 * rng.standard_normal(scale_shape)).astype(np.float32), "k"),
        numpy_helper.from_array(rng.standard_normal(shift_shape).astype(np.float32), "d")])
    proto.graph.node.extend([helper.make_node("Mul", ["y", "k"], ["m"], name="mul"),
                             helper.make_node("Add", ["d", "m"] if swap else ["m", "d"], ["z"], name="add")])
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", F, [2, 6, 6, 5]))
    return proto


@pytest.mark.parametrize("scale_shape, shift_shape, swap", [((6, 1, 1), (6, 1, 1), False), ((1, 6, 1, 1), (1,), True),
                                                             ((), (1, 1, 1), False)])
def test_a_mul_and_add_of_one_constant_a_channel_fold_into_the_conv_after_its_batchnorm(scale_shape, shift_shape,
                                                                                        swap):
    proto = conv_bn_scaled(scale_shape, shift_shape, swap)
    imported = import_model(proto)
    (call,) = imported.calls
    assert call.nodes == ("conv", "bn", "mul", "add") and call.outputs == ("z",)
    weights, bias = (imported.constants[name] for name in call.inputs[1:])
    assert set(weights.sources) == {"w", "scale", "shift", "mean", "var", "k"}  # the model's own, not the derived
    assert set(bias.sources) == {"b", "scale", "shift", "mean", "var", "k", "d"}
    assert_calls_match_ort(imported, proto, feed_of(proto))


@pytest.mark.parametrize("scale_shape", [(6, 6, 5), (1, 1, 1, 5), (2, 6, 1, 1)])
def test_a_mul_by_a_constant_that_varies_within_a_channel_stays_a_kernel_of_its_own(scale_shape):
    proto = conv_bn_scaled(scale_shape, (6, 1, 1))
    imported = import_model(proto)
    assert [c.nodes for c in imported.calls] == [("conv", "bn"), ("mul",), ("add",)]
    assert_calls_match_ort(imported, proto, feed_of(proto))


def test_fusing_reads_a_convs_activation_and_pool_into_its_kernel():
    proto = conv_bn(then="Relu")
    proto.graph.node.append(helper.make_node("MaxPool", ["z"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("p", F, None))
    imported = import_model(proto, fuse=True)
    (call,) = imported.calls
    assert call.nodes == ("conv", "bn", "then", "pool") and call.outputs == ("p",)
    text = imported.kernels[call.kernel]
    assert ", (max(conv_y[" in text and "max=" not in text  # the Relu written into each of the pool's reads
    assert_calls_match_ort(imported, proto, feed_of(proto))


def two_convs(taken_name=None):
    """x [1, 8, 9, 7] -> Conv -> Conv, both 8 channels, 3x3, pads 1, of different weights: one kernel
    by Winograd for both; `taken_name` is given to a graph value (a Relu's output after them)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8.5).astype(np.float32), w)
             for w in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["h", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1])]
    outputs = [tensor("y", [1, 8, 9, 7])]
    if taken_name:
        nodes.append(helper.make_node("Relu", ["y"], [taken_name], name="relu"))
        outputs = [tensor(taken_name, [1, 8, 9, 7])]
    return model(nodes, [tensor("x", [1, 8, 9, 7])], outputs, inits)


def test_convs_by_winograd_share_a_kernel_and_read_their_own_transformed_weights(tmp_path):
    proto = two_convs(taken_name="w1.winograd")
    imported = import_model(proto)
    first, second, _ = imported.calls
    assert first.kernel == second.kernel and "+= u[" in imported.kernels[first.kernel]
    assert first.inputs == ("x", "w1.winograd.2") and second.inputs == ("h", "w2.winograd")  # the graph has w1.winograd
    assert {n: d.sources for n, d in imported.constants.items()} == {"w1.winograd.2": ("w1",), "w2.winograd": ("w2",)}
    assert "Winograd F(4, 3) along the rows" in imported.kernels[first.kernel].split("\nkernel ")[0]  # its comment
    assert_calls_match_ort(imported, proto, {"x": normal(1, 8, 9, 7)})
    write_import(imported, tmp_path)
    with np.load(tmp_path / "constants.npz") as written:
        assert sorted(written) == ["w1.winograd.2", "w2.winograd"]
        np.testing.assert_array_equal(written["w2.winograd"], imported.constants["w2.winograd"].value)


def test_winograd_weights_of_a_folded_batchnorm_come_from_the_models_constants():
    proto = conv_bn()
    proto.graph.input[0].CopyFrom(tensor("x", [2, 8, 6, 5]))
    weight = numpy_helper.from_array(np.random.default_rng(5).standard_normal((6, 8, 3, 3)).astype(np.float32), "w")
    proto.graph.initializer[0].CopyFrom(weight)
    imported = import_model(proto)
    (call,) = imported.calls
    assert "+= u[" in imported.kernels[call.kernel]
    # the folded weights feed only the transform: the call reads the transformed ones and the folded bias
    (transformed,) = [n for n in imported.constants if n.endswith(".winograd")]
    assert set(call.inputs) == {"x", transformed, *(n for n in imported.constants if n != transformed)}
    assert len(imported.constants) == 2
    assert set(imported.constants[transformed].sources) == {"w", "scale", "shift", "mean", "var"}
    assert_calls_match_ort(imported, proto, {"x": normal(2, 8, 6, 5)})


def test_fusing_a_residual_after_a_winograd_conv_writes_it_into_the_rows():
    """The residual Add cannot be where a Winograd convolution's rows start (they are written, not
    accumulated): it is added, and the Relu after it applied, in each line that writes the rows."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8.5).astype(np.float32), w)
             for w in ("w1", "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="r1"),
             helper.make_node("Conv", ["r", "w2"], ["b"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "x"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="r2")]
    proto = model(nodes, [tensor("x", [2, 8, 9, 7])], [tensor("y", [2, 8, 9, 7])], inits)
    imported = import_model(proto, fuse=True)
    assert [c.nodes for c in imported.calls] == [("c1", "r1"), ("c2", "add", "r2")]
    second = imported.kernels[imported.calls[1].kernel]
    written = [line for line in second.splitlines() if " y[" in line]
    residual = re.search(r"kernel \w+\((?:\w+, )*(\w+)\)", second)[1]  # the last input: the Add's other operand
    assert "+= u[" in second and len(written) == 4
    assert all(" = max(" in line and f"+ {residual}[" in line for line in written)
    assert_calls_match_ort(imported, proto, {"x": normal(2, 8, 9, 7)})


def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model at all\xff" * 5)
    with pytest.raises(ModelError, match="bad.onnx"):
        import_model(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty.onnx: error: cannot read an ONNX model: it has no graph"):
        import_model(empty)
    with pytest.raises(ModelError, match="missing.onnx"):
        import_model(tmp_path / "missing.onnx")
