"""`dojo model profile`: every step of a model's run is timed, each kernel and each ONNX Runtime part
appears once with the nodes it computes, the shares add up to the whole, and the flops and the
roofline come from the kernels' specs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from examples.onnx_models import Graph
from libgen.onnx.profile import ModelProfile, format_profile, profile_model, random_feeds
from libgen.onnx.reference import credit, node_medians, onnxruntime_reference, profiled_session, writers
from libgen.onnx.run import ModelRunner
from libgen.runtime import Library
from runner.roofline import Machine, bound_s, work
from tests.onnx.test_model_run import dojo, expected, library_of

MACHINE = Machine(bandwidth_Bps=1e10, peak_flops=1e11, cores=2, cpu="test")


def mlp_topk(rows: int = 8, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Two MatMuls of one shape (one kernel, two calls), a Relu between them, then TopK (on ONNX
    Runtime: it compares) and a Mul of the k largest."""
    g = Graph(seed)
    hidden = g.node("Relu", [g.node("MatMul", ["x", g.weight("w1", width, width)], "/up/MatMul")], "/Relu")
    scores = g.node("MatMul", [hidden, g.weight("w2", width, width)], "/down/MatMul")
    top = g.node("TopK", [scores, g.constant("k", np.array([3], np.int64))], "/TopK", outputs=2, axis=-1)
    scaled = g.node("Mul", [top, g.constant("half", np.float32(0.5))], "/Mul")
    return g.model("mlp_topk", [("x", (rows, width))], [scaled])


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return library_of(mlp_topk(), tmp_path_factory.mktemp("profile"), "mp_mlp")


@pytest.fixture(scope="module")
def report(mlp: tuple[Path, Path]) -> ModelProfile:
    path, library = mlp
    runner = ModelRunner(path, library)
    return profile_model(runner, random_feeds(runner.inputs, 0), repeats=5, machine=MACHINE)


def test_every_kernel_and_the_onnxruntime_part_appear_once_with_their_nodes(report: ModelProfile) -> None:
    assert {k.kernel: (k.nodes, k.calls) for k in report.kernels} == {
        "matmul": (("/up/MatMul", "/down/MatMul"), 2), "relu": (("/Relu",), 1), "mul": (("/Mul",), 1)}
    assert [part.nodes for part in report.onnxruntime] == [("/TopK",)]


def test_the_shares_add_up_to_the_whole_and_are_ordered_slowest_first(report: ModelProfile) -> None:
    parts = [*report.kernels, *report.onnxruntime, report.copies]
    assert sum(p.share for p in parts) == pytest.approx(1.0)
    assert sum(p.time_s for p in parts) == pytest.approx(report.total_s)
    assert all(p.time_s > 0 for p in parts)
    assert [k.time_s for k in report.kernels] == sorted((k.time_s for k in report.kernels), reverse=True)


def test_flops_and_the_roofline_come_from_the_specs(report: ModelProfile, mlp: tuple[Path, Path]) -> None:
    from dojo_ir import load

    matmul = report.kernel("matmul")
    spec = work(load((mlp[0].parent / "mp_mlp" / "matmul.dojo").read_text()))
    assert matmul.flops == 2 * spec.flops == 2 * 2 * 8 * 16 * 16
    assert matmul.bound_s == pytest.approx(2 * bound_s(spec, MACHINE))
    assert matmul.roofline == pytest.approx(matmul.bound_s / matmul.time_s)
    assert matmul.gflops == pytest.approx(matmul.flops / matmul.time_s / 1e9)


