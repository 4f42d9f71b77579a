"""A BERT exported by torch.onnx, both ways, imports whole and runs on its heuristic library with
ONNX Runtime's outputs: a tiny one built here (random weights, 2 layers, hidden 32), so nothing is
downloaded; all-MiniLM-L6-v2 itself runs in bench/."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from libgen.onnx.importer import import_model, write_import
from libgen.onnx.run import ModelRunner, RunError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent.parent
TOKENS = 12
SHAPES = {"ids": (1, TOKENS), "mask": (1, TOKENS)}
# where the model's work is: each must be in a kernel
COMPUTE = {"MatMul", "Gemm", "Softmax", "LayerNormalization", "ReduceMean", "Sqrt", "Pow", "Erf", "Gelu"}


class LastHiddenState(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def export(directory: Path, dynamo: bool) -> Path:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    model = LastHiddenState(transformers.BertModel(config).eval())
    ids = torch.randint(0, 64, SHAPES["ids"])
    mask = torch.ones(SHAPES["mask"], dtype=torch.int64)
    path = directory / f"bert_{'dynamo' if dynamo else 'legacy'}.onnx"
    # the legacy exporter with symbolic dimensions, which --input-shape fixes
    axes = None if dynamo else {"ids": {0: "batch", 1: "tokens"}, "mask": {0: "batch", 1: "tokens"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, mask), str(path), opset_version=17, dynamo=dynamo, input_names=["ids", "mask"],
                          output_names=["last_hidden_state"], dynamic_axes=axes)
    return path


def feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones(SHAPES["mask"], np.int64)
    mask[0, TOKENS - 1 - seed:] = 0  # padding at the end; every token masked at seed TOKENS - 1
    return {"ids": rng.integers(0, 64, SHAPES["ids"]).astype(np.int64), "mask": mask}


@pytest.fixture(scope="module", params=[False, True], ids=["legacy", "dynamo"])
def bert(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if request.param:
        pytest.importorskip("onnxscript")
    directory = tmp_path_factory.mktemp("bert")
    path = export(directory, dynamo=request.param)
    files, library = directory / "import", directory / "lib"
    write_import(import_model(path, input_shapes=SHAPES), files)
    built = subprocess.run([sys.executable, "-m", "server.cli", "library", "build",
                            *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic", "--budget", "1",
                            "--min-time", "0.01", "--out", str(library), "--name", "bert"],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr
    return path, library


def test_the_work_is_in_kernels_and_only_what_the_format_cannot_say_is_left(bert: tuple[Path, Path]) -> None:
    imported = import_model(bert[0], input_shapes=SHAPES)
    ops = {record["name"]: record["op"] for record in imported.nodes}
    kernels = {node for call in imported.calls for node in call.nodes}
    kernels |= {record["name"] for record in imported.nodes if record.get("computed_in")}  # a guarded softmax
    assert all(name in kernels for name, op in ops.items() if op in COMPUTE)
    assert any(op == "Where" and name in kernels for name, op in ops.items())  # the attention mask's
    # the embeddings' lookups are all that is left
    left = {(s.op, s.feature) for s in imported.skipped}
    assert left <= {("Gather", "indirection"), ("GatherElements", "indirection"), ("GatherND", "indirection")}, left


def test_it_runs_on_its_library_as_onnxruntime_does(bert: tuple[Path, Path]) -> None:
    path, library = bert
    runner = ModelRunner(path, library, input_shapes=SHAPES)
    placed = _placed(runner, path)
    assert {"MatMul", "Erf", "Where"} <= {onnx_op for onnx_op, where in placed if where == "library"}
    # the embeddings' lookups only: the Shapes of the mask are constants, as the import folds them
    assert {onnx_op for onnx_op, where in placed if where == "onnxruntime"} <= {"Gather", "GatherElements", "GatherND"}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in (0, 1, 2, TOKENS - 1):  # a shorter mask each time, at last none: the attention's guard zeroes it
        given = feeds(seed)
        (want,) = session.run(None, given)
        got = runner.run(given)["last_hidden_state"]
        assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def _placed(runner: ModelRunner, path: Path) -> set[tuple[str, str]]:
    ops = {node.name: node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}
    return {(ops.get(name, "?"), where) for name, where in runner.placement.items()}


def test_a_symbolic_input_needs_its_shape_to_run(bert: tuple[Path, Path]) -> None:
    path, library = bert
    if "dynamo" in path.name:
        pytest.skip("exported at fixed shapes")
    with pytest.raises(RunError, match="input `ids` has no fixed shape; give it one with --input-shape ids=D,D"):
        ModelRunner(path, library)


def test_the_command_runs_it_at_the_shapes_given(bert: tuple[Path, Path], tmp_path: Path) -> None:
    path, library = bert
    given = feeds(2)
    np.savez(tmp_path / "in.npz", **given)
    shapes = [option for name, shape in SHAPES.items()
              for option in ("--input-shape", f"{name}={','.join(map(str, shape))}")]

    def dojo(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "server.cli", "model", "run", str(path), "--library", str(library),
                               "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"), *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)

    done = dojo(*shapes)
    assert done.returncode == 0, done.stderr
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, given)
    got = np.load(tmp_path / "out.npz")["last_hidden_state"]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))
    refused = dojo("--input-shape", "ids=1,-3")
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith("--input-shape ids=1,-3: every size must be at least 1")
