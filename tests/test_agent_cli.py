"""`dojo tune` end to end: the output replays, the log is written, Ctrl-C keeps the best."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_agent_search import FakeRunner

import runner.local
from agent.evaluate import read_log
from dojo_ir import load
from dojo_ir.library import KERNELS
from server.cli import main

ROOT = Path(__file__).resolve().parent.parent


def dojo(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def softmax(tmp_path: Path) -> Path:
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].text(m=4, n=16))
    return path


def test_tune_writes_a_program_that_replays_and_the_log(softmax: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "best.dojo"
    done = dojo("tune", str(softmax), "--method", "sa", "--budget", "4", "--min-time", "0", "--out", str(out),
                "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["evaluations"] <= 4 and summary["time_s"] > 0 and summary["spec_s"] > 0
    assert 'spec "../softmax.dojo"' in out.read_text()
    replayed = dojo("replay", str(out))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    entries = [e.to_json() for e in read_log(tmp_path / "out" / "best.dojo.jsonl")[1]]
    assert entries[0]["index"] == 0 and entries[0]["ok"] and len(entries) == summary["evaluations"] + 1
    assert "evaluations, best" in done.stderr


def test_tune_resumes_from_its_log_and_tunes_a_derived_file(softmax: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "best.dojo"
    fake = FakeRunner()
    monkeypatch.setattr(runner.local, "LocalRunner", lambda: fake)
    common = [str(softmax), "--method", "random", "--min-time", "0", "--out", str(out)]
    assert main(["tune", *common, "--budget", "3"]) == 0
    assert main(["tune", *common, "--budget", "6", "--resume"]) == 0
    log = [e.to_json() for e in read_log(out.with_name("best.dojo.jsonl"))[1]]
    assert [e["index"] for e in log] == list(range(len(log))) and len(log) <= 7
    assert len({e["hash"] for e in log}) == len(log)  # nothing evaluated twice
    assert main(["replay", str(out)]) == 0
    # a derived file: its moves are kept as a prefix, and the result still replays from the spec
    again = tmp_path / "again.dojo"
    assert main(["tune", str(out), "--method", "naive", "--min-time", "0", "--out", str(again)]) == 0
    prefix = load(out.read_text()).derivation.moves
    assert load(again.read_text()).derivation.moves[:len(prefix)] == prefix
    assert main(["replay", str(again)]) == 0


def test_ctrl_c_keeps_the_best_so_far(softmax: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "best.dojo"
    monkeypatch.setattr(runner.local, "LocalRunner", lambda: FakeRunner(interrupt_at=5))
    code = main(["tune", str(softmax), "--method", "sa", "--budget", "50", "--out", str(out)])
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    assert main(["replay", str(out)]) == 0
    log = [e.to_json() for e in read_log(out.with_name("best.dojo.jsonl"))[1]]
    assert len(log) == 5
    best = min(log, key=lambda e: e["median_s"])
    assert list(load(out.read_text()).derivation.moves) == best["moves"]


def test_tune_rejects_an_unknown_method_and_a_missing_directory(softmax: Path, tmp_path: Path) -> None:
    assert dojo("tune", str(softmax), "--method", "magic", "--out", str(tmp_path / "o.dojo")).returncode == 2
    missing = dojo("tune", str(softmax), "--method", "naive", "--out", str(tmp_path / "no" / "o.dojo"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_the_agent_trains_continues_a_file_and_tunes_from_the_command_line(softmax: Path, tmp_path: Path) -> None:
    """`dojo agent train` writes a checkpoint, `dojo agent continue --write` rewrites the file with
    the best program it met (which replays), and `dojo tune --method agent` uses the same policy."""
    run = tmp_path / "run"
    trained = dojo("agent", "train", "--kernels", "softmax", "--shapes", "small", "--episodes", "1", "--max-steps", "2",
                   "--out", str(run))
    assert trained.returncode == 0, trained.stderr
    assert "episode 1/1 softmax" in trained.stderr and (run / "policy.pt").exists()
    again = dojo("agent", "train", "--kernels", "softmax", "--shapes", "small", "--episodes", "1", "--max-steps", "2",
                 "--out", str(run))
    assert again.returncode == 1 and "resume" in again.stderr

    spec_text = softmax.read_text()
    refused = dojo("agent", "continue", str(softmax), "--checkpoint", str(run), "--steps", "2", "--write")
    assert refused.returncode == 1 and "is the spec of the result" in refused.stderr
    assert softmax.read_text() == spec_text  # a spec is never overwritten by what derives from it

    derived = tmp_path / "derived.dojo"
    played = dojo("agent", "continue", str(softmax), "--checkpoint", str(run), "--steps", "2", "-o", str(derived),
                  "--json")
    assert played.returncode == 0, played.stderr
    summary = json.loads(played.stdout)
    assert 1 <= len(summary["steps"]) <= 2 and summary["start_s"] > 0
    assert "1: " in played.stderr  # each step as it is played
    assert summary["out"] == str(derived) and ("spec " in derived.read_text()) == bool(summary["moves"])
    assert dojo("check", str(derived)).returncode == 0
    if summary["moves"]:
        assert dojo("replay", str(derived)).returncode == 0
        again = dojo("agent", "continue", str(derived), "--checkpoint", str(run), "--steps", "1", "--write")
        assert again.returncode == 0, again.stderr  # a derived file is rewritten in place, its moves kept
        assert dojo("replay", str(derived)).returncode == 0

    out = tmp_path / "tuned.dojo"
    tuned = dojo("tune", str(softmax), "--method", "agent", "--checkpoint", str(run), "--budget", "2",
                 "--min-time", "0", "--out", str(out), "--json")
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["evaluations"] <= 2 and dojo("replay", str(out)).returncode == 0
    header = json.loads((tmp_path / "tuned.dojo.jsonl").read_text().splitlines()[0])
    assert (header["method"], header["graph"]) == ("agent", "edges")  # experience for the next agent
    shipped = dojo("tune", str(softmax), "--method", "agent", "--budget", "1", "--min-time", "0", "--out", str(out))
    assert shipped.returncode == 0, shipped.stderr  # the agent that comes with PerfDojo


def test_the_shipped_agent_ranks_with_its_cost_model_from_a_spec_and_continuing_a_derived_file(
        softmax: Path, tmp_path: Path) -> None:
    """With no checkpoint, the agent is the shipped cost model's ranked search: from the spec (no
    heuristic), and continuing a derived file (the heuristic pass's program here), whose moves it
    keeps; each step is a batch of a few measurements, and the result replays."""
    heuristic = tmp_path / "heuristic.dojo"
    made = dojo("tune", str(softmax), "--method", "heuristic", "--min-time", "0", "--out", str(heuristic))
    assert made.returncode == 0, made.stderr
    for start, prefix in ((softmax, ()), (heuristic, tuple(load(heuristic.read_text()).derivation.moves))):
        out = tmp_path / f"agent-{start.stem}.dojo"
        played = dojo("agent", "continue", str(start), "--steps", "2", "-o", str(out), "--json")
        assert played.returncode == 0, played.stderr
        summary = json.loads(played.stdout)
        assert len(summary["steps"]) == 2 and summary["ended"] == "steps"
        if summary["moves"]:
            assert dojo("replay", str(out)).returncode == 0
            assert tuple(load(out.read_text()).derivation.moves)[:len(prefix)] == prefix
    tuned = dojo("tune", str(heuristic), "--method", "agent", "--budget", "6", "--min-time", "0", "--out",
                 str(tmp_path / "tuned.dojo"), "--json")
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["evaluations"] == 6 and dojo("replay", str(tmp_path / "tuned.dojo")).returncode == 0


def test_the_agent_trains_and_plays_with_the_heuristic_pass_removed_from_the_installation(softmax: Path,
                                                                                         tmp_path: Path) -> None:
    """PerfLLM knows no hardware: with agent.passes (the expert heuristic) impossible to import, as
    if its file were deleted, `dojo agent train` (from logs too) and `dojo agent continue` still
    work, and the agent's search can be imported."""

    def without_passes(*args: str) -> subprocess.CompletedProcess:
        code = ("import sys; sys.modules['agent.passes'] = None; from server.cli import main; "
                "sys.exit(main(sys.argv[1:]))")
        return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)

    logged = dojo("tune", str(softmax), "--method", "random", "--graph", "edges", "--budget", "4", "--min-time", "0",
                  "--out", str(tmp_path / "random.dojo"))
    assert logged.returncode == 0, logged.stderr
    run = tmp_path / "run"
    trained = without_passes("agent", "train", "--kernels", "relu", "softmax", "--shapes", "small", "--episodes", "2",
                             "--max-steps", "3", "--out", str(run), "--from-logs", str(tmp_path / "random.dojo.jsonl"),
                             "--pretrain-updates", "5")
    assert trained.returncode == 0, trained.stderr
    assert "read 9 transitions from" in trained.stderr and "offline update 5/5" in trained.stderr
    imported = subprocess.run([sys.executable, "-c", "import sys; sys.modules['agent.passes'] = None; "
                               "import agent.perfllm.search"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    played = without_passes("agent", "continue", str(softmax), "--checkpoint", str(run), "--steps", "3", "--json")
    assert played.returncode == 0, played.stderr
    assert json.loads(played.stdout)["steps"]
    heuristic = without_passes("tune", str(softmax), "--method", "heuristic", "--out", str(tmp_path / "o.dojo"))
    assert "agent.passes" in heuristic.stderr  # the pass is really out of reach


def test_the_agent_continues_to_standard_output_a_program_that_checks(softmax: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """`dojo agent continue FILE > OUT` makes a valid OUT: the steps and the summary go to standard error."""
    monkeypatch.setattr(runner.local, "LocalRunner", FakeRunner)
    run = tmp_path / "run"
    assert main(["agent", "train", "--kernels", "softmax", "--shapes", "small", "--episodes", "1", "--max-steps", "2",
                 "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["agent", "continue", str(softmax), "--checkpoint", str(run), "--steps", "2"]) == 0
    played = capsys.readouterr()
    assert "1: " in played.err and "softmax: agent: " in played.err
    assert played.out.startswith("kernel softmax")  # the program alone
    out = tmp_path / "continued.dojo"  # beside FILE, where the spec path the derivation names points
    out.write_text(played.out)
    assert main(["check", str(out)]) == 0
    assert "spec " not in played.out or main(["replay", str(out)]) == 0
