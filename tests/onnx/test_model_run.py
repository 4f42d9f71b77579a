"""`ModelRunner` and `dojo model run`: a model on a library built from its import gives ONNX Runtime's
outputs, the nodes without a kernel run on ONNX Runtime, and a library built from another import is
never used."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from examples.onnx_models import SMALL, conv_block, encoder_layer, upsample_block, with_topk
from libgen.onnx.importer import import_model, write_import
from libgen.onnx.plan import VIEWS, Unit, dead_after
from libgen.onnx.run import ModelRunner, RunError

ROOT = Path(__file__).resolve().parent.parent.parent


def dojo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def library_of(model: onnx.ModelProto, directory: Path, name: str, fuse: bool = False) -> tuple[Path, Path]:
    """The model saved as DIRECTORY/NAME.onnx, imported into DIRECTORY/NAME/ and built, heuristic pass
    only, into the library DIRECTORY/NAME_lib."""
    path, files, library = directory / f"{name}.onnx", directory / name, directory / f"{name}_lib"
    onnx.save(model, str(path))
    write_import(import_model(path, fuse=fuse), files)
    built = dojo("library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic", "--budget",
                 "1", "--min-time", "0.01", "--out", str(library), "--name", name)
    assert built.returncode == 0, built.stderr
    return path, library


def expected(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds), strict=True))


def inputs_of(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    graph = onnx.load(str(path)).graph
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in graph.input}


def assert_runs_as_onnxruntime(runner: ModelRunner, path: Path) -> None:
    for seed in range(2):  # twice: the buffers are reused from one run to the next
        feeds = inputs_of(path, seed)
        got, want = runner.run(feeds), expected(path, feeds)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def topk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return library_of(with_topk(rows=3, width=7), tmp_path_factory.mktemp("topk"), "mr_topk")


def test_a_model_with_an_unsupported_node_gives_onnxruntimes_outputs(topk: tuple[Path, Path]) -> None:
    path, library = topk
    runner = ModelRunner(path, library)
    assert runner.placement == {"/proj/MatMul": "library", "/TopK": "onnxruntime", "/scale/Mul": "library",
                                "/Softmax": "library"}
    assert_runs_as_onnxruntime(runner, path)

def test_a_library_built_from_another_import_is_not_used(topk: tuple[Path, Path], tmp_path: Path) -> None:
    _, library = topk
    other = tmp_path / "taller.onnx"  # the same operators and kernel names, more rows: other specs
    onnx.save(with_topk(rows=4, width=7), str(other))
    assert {c.kernel for c in import_model(other).calls} == {"matmul", "mul", "softmax"}
    runner = ModelRunner(other, library)
    assert runner.library_nodes == [] and len(runner.onnxruntime_nodes) == 4
    assert_runs_as_onnxruntime(runner, other)
    fused = ModelRunner(topk[0], library, fuse=True)  # the fused import's Mul+Softmax is not in this library
    assert fused.placement == {"/proj/MatMul": "library", "/TopK": "onnxruntime", "/scale/Mul": "onnxruntime",
                               "/Softmax": "onnxruntime"}
    assert_runs_as_onnxruntime(fused, topk[0])


def test_a_fused_conv_block_runs_wholly_on_its_library_fused_or_not_found_by_itself(tmp_path: Path) -> None:
    # the second convolution (6 channels in, 8 out) by Winograd, with derived weights
    path, library = library_of(conv_block(batch=2, channels=3, size=8, features=(6, 8), classes=5), tmp_path,
                               "mr_conv", fuse=True)
    assert any("+= u[" in text for text in import_model(path, fuse=True).kernels.values())
    runner = ModelRunner(path, library)  # the fused import: the library holds its kernels, not the other's
    assert set(runner.placement.values()) == {"library", "view"}
    assert runner.placement["/flatten/Flatten"] == "view"
    assert runner.placement["/bn1/BatchNormalization"] == runner.placement["/relu1/Relu"] == "library"
    assert_runs_as_onnxruntime(runner, path)
    unfused = ModelRunner(path, library, fuse=False)  # asked for: only the kernels both imports share run on it
    assert unfused.placement["/fc/Gemm"] == "library"
    assert unfused.placement["/conv1/Conv"] == unfused.placement["/bn1/BatchNormalization"] == "onnxruntime"
    assert unfused.placement["/relu1/Relu"] == unfused.placement["/pool/MaxPool"] == "onnxruntime"
    assert_runs_as_onnxruntime(unfused, path)


def test_an_inference_dropout_is_a_view_of_its_input(tmp_path: Path) -> None:
    # as SqueezeNet writes it (opset 9): a mask output that nothing reads
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Dropout", ["r"], ["d", "mask"], name="dropout", ratio=0.5),
             helper.make_node("Exp", ["d"], ["y"], name="exp")]
    graph = helper.make_graph(nodes, "dropout", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 5])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 5])])
    path, library = library_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)]), tmp_path,
                               "mr_dropout")
    runner = ModelRunner(path, library)
    assert runner.placement == {"relu": "library", "dropout": "view", "exp": "library"}
    assert_runs_as_onnxruntime(runner, path)


def test_an_encoder_layer_shares_buffers_between_values_that_do_not_live_at_once(tmp_path: Path) -> None:
    """The layer's residuals keep values alive across the attention and the feed-forward network: a
    buffer handed on before its last reader ran would change the outputs."""
    path, library = library_of(encoder_layer(**SMALL["encoder"]), tmp_path, "mr_encoder")
    runner = ModelRunner(path, library)
    assert set(runner.placement.values()) == {"library", "view"}
    assert_runs_as_onnxruntime(runner, path)
    made = {o for node in onnx.load(str(path)).graph.node if node.op_type not in VIEWS for o in node.output}
    apart = sum(runner.infos[name].dtype.itemsize * np.prod(runner.infos[name].shape) for name in made)
    assert runner.planned_bytes < apart / 2


@pytest.mark.parametrize("form", ["erf", "none"])
def test_an_encoder_with_the_exact_gelu_runs_wholly_on_its_library(form: str, tmp_path: Path) -> None:
    """GELU through erf, as torch's exporter writes it (Div, Erf, Add, Mul, Mul) and as the Gelu
    operator: every node has a kernel, fused or not, and the compiled vector erf gives ONNX Runtime's
    outputs."""
    model = encoder_layer(**SMALL["encoder"], gelu_form=form)
    for fuse in (False, True):
        path, library = library_of(model, tmp_path, f"mr_gelu_{form}{'_fused' * fuse}", fuse=fuse)
        runner = ModelRunner(path, library, fuse=fuse)
        assert set(runner.placement.values()) == {"library", "view"}
        assert any("erf(" in text for text in import_model(path, fuse=fuse).kernels.values())
        assert_runs_as_onnxruntime(runner, path)


def test_resizes_around_a_convolution_run_on_the_library(tmp_path: Path) -> None:
    path, library = library_of(upsample_block(**SMALL["upsample"]), tmp_path, "mr_upsample")
    runner = ModelRunner(path, library)
    assert runner.placement == dict.fromkeys(["/up/Resize", "/conv/Conv", "/relu/Relu", "/down/Resize"], "library")
    assert_runs_as_onnxruntime(runner, path)


def test_the_last_reader_of_a_value_or_of_its_views_frees_it() -> None:
    units = [Unit([0], ["x"], ["a"], "library"), Unit([1], ["a"], ["a2"], "view"),
             Unit([2], ["a"], ["b"], "library"), Unit([3], ["b"], ["c"], "library"),
             Unit([4], ["a2", "c"], ["y", "unread"], "library")]
    assert dead_after(units, ["y"]) == {0: ["x"], 3: ["b"], 4: ["a", "c", "unread"]}


def _branches(batch: int, channels: int, size: int) -> onnx.ModelProto:
    """Two branches of x (Relu and Exp) concatenated along the channels, then Tanh, as SqueezeNet's
    fire modules and Inception's blocks concatenate theirs."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Exp", ["x"], ["b"], name="exp"),
             helper.make_node("Concat", ["a", "b"], ["c"], name="concat", axis=1),
             helper.make_node("Tanh", ["c"], ["y"], name="tanh")]
    shape = [batch, channels, size, size]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                                             [batch, 2 * channels, size, size])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch, channels, size, in_place", [
    (1, 4, 4, True),  # each branch 4 x 16 floats, a whole number of 64-byte lines
    (2, 4, 4, False),  # two images: each branch's part of the output is two stretches
    (1, 3, 5, False),  # the second branch would start 44 bytes into a line: a kernel's arguments are aligned
])
def test_kernels_write_a_concats_inputs_into_its_output_where_they_can(batch: int, channels: int, size: int,
                                                                       in_place: bool, tmp_path: Path) -> None:
    path, library = library_of(_branches(batch, channels, size), tmp_path, f"mr_concat_{batch}_{channels}")
    runner = ModelRunner(path, library)
    assert runner.placement["concat"] == ("view" if in_place else "library")
    assert_runs_as_onnxruntime(runner, path)