def test_a_timed_run_gives_the_same_outputs_as_a_plain_one(mlp: tuple[Path, Path]) -> None:
    path, library = mlp
    runner = ModelRunner(path, library)
    feeds = random_feeds(runner.inputs, 1)
    timed, seconds = runner.run_timed(feeds)
    assert len(seconds) == len(runner.steps) + 2  # the copies in, each step, the copies out
    want = expected(path, feeds)
    for name, value in runner.run(feeds).items():
        np.testing.assert_array_equal(timed[name], value)
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the library kernels called from now on, in order."""
    called: list[str] = []
    real_call = Library.call

    def counted(self: Library, kernel: Any, pointers: Any) -> None:
        called.append(kernel.name)
        real_call(self, kernel, pointers)

    monkeypatch.setattr(Library, "call", counted)
    return called


def test_a_warm_run_calls_each_kernel_twice_and_gives_the_same_outputs(mlp: tuple[Path, Path],
                                                                       calls: list[str]) -> None:
    path, library = mlp
    runner = ModelRunner(path, library)
    feeds = random_feeds(runner.inputs, 1)
    warm, seconds = runner.run_timed(feeds, warm=True)
    assert len(seconds) == len(runner.steps) + 2
    assert calls == [name for step in runner.steps if step.kernel for name in (step.kernel, step.kernel)]
    for name, value in runner.run(feeds).items():
        np.testing.assert_array_equal(warm[name], value)


def test_a_warm_profile_times_every_kernel_warm_too(mlp: tuple[Path, Path], report: ModelProfile,
                                                   calls: list[str]) -> None:
    path, library = mlp
    runner = ModelRunner(path, library)
    warm_report = profile_model(runner, random_feeds(runner.inputs, 0), repeats=3, machine=MACHINE, warm=True)
    # the warm-up run, then each repeat's run and its warm run, which calls every kernel twice
    assert calls.count("relu") == 1 + 3 * (1 + 2)
    assert all(k.warm_s is not None and k.warm_s > 0 for k in warm_report.kernels)
    assert all(k.warm_s is None for k in report.kernels)
    assert ModelProfile.from_json(json.loads(json.dumps(warm_report.to_json()))) == warm_report
    lines = format_profile(warm_report).splitlines()
    assert lines[0].split()[7:] == ["warm", "time", "/", "warm"]
    matmul = warm_report.kernel("matmul")
    row = next(line for line in lines if line.startswith("matmul"))
    assert row.split()[-1] == f"{matmul.time_s / matmul.warm_s:.2f}"


def test_the_json_round_trips(report: ModelProfile) -> None:
    assert ModelProfile.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_the_table_lists_every_kernel_and_onnxruntime(report: ModelProfile) -> None:
    table = format_profile(report)
    lines = table.splitlines()
    assert lines[0].split() == ["kernel", "nodes", "calls", "time", "share", "GFLOP/s", "roofline"]
    assert [line.split()[0] for line in lines[2:5]] == [k.kernel for k in report.kernels]
    assert any(line.startswith("(ONNX Runtime)") and "/TopK" in line for line in lines)
    assert lines[-1].startswith("total ") and "for 1 nodes" in lines[-1]


def test_the_command_prints_the_profile_as_json(mlp: tuple[Path, Path], tmp_path: Path) -> None:
    path, library = mlp
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.ones((8, 16), np.float32))
    done = dojo("model", "profile", str(path), "--library", str(library), "--inputs", str(inputs), "--repeats", "3",
                "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["repeats"] == 3
    assert {k["kernel"] for k in data["kernels"]} == {"matmul", "relu", "mul"}
    assert sum(k["share"] for k in data["kernels"]) + sum(p["share"] for p in data["onnxruntime"]) \
        + data["copies"]["share"] == pytest.approx(1.0)
    assert all(k["warm_s"] is None for k in data["kernels"])
    table = dojo("model", "profile", str(path), "--library", str(library), "--seed", "2", "--repeats", "2", "--warm")
    assert table.returncode == 0 and "(ONNX Runtime)" in table.stdout
    assert table.stdout.splitlines()[0].split()[7:] == ["warm", "time", "/", "warm"]


@pytest.mark.parametrize("arguments, message", [
    (["--library", "nowhere"], "nowhere: no such library directory"),
    (["--repeats", "0"], "--repeats must be at least 1, not 0"),
    (["--inputs", "missing.npz"], "missing.npz: no such file"),
    (["--inputs", "WRONG"], "input `x` of mp_mlp.onnx must be float32 [8, 16], not float32 [2, 2]"),
])
def test_bad_arguments_are_named(mlp: tuple[Path, Path], tmp_path: Path, arguments: list[str], message: str) -> None:
    path, library = mlp
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=np.ones((2, 2), np.float32))
    arguments = [str(wrong) if a == "WRONG" else str(tmp_path / a) if a.endswith(".npz") else a for a in arguments]
    if "--library" not in arguments:
        arguments += ["--library", str(library)]
    done = dojo("model", "profile", str(path), *arguments)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


# -- beside ONNX Runtime (libgen/onnx/reference.py) --------------------------------------------------


@pytest.mark.parametrize(("name", "credited"), [
    ("/up/MatMul", "/up/MatMul"),                  # a node it runs as it is
    ("r145_nchwc", "n145"),                        # named after the value it writes, with the optimiser's suffix
    ("r145_nchwc_token_7", "n145"),                # the longest start that names a value or a node
    ("n2_fused", "n2"),
    ("ReorderInput", None),                        # a node of its own
    ("reorder_output_3", None),
])
def test_onnxruntime_nodes_are_credited_to_the_node_they_name(name: str, credited: str | None) -> None:
    nodes = ["/up/MatMul", "n2", "n145"]
    outputs = [["h"], ["r2"], ["r145"]]
    assert credit(name, set(nodes), writers(nodes, outputs)) == credited


def test_a_nodes_time_is_its_median_over_the_last_runs() -> None:
    events = [{"cat": "Session", "name": "model_run", "dur": 900},
              *({"cat": "Node", "name": "a_kernel_time", "dur": d} for d in (1000, 5, 7, 6)),
              {"cat": "Node", "name": "a_fence_before", "dur": 1},
              *({"cat": "Node", "name": "b_kernel_time", "dur": d} for d in (300, 2, 4, 3))]
    assert node_medians(events, 3) == {"a": pytest.approx(6e-6), "b": pytest.approx(3e-6)}


def test_beside_onnxruntime_each_row_gets_its_nodes_time(mlp: tuple[Path, Path]) -> None:
    path, library = mlp
    runner = ModelRunner(path, library)
    feeds = random_feeds(runner.inputs, 0)
    session = profiled_session(runner)
    calls = []
    report = profile_model(runner, feeds, repeats=4, machine=MACHINE,
                           beside=lambda: calls.append(session.run(None, feeds)))
    reference = onnxruntime_reference(report, runner, session, 4)
    assert len(calls) == 5  # after the warm-up run and after each timed one
    assert set(reference.kernels) == {"matmul", "relu", "mul"} and all(s > 0 for s in reference.kernels.values())
    assert len(reference.parts) == 1 and reference.parts[0] > 0  # TopK
    assert sum(reference.kernels.values()) + sum(reference.parts) + reference.unmatched_s == \
        pytest.approx(reference.total_s)
    table = format_profile(report, reference)
    assert "ONNX Runtime" in table.splitlines()[0] and "ORT / ours" in table.splitlines()[0]
    assert table.splitlines()[-1].startswith("ONNX Runtime alone, its runs taken in turn:")


def test_the_command_profiles_against_onnxruntime(mlp: tuple[Path, Path]) -> None:
    path, library = mlp
    done = dojo("model", "profile", str(path), "--library", str(library), "--repeats", "2", "--against-onnxruntime",
                "--json")
    assert done.returncode == 0, done.stderr
    alone = json.loads(done.stdout)["onnxruntime_alone"]
    assert set(alone["kernels"]) == {"matmul", "relu", "mul"} and alone["total_s"] > 0
