"""`dojo import` through the command line."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dojo_ir import load
from examples.onnx_models import conv_block
from server.cli import main


def save_model(path, with_topk: bool = False):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/relu")]
    if with_topk:
        nodes.append(helper.make_node("TopK", ["r", "k"], ["y", "i"], name="/topk", axis=-1))
    else:
        nodes.append(helper.make_node("Exp", ["r"], ["y"], name="/exp"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([2], np.int64), "k")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path


def test_import_writes_the_specs_and_the_map(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", str(save_model(tmp_path / "m.onnx")), "--out", str(out)]) == 0
    # `exp` is a function of the format, so the kernel is `exp_`
    assert sorted(p.name for p in out.iterdir()) == ["exp_.dojo", "model.json", "relu.dojo"]
    load((out / "relu.dojo").read_text())
    assert json.loads((out / "model.json").read_text())["model"] == "m.onnx"
    captured = capsys.readouterr()
    assert "2 kernels for 2 of 2 nodes" in captured.out and captured.err == ""


def test_an_unsupported_node_is_named_on_stderr_and_the_rest_written(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", str(save_model(tmp_path / "m.onnx", with_topk=True)), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["m.onnx: node /topk (TopK): data-dependent range: which elements it outputs depends on the data "
                   "(a sort)"]
    assert (out / "relu.dojo").exists()


def test_strict_fails_after_writing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["import", str(save_model(tmp_path / "m.onnx", with_topk=True)), "--out", str(out), "--strict"]) == 1
    assert (out / "relu.dojo").exists() and (out / "model.json").exists()
    assert "/topk (TopK)" in capsys.readouterr().err
    assert main(["import", str(save_model(tmp_path / "ok.onnx")), "--out", str(tmp_path / "ok"), "--strict"]) == 0


def test_json_summary(tmp_path, capsys):
    main(["import", str(save_model(tmp_path / "m.onnx", with_topk=True)), "--out", str(tmp_path / "o"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["kernels"] == ["relu"] and summary["skipped"][0]["feature"] == "data-dependent range"


def test_a_folded_batchnorm_is_named_with_its_derived_weights(tmp_path, capsys):
    path = tmp_path / "block.onnx"
    onnx.save(conv_block(batch=1, channels=2, size=6, features=(3, 4), classes=2), path)
    out = tmp_path / "o"
    assert main(["import", str(path), "--out", str(out)]) == 0
    assert f"derived weights in {out / 'constants.npz'}" in capsys.readouterr().out
    assert main(["import", str(path), "--out", str(tmp_path / "j"), "--json"]) == 0
    constants = json.loads(capsys.readouterr().out)["constants"]
    with np.load(tmp_path / "j" / "constants.npz") as written:
        assert sorted(written.files) == sorted(constants) and len(constants) == 4  # two weights, two biases


def test_bad_input_exits_1_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00garbage" * 9)
    assert main(["import", str(bad), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}: error: cannot read an ONNX model") and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    assert main(["import", str(bad)]) == 1
    assert "--out" in capsys.readouterr().err


def test_coverage_lists_every_operator_and_the_totals(capsys):
    assert main(["import", "--coverage"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_op = {line.split()[0]: line for line in lines[:-1]}
    assert by_op["Relu"].split()[1] == "covered"
    assert "not expressible: indirection:" in by_op["Gather"]
    assert "covered (folded at import)" in by_op["Shape"]
    assert "expressible operators covered" in lines[-1] and "Upsample" in lines[-1]
    assert main(["import", "--coverage", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == len(by_op) and report["percent"] > 0