def test_values_written_into_a_concats_output_live_as_long_as_it() -> None:
    units = [Unit([0], ["x"], ["a"], "library"), Unit([1], ["x"], ["b"], "library"),
             Unit([2], ["a", "b"], ["c"], "view"), Unit([3], ["c"], ["y"], "library")]
    assert dead_after(units, ["y"], {"a": ("c", 0), "b": ("c", 64)}) == {1: ["x"], 3: ["c"]}


def test_values_of_data_dependent_shape_pass_between_onnxruntime_sessions(tmp_path: Path) -> None:
    """NonZero's result has no static shape: ONNX Runtime makes it in one session and reads it in the
    next, with the library's Relu between them."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Cast", ["nz"], ["nzf"], name="cast", to=onnx.TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["nzf"], ["s"], name="sum", keepdims=1),  # [1, 1]
             helper.make_node("Add", ["r", "s"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "nonzero", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 7])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 7])])
    path, library = library_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path,
                               "mr_nonzero")
    runner = ModelRunner(path, library)
    assert runner.placement == {"nonzero": "onnxruntime", "relu": "library", "cast": "onnxruntime",
                                "sum": "onnxruntime", "add": "library"}
    assert_runs_as_onnxruntime(runner, path)


def test_the_command_writes_the_outputs_and_says_where_the_nodes_ran(topk: tuple[Path, Path], tmp_path: Path) -> None:
    path, library = topk
    feeds = inputs_of(path)
    np.savez(tmp_path / "in.npz", **feeds)
    done = dojo("model", "run", str(path), "--library", str(library), "--inputs", str(tmp_path / "in.npz"), "--out",
                str(tmp_path / "out.npz"), "--json")
    assert done.returncode == 0, done.stderr
    assert "3 nodes on the library, 1 on ONNX Runtime" in done.stderr
    assert json.loads(done.stdout)["placement"]["/TopK"] == "onnxruntime"
    with np.load(tmp_path / "out.npz") as got:
        for name, want in expected(path, feeds).items():
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    (lambda feeds: {"y": feeds["x"]}, "`y` is not an input of mr_topk.onnx (its inputs: `x`)"),
    (lambda feeds: {}, "input `x` of mr_topk.onnx is missing"),
    (lambda feeds: {"x": feeds["x"][:2]}, "input `x` of mr_topk.onnx must be float32 [3, 7], not float32 [2, 7]"),
    (lambda feeds: {"x": feeds["x"].astype(np.float64)}, "must be float32 [3, 7], not float64 [3, 7]"),
])
def test_a_wrong_input_is_named(topk: tuple[Path, Path], change: Callable, message: str) -> None:
    runner = ModelRunner(*topk)
    with pytest.raises(RunError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        runner.run(change(inputs_of(topk[0])))


def test_the_command_names_a_missing_library_a_bad_npz_and_a_bad_input(topk: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    path, library = topk
    good, bad, out = tmp_path / "in.npz", tmp_path / "bad.npz", tmp_path / "out.npz"
    np.savez(good, x=np.zeros((3, 8), np.float32))
    bad.write_text("not a zip")
    cases = {("--library", str(tmp_path / "nowhere"), "--inputs", str(good)): "nowhere: no such library directory",
             ("--library", str(tmp_path), "--inputs", str(good)): "not a library: it has no manifest.json",
             ("--library", str(library), "--inputs", str(bad)): "bad.npz: not a .npz file of arrays",
             ("--library", str(library), "--inputs", str(good)): "input `x` of mr_topk.onnx must be float32 [3, 7]"}
    for options, message in cases.items():
        done = dojo("model", "run", str(path), *options, "--out", str(out))
        assert done.returncode == 1 and message in done.stderr and "dojo model run: error: " in done.stderr, done.stderr
        assert not out.exists()
