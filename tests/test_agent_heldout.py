"""bench/agent_heldout.py: every budget read from one run, runs saved as they finish and taken back
only for the same budget, spec, agent and heuristic pass, and the issue's bars computed from the times."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_agent_search import FakeRunner

from agent.costmodel.model import SHIPPED
from agent.evaluate import Evaluation
from dojo_ir import load
from dojo_ir.library import KERNELS

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.agent_heldout import (  # noqa: E402
    CONTINUING,
    REAL_KERNELS,
    SEARCHES,
    against_the_pass,
    bars,
    best_within,
    continuing,
    load_run,
    policy_hash,
    run_and_save,
    run_identity,
    spec_of,
)


def evaluation(index: int, median_s: float | None) -> Evaluation:
    return Evaluation(index, (f"move{index}",), f"hash{index}", median_s, median_s is not None, None, 0.0)


def test_the_best_at_each_budget_is_read_from_one_run_by_the_evaluations_index() -> None:
    run = [evaluation(0, 3.0), evaluation(1, None), evaluation(2, 2.0), evaluation(3, 2.0), evaluation(4, 1.0)]
    assert [best_within(run, n).index for n in (0, 1, 3, 4, 200)] == [0, 0, 2, 4, 4]


def test_a_run_is_saved_when_it_finishes_and_taken_back_for_the_same_budget_spec_and_policy(tmp_path: Path) -> None:
    spec = load(KERNELS["softmax"].text(m=4, n=16))
    key, described = ("softmax", "random", 0), {"budget": 3, "spec": "s", "policy": "p"}
    run = run_and_save(spec, tmp_path, key, 3, FakeRunner(), tmp_path, described)
    assert [e.index for e in run] == list(range(len(run))) and 1 < len(run) <= 4
    logged = [e.to_json() for e in run]
    assert [e.to_json() for e in load_run(tmp_path, key, described)] == logged
    assert load_run(tmp_path, key, described | {"budget": 200}) is None
    assert load_run(tmp_path, key, described | {"policy": "another agent"}) is None
    assert load_run(tmp_path, ("softmax", "random", 1), described) is None

    interrupted = ("softmax", "sa", 0)
    with pytest.raises(KeyboardInterrupt):
        run_and_save(spec, tmp_path, interrupted, 3, FakeRunner(interrupt_at=2), tmp_path, described)
    assert load_run(tmp_path, interrupted, described) is None  # half a run is not a run
    again = run_and_save(spec, tmp_path, interrupted, 3, FakeRunner(), tmp_path, described)
    assert [e.to_json() for e in load_run(tmp_path, interrupted, described)] == [e.to_json() for e in again]


def test_the_policy_hash_is_the_policy_files_whether_named_by_its_directory_or_itself(tmp_path: Path) -> None:
    (tmp_path / "policy.pt").write_bytes(b"one network")
    assert policy_hash(tmp_path) == policy_hash(tmp_path / "policy.pt")
    other = tmp_path / "other.pt"
    other.write_bytes(b"another network")
    assert policy_hash(other) != policy_hash(tmp_path)


def test_the_bars_compare_the_agent_at_100_with_the_others_at_200() -> None:
    times = {"k": {("agent", 100): 1.0, ("random", 200): 1.0, ("sa", 200): 2.0, ("sa:heuristic", 200): 0.9},
             "j": {("agent", 100): 4.0, ("random", 200): 4.0, ("sa", 200): 2.0, ("sa:heuristic", 200): 3.0}}

    def time_of(kernel: str, method: str, budget: int) -> float:
        return times[kernel][method, budget]

    lines, ratios = bars(time_of, ["k", "j"], list(SEARCHES), 200)
    text = "\n".join(lines)
    assert "1.000 (random) and 1.000 (sa): **met**" in text  # sa: sqrt(1/2 * 4/2)
    assert "0.822: **met**" in text  # sqrt(0.9 * 0.75) of sa:heuristic's speed-up
    assert ratios["agent 100 / random 200"] == 1.0
    times["j"]["agent", 100] = 5.0
    text = "\n".join(bars(time_of, ["k", "j"], list(SEARCHES), 200)[0])
    assert "1.118 (random) and 1.118 (sa): **not met**" in text and "0.735: **not met**" in text
    assert "(a) Not computed: no runs of agent" in "\n".join(bars(time_of, ["k"], ["sa"], 200)[0])


def test_the_continuing_bar_compares_the_agent_with_sa_heuristic_at_40_and_states_the_roofline_floor() -> None:
    times = {"k": {(CONTINUING, 0): 1.2, (CONTINUING, 40): 0.7, ("sa:heuristic", 40): 1.0},
             "j": {(CONTINUING, 0): 1.2, (CONTINUING, 40): 0.9, ("sa:heuristic", 40): 1.0}}

    def time_of(kernel: str, method: str, budget: int) -> float:
        return times[kernel][method, budget]

    remeasured = {("k", ()): 2.0, ("j", ()): 2.0}
    floors = {"k": 0.5, "j": 0.8}  # the roofline bounds: the least the ratio can be is bound / sa's time
    lines, ratios = continuing(time_of, remeasured, floors)
    assert "0.794 in geometric mean, 0.900 at worst: **met**" in "\n".join(lines)  # sqrt(0.7 * 0.9)
    assert "| k | 1.67x | 2.00x | 2.86x | 0.700 | 0.500 |" in lines
    assert "at the roofline bound on every kernel would give 0.632" in "\n".join(lines)  # sqrt(0.5 * 0.8)
    assert ratios["roofline bound / sa:heuristic 40"] == pytest.approx(0.632, abs=1e-3)
    times["j"][CONTINUING, 40] = 1.1  # one kernel more than 5% slower than sa:heuristic fails the bar
    assert "**not met**" in "\n".join(continuing(time_of, remeasured, floors)[0])


def test_the_real_model_bar_compares_the_agent_at_60_with_the_heuristic_pass_and_sa() -> None:
    times = {"k": {("agent", 60): 1.0, ("sa", 60): 2.0}, "j": {("agent", 60): 2.0, ("sa", 60): 2.0}}
    passes = {"k": 0.95, "j": 1.4}

    def time_of(kernel: str, method: str, budget: int) -> float:
        return times[kernel][method, budget]

    lines, ratios = against_the_pass(time_of, passes.get, ["k", "j"])
    assert "0.815 in geometric mean, 0.700 at worst (j); its time over sa's at 60: 0.707: **met**" in lines[0]
    passes["j"] = 0.9  # the agent at under half the heuristic pass's speed-up on one kernel fails the bar
    assert "0.450 at worst (j)" in against_the_pass(time_of, passes.get, ["k", "j"])[0][0]
    assert "**not met**" in against_the_pass(time_of, passes.get, ["k", "j"])[0][0]


def test_the_real_model_kernels_are_kernels_of_models_as_imported() -> None:
    assert {"resnet50_strided_pointwise", "shufflenet_depthwise", "minilm_attention_scores"} <= set(REAL_KERNELS)
    for name, path in REAL_KERNELS.items():
        spec = spec_of(name)
        assert spec.name == name and path.read_text().startswith("# From ")


def test_a_continuing_run_is_saved_and_read_back_with_its_moves_from_the_spec(tmp_path: Path) -> None:
    spec = load(KERNELS["softmax"].text(m=4, n=16))
    key, described = ("softmax", CONTINUING, 0), {"budget": 40, "spec": "s"}
    run = run_and_save(spec, tmp_path, key, 200, FakeRunner(), SHIPPED, described)
    start = run[0].moves
    assert start and all(e.moves[:len(start)] == start for e in run)  # the heuristic pass's moves first
    assert [e.to_json() for e in load_run(tmp_path, key, described)] == [e.to_json() for e in run]


def test_a_run_from_the_heuristic_pass_is_taken_back_only_from_the_same_pass_program(tmp_path: Path) -> None:
    spec = load(KERNELS["softmax"].text(m=4, n=16))
    identity = run_identity(spec, "sa:heuristic", 200, "p")
    assert "heuristic" in identity and "policy" not in identity
    assert "heuristic" in run_identity(spec, CONTINUING, 200, "p")
    assert "heuristic" not in run_identity(spec, "sa", 200, "p")
    key = ("softmax", "sa:heuristic", 0)
    run_and_save(spec, tmp_path, key, 3, FakeRunner(), tmp_path, identity | {"heuristic": "an older pass"})
    assert load_run(tmp_path, key, identity) is None  # started from another program: run again
    run_and_save(spec, tmp_path, key, 3, FakeRunner(), tmp_path, identity)
    assert load_run(tmp_path, key, identity) is not None
