"""`dojo model tune`: the budget goes to the kernels by their share of the model's time, is never
exceeded, an interrupted tune goes on without redoing what it finished, and the result is a library
that `dojo model run` uses as it is.

Most tests time programs with a fake runner and give the model a fixed profile, so that where the
budget goes does not depend on the machine's load; one runs the whole command for real."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from agent.evaluate import read_log
from libgen.onnx import model_tune
from libgen.onnx.model_tune import TuneError, TuneOptions, tune_model
from libgen.onnx.profile import KernelTime, ModelProfile, PartTime
from libgen.onnx.race import Entrant, next_entrant
from tests.onnx.test_model_profile import mlp_topk
from tests.onnx.test_model_run import dojo, expected
from tests.test_agent_search import FakeRunner

# the model's time as the fake profile has it: the MatMul's two calls take most
SHARES = {"matmul": 0.7, "relu": 0.2, "mul": 0.05}
TOTAL_S = 1e-4


def fake_profile(model: Path, libraries: list[Path], fuse: bool | None, repeats: int = 20,
                 seed: int = 0, input_shapes: dict | None = None) -> list[ModelProfile]:
    kernels = tuple(KernelTime(name, (f"/{name}",), 1, share * TOTAL_S, share, 1000, None)
                    for name, share in SHARES.items())
    rest = 1 - sum(SHARES.values())
    report = ModelProfile(model.name, repeats, kernels, (PartTime(("/TopK",), rest * TOTAL_S, rest),),
                          PartTime((), 0.0, 0.0), TOTAL_S, TOTAL_S)
    return [report for _ in libraries]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_topk(), str(path))
    return path


@pytest.fixture
def profiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_tune, "profile_in_subprocess", fake_profile)


def search_evaluations(out: Path) -> dict[str, list[str]]:
    """Each kernel's search evaluations after the heuristic pass's (evaluations 0 and 1, which
    its log starts with), as hashes, in its log's order."""
    found = {}
    for log in sorted((out / "logs").glob("*.sa.heuristic.jsonl")):
        evaluations = read_log(log)[1]
        assert [e.index for e in evaluations[:2]] == [0, 1]
        found[log.name.split(".")[0]] = [e.hash for e in evaluations if e.index > 1]
    return found


OPTIONS = TuneOptions(method="sa", round_size=2, min_time_s=0.0, repeats=1)  # the race's tests are further down


def test_the_budget_is_respected_and_goes_mostly_to_the_slowest_kernel(model: Path, tmp_path: Path,
                                                                       profiled: None) -> None:
    out = tmp_path / "lib"
    result = tune_model(model, out, budget=10, options=OPTIONS, runner=FakeRunner())
    spent = {kernel: len(hashes) for kernel, hashes in search_evaluations(out).items()}
    assert result.spent == sum(spent.values()) == 10
    assert {t.kernel: t.evaluations for t in result.tasks} == {k: spent.get(k, 0) for k in SHARES}
    assert spent["matmul"] >= 6 and spent["matmul"] > spent.get("relu", 0) > spent.get("mul", 0)
    state = json.loads((out / "tune.json").read_text())
    assert state["rounds"][0]["kernel"] == "matmul"
    assert sum(r["evaluations"] for r in state["rounds"]) == 10
    summary = (out / "tune.txt").read_text()
    assert summary == result.summary + "\n"
    assert "10 of 10 evaluations" in summary and "matmul" in summary


