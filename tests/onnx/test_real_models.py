"""Models nobody here wrote: the onnx package's light CNNs with seeded weights (examples/light_models.py).

SqueezeNet, at 112 x 112 to keep the test short, goes the whole way a user's model goes: `dojo import`
(plain and `--fuse`), `dojo library build --method heuristic`, `dojo model run`, whose outputs equal
ONNX Runtime's within 1e-3 of the largest output, every node on the library. The other eight import
(bench/real_models.py runs them); this file checks the module that makes them runnable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from examples import light_models
from examples.light_models import LightModelError, runnable, sample_inputs

ROOT = Path(__file__).resolve().parent.parent.parent
SIZE = 112
PRODUCTS = ("Conv", "MatMul", "Gemm")


def dojo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def every_value(model: onnx.ModelProto, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(names, feeds)


# -- the models ---------------------------------------------------------------------------------------


def test_placeholders_become_seeded_initializers_that_are_not_inputs() -> None:
    model = runnable("squeezenet", seed=3)
    assert "ConstantOfShape" not in {n.op_type for n in model.graph.node}
    assert [i.name for i in model.graph.input] == ["data_0"]
    again, other = weights(runnable("squeezenet", seed=3)), weights(runnable("squeezenet", seed=4))
    for name, value in weights(model).items():
        np.testing.assert_array_equal(value, again[name])
    assert not np.array_equal(weights(model)["conv1_w_0"], other["conv1_w_0"])


def test_a_convolutions_weights_are_scaled_by_its_fan_in() -> None:
    values = weights(runnable("squeezenet"))
    for node in (n for n in runnable("squeezenet").graph.node if n.op_type == "Conv"):
        w = values[node.input[1]]
        expected = np.sqrt(2 / np.prod(w.shape[1:]))
        assert abs(w.std() / expected - 1) < 0.15, node.input[1]


def test_each_batch_normalization_normalises_its_input_on_the_sample() -> None:
    model = runnable("shufflenet")
    norms = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    values = weights(model)
    outputs = every_value(model, [n.output[0] for n in norms], sample_inputs(model))
    for norm, y in zip(norms, outputs, strict=True):
        scale, bias = values[norm.input[1]], values[norm.input[2]]
        axes = (0, 2, 3)
        np.testing.assert_allclose(y.mean(axis=axes), bias, atol=1e-3, err_msg=norm.output[0])
        np.testing.assert_allclose(y.std(axis=axes), np.abs(scale), rtol=1e-2, err_msg=norm.output[0])


def test_activations_stay_near_unit_size_through_a_deep_net() -> None:
    model = runnable("resnet50")
    names = [n.output[0] for n in model.graph.node if n.op_type in ("Relu", "Sum")]
    rms = [float(np.sqrt(np.mean(v ** 2))) for v in every_value(model, names, sample_inputs(model))]
    assert 0.1 < min(rms) and max(rms) < 10


def test_a_model_that_is_not_one_is_named_with_the_choices() -> None:
    with pytest.raises(LightModelError, match=r"'mobilenet' is not a light model.*squeezenet"):
        runnable("mobilenet")


def test_a_size_the_model_cannot_take_is_refused_with_the_model_and_size() -> None:
    with pytest.raises(LightModelError, match="vgg19 does not take 112 x 112 images"):
        runnable("vgg19", size=SIZE)


def test_the_script_writes_the_models(tmp_path: Path) -> None:
    assert light_models.main(["squeezenet", "--size", str(SIZE), "--out", str(tmp_path)]) == 0
    model = onnx.load(str(tmp_path / "squeezenet.onnx"))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 3, SIZE, SIZE]


# -- end to end ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def squeezenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("light") / "squeezenet.onnx"
    onnx.save(runnable("squeezenet", seed=0, size=SIZE), str(path))
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "fused"])
def imported(request: pytest.FixtureRequest, squeezenet: Path) -> tuple[bool, Path, Path]:
    """SqueezeNet imported (fused or not) and built by the heuristic pass: (fused, files, library)."""
    fuse = request.param
    files, library = (squeezenet.parent / f"squeezenet{'_fused' if fuse else ''}{suffix}" for suffix in ("", "_lib"))
    done = dojo("import", str(squeezenet), "--out", str(files), "--strict", *(["--fuse"] if fuse else []))
    assert done.returncode == 0, done.stderr
    built = dojo("library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic", "--budget",
                 "1", "--min-time", "0.01", "--out", str(library), "--name", files.name)
    assert built.returncode == 0, built.stderr
    return fuse, files, library


def test_every_node_and_every_product_has_a_kernel(imported: tuple[bool, Path, Path]) -> None:
    _, files, _ = imported
    nodes = json.loads((files / "model.json").read_text())["nodes"]
    assert [n["name"] for n in nodes if n["kernel"] is None] == []
    assert {n["op"] for n in nodes} >= {"Conv", "Dropout"}
    assert all(n["kernel"] for n in nodes if n["op"] in PRODUCTS)


def test_model_run_gives_onnxruntimes_outputs(imported: tuple[bool, Path, Path], squeezenet: Path,
                                              tmp_path: Path) -> None:
    fuse, _, library = imported
    feeds = sample_inputs(onnx.load(str(squeezenet)), seed=1)
    np.savez(tmp_path / "in.npz", **feeds)
    done = dojo("model", "run", str(squeezenet), "--library", str(library), "--inputs", str(tmp_path / "in.npz"),
                "--out", str(tmp_path / "out.npz"), "--fuse" if fuse else "--no-fuse", "--json")
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["placement"].values()) <= {"library", "view"}
    session = ort.InferenceSession(str(squeezenet), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    (got,) = np.load(tmp_path / "out.npz").values()
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
