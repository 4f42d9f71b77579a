"""Learning from logs (agent/perfllm/experience.py, train's `experience`): every step a
heuristic-free search measured becomes a transition, the other logs are skipped with their reason,
and an agent pretrained on logs alone prefers the move that paid in them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import test_perfllm_fakes
from test_perfllm_fakes import FakeEmbedder

from agent.evaluate import Evaluator
from agent.perfllm.actions import observe
from agent.perfllm.checkpoint import load_policy
from agent.perfllm.experience import read_game, read_games, transitions
from agent.perfllm.game import legal_moves
from agent.perfllm.learner import LearnerConfig
from agent.perfllm.train import TrainOptions, train
from agent.search import METHODS, make_graph
from codegen.targets import get_target
from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments
from runner.result import RunResult

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)

SPEC = without_comments(load(KERNELS["matmul"].small()))


class ParallelPays:
    """A runner: 1 ms, halved by each parallel scope, and a failure for any program with a `:u`."""

    def run(self, program, target="native", repeats=3, warmup=1, spec=None) -> RunResult:
        text = to_text(program)
        if ":u" in text:
            return RunResult(target, None, None, None, 0, 0.0, False, 0.0, "failed", ())
        median = 1e-3 * 0.5 ** text.count(":p")
        return RunResult(target, median, median, median, repeats, 0.0, True, 0.0, None, (median,) * repeats)


def searched(log: Path, method: str = "random", graph: str = "edges", budget: int = 25) -> Path:
    evaluator = Evaluator(SPEC, runner=ParallelPays(), budget=budget, log=log,
                          source={"method": method, "graph": graph})
    METHODS[method](evaluator, make_graph(graph, evaluator, get_target("native")), 0)
    return log


def test_a_logs_first_line_names_its_spec_and_search(tmp_path: Path) -> None:
    header = json.loads(searched(tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert header == {"spec": to_text(SPEC), "prefix": [], "target": "native", "method": "random", "graph": "edges"}


def test_every_step_of_a_search_is_a_transition_and_every_program_a_stop(tmp_path: Path) -> None:
    game = read_game(searched(tmp_path / "a.jsonl"), "native")
    assert not isinstance(game, str) and game.start_s == 1e-3 and len(game.evaluations) == 25
    found = list(transitions(game, FakeEmbedder(), "native"))
    steps = [t for t, _ in found if not t.terminal]
    stops = [t for t, _ in found if t.terminal]
    assert len(steps) == 25  # random sampling on the edges graph measures one move from a program it met
    assert len(stops) == 1 + sum(not math.isinf(e.cost) for e in game.evaluations)
    for evaluation, step in zip(game.evaluations, steps, strict=True):
        assert step.reward == (0.0 if math.isinf(evaluation.cost) else 1e-3 / evaluation.cost)
    # the taken action is the logged move: its index among the parent's legal moves, stop being 0
    first = steps[0]
    parent = observe(SPEC, FakeEmbedder())
    assert first.state == parent.state and parent.moves[first.taken - 1] == game.evaluations[0].moves[-1]
    for transition, vectors in found:
        assert set(transition.keys()) <= set(vectors)


def test_simulated_annealings_steps_count_though_it_reaches_programs_by_other_moves(tmp_path: Path) -> None:
    """The log names a program by the first moves that reached it; annealing walks on from the
    moves it took, so its steps are found by replaying those, not by looking the log's up."""
    game = read_game(searched(tmp_path / "sa.jsonl", "sa", budget=30), "native")
    assert not isinstance(game, str)
    steps = [t for t, _ in transitions(game, FakeEmbedder(), "native") if not t.terminal]
    assert len(steps) == len(game.evaluations) == 30


def test_logs_that_know_the_hardware_or_belong_elsewhere_are_skipped_with_the_reason(tmp_path: Path) -> None:
    free = searched(tmp_path / "free.jsonl", "sa")
    expert = searched(tmp_path / "expert.jsonl", "sa", "heuristic")
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(free.read_text().splitlines()[1:]) + "\n")
    arm = tmp_path / "arm.jsonl"
    arm.write_text(free.read_text().replace('"target": "native"', '"target": "arm-neon"', 1))
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xff\xfe not json")
    games, skipped = read_games([free, expert, old, arm, garbage], "native")
    assert [g.path for g in games] == [free]
    assert [reason.split(":")[0] for reason in skipped] == [str(p) for p in (expert, old, arm, garbage)]
    assert "knows the hardware" in skipped[0] and "older" in skipped[1] and "arm-neon" in skipped[2]


def test_an_agent_pretrained_on_logs_alone_prefers_the_move_that_paid_in_them(tmp_path: Path) -> None:
    # a log of every move from the spec, as a search that tried them all would leave it
    log = tmp_path / "a.jsonl"
    evaluator = Evaluator(SPEC, runner=ParallelPays(), log=log, source={"method": "random", "graph": "edges"})
    for move in [[], *([str(m)] for m in legal_moves(SPEC))]:
        evaluator.evaluate(move)
    logs = [log]
    embedder = FakeEmbedder()
    lines: list[str] = []
    options = TrainOptions(episodes=0, max_steps=3, config=LearnerConfig(hidden=32, batch_size=16), experience=logs,
                           pretrain_updates=400)
    result = train([("matmul", SPEC)], tmp_path / "agent", options, embedder=embedder, on_pretrain=lines.append)
    assert result.episodes == 0 and (tmp_path / "agent" / "policy.pt").is_file()
    assert lines[0].startswith("read ") and lines[-1].startswith("offline update 400/400")
    assert embedder.calls_on_every_core > 0 and not embedder.on_every_core  # the logs read on every core
    learner, _ = load_policy(tmp_path / "agent", embedder)
    seen = observe(SPEC, embedder)
    q = learner.q_values(seen.state_vector, seen.action_vectors())
    assert seen.moves[int(q[1:].argmax())].startswith("parallelize_scope")
