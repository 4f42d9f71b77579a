"""300 mutated ONNX models through `dojo import` (bench/fuzz_onnx.py runs more): each is imported
or rejected as `MODEL: error: ...`; none raises."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from bench import fuzz_onnx
from bench.fuzz_onnx import MUTATIONS, Mutant, mutants, try_import
from libgen.onnx.importer import ModelError, import_model

COUNT = 300


def test_mutated_models_are_imported_or_rejected_naming_the_file(tmp_path: Path) -> None:
    failures, applied, kinds = [], set(), set()
    for mutant in mutants(COUNT):
        applied.update(mutant.mutations)
        outcome = try_import(mutant, tmp_path, fuse=len(mutant.mutations) == 2)
        kinds.add(outcome.kind)
        if outcome.kind == "failed":
            failures.append(f"{mutant.model} {mutant.mutations}: {outcome.problem}")
    assert applied == set(MUTATIONS) and kinds >= {"imported", "rejected"}
    assert not failures, f"{len(failures)} of {COUNT} failed; the first:\n" + "\n".join(failures[:5])


def test_an_exception_or_an_unnamed_rejection_is_a_failure(tmp_path: Path, monkeypatch) -> None:
    # the harness itself: what the rules forbid is caught, not passed
    assert try_import(Mutant("encoder", (), b"\x08\x07"), tmp_path, fuse=False).kind == "rejected"

    def raising(argv):
        raise KeyError("bug")

    monkeypatch.setattr(fuzz_onnx, "dojo", raising)
    assert try_import(Mutant("encoder", (), b""), tmp_path, fuse=False).kind == "failed"
    monkeypatch.setattr(fuzz_onnx, "dojo", lambda argv: print("Traceback ...", file=sys.stderr) or 1)
    assert try_import(Mutant("encoder", (), b""), tmp_path, fuse=False).kind == "failed"


def _import_error(model: Path) -> str:
    with pytest.raises(ModelError) as raised:
        import_model(model)
    return str(raised.value)


def test_a_pipe_or_a_device_as_the_model_is_refused_without_reading_it(tmp_path: Path) -> None:
    pipe = tmp_path / "model.onnx"
    os.mkfifo(pipe)  # nothing ever writes it: reading it would wait forever
    assert _import_error(pipe) == f"{pipe}: error: cannot read an ONNX model: the model is not a regular file"
    assert _import_error(Path("/dev/zero")).endswith("the model is not a regular file")


def test_external_data_past_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    weights = tmp_path / "weights.bin"
    with open(weights, "wb") as sparse:  # 100 GiB that take no disk
        sparse.truncate(100 * 2**30)
    tensor = helper.make_tensor("w", onnx.TensorProto.FLOAT, [4], [0.0] * 4)
    tensor.ClearField("float_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="weights.bin")
    graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [tensor])
    path = tmp_path / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    assert "over the limit of 17,179,869,184 (docs/onnx.md, Limits)" in _import_error(path)


def test_an_initializer_of_negative_size_is_refused(tmp_path: Path) -> None:
    tensor = helper.make_tensor("w", onnx.TensorProto.FLOAT, [4], [1.0] * 4)
    tensor.dims[:] = [-4]
    graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [tensor])
    path = tmp_path / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    assert _import_error(path) == "model.onnx: error: initializer `w` has a negative size: [-4]"


def _one_node(node: onnx.NodeProto, inputs: list, output: onnx.ValueInfoProto, initializers: list = ()
              ) -> onnx.ModelProto:
    graph = helper.make_graph([node], "hostile", inputs, [output], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_versions_and_element_types_no_onnx_defines_are_refused(tmp_path: Path) -> None:
    relu = _one_node(helper.make_node("Relu", ["x"], ["y"]), [helper.make_tensor_value_info("x", 1, [4])],
                     helper.make_tensor_value_info("y", 1, [4]))
    relu.opset_import[0].version = 2**62
    onnx.save(relu, tmp_path / "opset.onnx")
    assert _import_error(tmp_path / "opset.onnx").endswith(f"opset version {2**62} is not one ONNX defines")
    relu.opset_import[0].version = 17
    relu.graph.input[0].type.tensor_type.elem_type = 99
    onnx.save(relu, tmp_path / "type.onnx")
    assert _import_error(tmp_path / "type.onnx").endswith("value `x` has element type 99, which ONNX does not define")


def test_constants_and_pads_past_the_limits_are_neither_computed_nor_enumerated() -> None:
    """A Range to 2**40 of constant inputs would take 8 TiB to fold, a Pad by 10**9 a billion steps
    to write down: each node is left without a kernel, at once."""
    scalars = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", 0), ("l", 2**40), ("d", 1))]
    ranged = _one_node(helper.make_node("Range", ["s", "l", "d"], ["y"]), [],
                       helper.make_tensor_value_info("y", onnx.TensorProto.INT64, None), scalars)
    padded = _one_node(helper.make_node("Pad", ["x", "p"], ["y"]), [helper.make_tensor_value_info("x", 1, [4])],
                       helper.make_tensor_value_info("y", 1, None),
                       [numpy_helper.from_array(np.array([10**9, 10**9], np.int64), "p")])
    for model in (ranged, padded):
        (skipped,) = import_model(model).skipped
        assert skipped.feature == "too large" and "more than 1,073,741,824 elements" in skipped.detail


def test_a_large_constant_pad_is_written_without_looking_at_each_position() -> None:
    padded = _one_node(helper.make_node("Pad", ["x", "p"], ["y"]), [helper.make_tensor_value_info("x", 1, [4])],
                       helper.make_tensor_value_info("y", 1, None),
                       [numpy_helper.from_array(np.array([2**28, 5], np.int64), "p")])
    imported = import_model(padded)
    assert not imported.skipped and f"{2**28} y[{{0}}] = 0" in imported.kernels["pad"]