def test_a_resumed_tune_goes_on_without_redoing_finished_work(model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"

    def after_five() -> bool:
        return sum(map(len, search_evaluations(out).values())) >= 5 if (out / "logs").exists() else False

    with pytest.raises(KeyboardInterrupt):
        tune_model(model, out, budget=10, options=OPTIONS, runner=FakeRunner(), should_stop=after_five)
    first = search_evaluations(out)
    rounds = json.loads((out / "tune.json").read_text())["rounds"]
    assert sum(map(len, first.values())) == 5 and len(rounds) == 2  # the third round was interrupted

    result = tune_model(model, out, budget=10, options=OPTIONS, runner=FakeRunner(), resume=True)
    after = search_evaluations(out)
    for kernel, hashes in first.items():
        assert after[kernel][:len(hashes)] == hashes  # the logs went on, nothing was evaluated twice
    for hashes in after.values():
        assert len(set(hashes)) == len(hashes)
    assert result.spent == sum(map(len, after.values())) == 10
    state = json.loads((out / "tune.json").read_text())
    assert state["rounds"][:2] == rounds


def test_a_larger_budget_resumed_spends_only_the_difference(model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"
    tune_model(model, out, budget=4, options=OPTIONS, runner=FakeRunner())
    result = tune_model(model, out, budget=8, options=OPTIONS, runner=FakeRunner(), resume=True)
    assert result.spent == sum(map(len, search_evaluations(out).values())) == 8


def test_a_kernel_slower_in_the_model_than_its_heuristic_program_gets_that_back(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def tuned_slower(model: Path, libraries: list[Path], *args: object) -> list[ModelProfile]:
        profiles = fake_profile(model, libraries, *args)
        if len(libraries) == 2:  # the tuned library, then the heuristic one
            slower = tuple(replace(k, time_s=2 * k.time_s) for k in profiles[0].kernels)
            profiles[0] = replace(profiles[0], kernels=slower)
        return profiles

    monkeypatch.setattr(model_tune, "profile_in_subprocess", tuned_slower)
    out = tmp_path / "lib"
    result = tune_model(model, out, budget=10, options=OPTIONS, runner=FakeRunner())
    tuned = {t.kernel for t in result.tasks if t.rounds}
    assert result.reverted and set(result.reverted) <= tuned
    # every kernel the rounds changed ran slower: the library is the heuristic one again
    state = json.loads((out / "tune.json").read_text())
    manifest = {k["name"]: k for k in json.loads((out / "manifest.json").read_text())["kernels"]}
    for kernel in SHARES:
        assert state["best"][kernel]["moves"] == state["heuristic"][kernel]["moves"] == manifest[kernel]["moves"]
    assert "kept the heuristic pass's program of" in result.summary


def test_a_smaller_budget_resumed_starts_no_round(model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"
    tune_model(model, out, budget=4, options=OPTIONS, runner=FakeRunner())
    result = tune_model(model, out, budget=2, options=OPTIONS, runner=FakeRunner(), resume=True)
    assert result.spent == 4 and "4 of 2 evaluations" in result.summary


def test_no_round_starts_after_the_time_limit(model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"
    result = tune_model(model, out, time_limit_s=1e-3, options=OPTIONS, runner=FakeRunner())
    assert result.spent == 0 and result.budget is None
    assert json.loads((out / "tune.json").read_text())["rounds"] == []
    assert (out / "manifest.json").exists() and "0 evaluations in 0 rounds" in result.summary


def test_a_race_gives_each_contender_a_round_then_the_kernel_to_the_faster(model: Path, tmp_path: Path,
                                                                           profiled: None) -> None:
    out = tmp_path / "lib"
    result = tune_model(model, out, budget=12, options=replace(OPTIONS, method="auto"), runner=FakeRunner())
    state = json.loads((out / "tune.json").read_text())
    rounds = [r["method"] for r in state["rounds"] if r["kernel"] == "matmul"]
    assert rounds[:2] == ["sa", "agent"] and len(rounds) >= 4
    entrants = {e["method"]: e for e in state["entrants"]["matmul"]}
    leader = min(entrants.values(), key=lambda e: e["best_s"])["method"]
    assert set(rounds[2:]) == {leader}  # neither ran out of programs, so the leader kept the kernel
    # the agent went on from the heuristic pass's program, the annealing from the spec
    agent_header, agent_evaluations = read_log(out / "logs" / "matmul.agent.pass.jsonl")
    assert agent_header["prefix"] == state["heuristic"]["matmul"]["moves"]
    assert entrants["agent"]["logged"] == sum(1 for e in agent_evaluations if e.index > 0)
    # the budget counts both contenders' evaluations, and the library holds the faster one's program
    searched = sum(map(len, search_evaluations(out).values())) + sum(
        sum(1 for e in read_log(log)[1] if e.index > 0) for log in (out / "logs").glob("*.agent.pass.jsonl"))
    assert result.spent == searched == 12
    best = state["best"]["matmul"]
    assert best["time_s"] <= min(e["best_s"] for e in entrants.values())
    assert "sa on the heuristic graph against the agent" in result.summary
    made_by = "heuristic" if best["moves"] == state["heuristic"]["matmul"]["moves"] else best["method"]
    assert dict(result.programs)["matmul"] == made_by


def test_the_next_round_goes_to_an_untried_contender_then_to_the_fastest_with_programs_left() -> None:
    assert next_entrant((Entrant("sa", 5, 1e-3, 1), Entrant("agent"))) == 1
    assert next_entrant((Entrant("sa", 5, 1e-3, 1), Entrant("agent", 8, 2e-3, 1))) == 0
    assert next_entrant((Entrant("sa", 5, 3e-3, 1), Entrant("agent", 8, 2e-3, 1))) == 1
    assert next_entrant((Entrant("sa", 5, 1e-3, 2, exhausted=True), Entrant("agent", 8, 2e-3, 1))) == 1
    assert next_entrant((Entrant("sa", 5, None, 1), Entrant("agent", 8, 2e-3, 1))) == 1  # nothing that ran
    assert Entrant("sa", 5, 1e-3, 1).after_round(5, 2e-3) == Entrant("sa", 5, 1e-3, 2, exhausted=True)
    assert Entrant("sa", 5, 1e-3, 1).after_round(9, 5e-4) == Entrant("sa", 9, 5e-4, 2)


def test_a_tune_by_another_version_is_named_not_misread(model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"
    tune_model(model, out, budget=2, options=OPTIONS, runner=FakeRunner())
    state = json.loads((out / "tune.json").read_text())
    (out / "tune.json").write_text(json.dumps({**state, "format": 1}))
    with pytest.raises(TuneError, match="another version of PerfDojo"):
        tune_model(model, out, budget=4, options=OPTIONS, runner=FakeRunner(), resume=True)


def test_the_progress_is_a_bar_on_a_terminal_and_lines_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    from libgen.onnx.model_tune import TuneEvent
    from server.commands.model_tune import _progress

    events = [TuneEvent("progress", "matmul: 3/8 evaluations", 6, 24, 10.0, None),
              TuneEvent("round", "matmul: 8 evaluations, best 35 µs", 8, None, 20.0, 40.0),
              TuneEvent("progress", "relu: 1/8 evaluations", 9, None, 20.0, 40.0)]
    shown = []
    for tty in (True, False):
        show = _progress(tty)
        for event in events:
            show(event)
        shown.append(capsys.readouterr().err)
    terminal, plain = shown
    assert "\r[######..................] 6/24 matmul: 3/8 evaluations" in terminal
    assert "\r[############............] 20/40 s relu: 1/8 evaluations" in terminal
    assert plain == "matmul: 8 evaluations, best 35 µs\n"  # no progress lines


def test_a_finished_tune_run_again_does_nothing_and_another_is_refused_without_resume(
        model: Path, tmp_path: Path, profiled: None) -> None:
    out = tmp_path / "lib"
    first = tune_model(model, out, budget=2, options=OPTIONS, runner=FakeRunner())
    idle = FakeRunner()
    again = tune_model(model, out, budget=2, options=OPTIONS, runner=idle)
    assert idle.calls == [] and again.summary == first.summary and again.spent == first.spent == 2
    with pytest.raises(TuneError, match="holds a tune already .*another budget.*--resume goes on with it"):
        tune_model(model, out, budget=4, options=OPTIONS, runner=FakeRunner())
    with pytest.raises(TuneError, match="seed: 0 there, 3 now"):
        tune_model(model, out, budget=2, options=TuneOptions(round_size=2, seed=3), runner=FakeRunner(), resume=True)


def test_a_finished_tune_written_by_an_earlier_generator_gets_its_libraries_written_again(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The programs the tune chose stand; only their C, and the profiles measured on it, are redone."""
    profiles: list[list[Path]] = []

    def counted(model: Path, libraries: list[Path], *rest, **named) -> list[ModelProfile]:
        profiles.append(libraries)
        return fake_profile(model, libraries, *rest, **named)

    monkeypatch.setattr(model_tune, "profile_in_subprocess", counted)
    out = tmp_path / "lib"
    first = tune_model(model, out, budget=2, options=OPTIONS, runner=FakeRunner())
    unit = out / "src" / "matmul.c"
    current = unit.read_text()
    unit.write_text(current.replace("#include", "/* an earlier generator */\n#include", 1))
    shared = out / "libdojo.so"
    (out / "heuristic" / "libdojo.so").write_bytes(b"an earlier build")
    built, profiled_before = shared.stat().st_mtime_ns, len(profiles)

    idle = FakeRunner()
    again = tune_model(model, out, budget=2, options=OPTIONS, runner=idle)
    assert idle.calls == [] and again.spent == first.spent and again.programs == first.programs
    assert unit.read_text() == current and shared.stat().st_mtime_ns != built
    assert (out / "heuristic" / "libdojo.so").read_bytes() != b"an earlier build"
    assert profiles[profiled_before:] == [[out, out / "heuristic"]]  # both profiled again, in turn

    untouched = shared.stat().st_mtime_ns
    tune_model(model, out, budget=2, options=OPTIONS, runner=idle)
    assert shared.stat().st_mtime_ns == untouched and len(profiles) == profiled_before + 1


@pytest.mark.parametrize("arguments, message", [
    (["--budget", "-1"], "the budget must be at least 0 evaluations, not -1"),
    (["--round", "0"], "a round must give at least 1 evaluation, not 0"),
    (["--time-limit", "0"], "the time limit must be above 0 seconds, not 0"),
    (["--repeats", "0"], "the profiles' repeats must be at least 1, not 0"),
])
def test_bad_arguments_are_named(model: Path, tmp_path: Path, arguments: list[str], message: str) -> None:
    done = dojo("model", "tune", str(model), "--out", str(tmp_path / "lib"), *arguments)
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "lib").exists()


def test_a_model_that_is_not_one_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    for path in (bad, tmp_path / "missing.onnx"):
        done = dojo("model", "tune", str(path), "--out", str(tmp_path / "lib"), "--budget", "1")
        assert done.returncode == 1 and path.name in done.stderr and "Traceback" not in done.stderr


def test_the_tuned_library_runs_the_model_as_onnxruntime_does(tmp_path: Path) -> None:
    """A model whose batch is symbolic, as exporters write it: fixed by --input-shape for the tune,
    its profiles and the run."""
    symbolic = mlp_topk()
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model = tmp_path / "mlp.onnx"
    onnx.save(symbolic, str(model))
    out = tmp_path / "lib"
    done = dojo("model", "tune", str(model), "--out", str(out), "--budget", "3", "--round", "1", "--repeats", "3",
                "--min-time", "0.01", "--json", "--input-shape", "x=8,16")
    assert done.returncode == 0, done.stderr
    profiled = dojo("model", "profile", str(model), "--library", str(out), "--repeats", "2", "--input-shape", "x=8,16")
    assert profiled.returncode == 0 and "/up/MatMul" in profiled.stdout, profiled.stderr
    report = json.loads(done.stdout)
    assert report["spent"] <= 3 and report["budget"] == 3
    assert {k["kernel"] for k in report["kernels"]} == set(SHARES)
    assert {k["program"] for k in report["kernels"]} <= {"heuristic", "sa", "agent"}
    assert "profiling on" in done.stderr and "the heuristic pass on each" in done.stderr

    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    ran = dojo("model", "run", str(model), "--library", str(out), "--inputs", str(tmp_path / "in.npz"), "--out",
               str(tmp_path / "out.npz"), "--json", "--input-shape", "x=8,16")
    assert ran.returncode == 0, ran.stderr
    assert set(json.loads(ran.stdout)["placement"].values()) == {"library", "onnxruntime"}
    got, want = np.load(tmp_path / "out.npz"), expected(model, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
