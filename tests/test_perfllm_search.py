"""The agent as a search (agent/perfllm/search.py): best first by the Q-values, every program
measured once, the budget spent, the best kept, learning as it goes without touching the
checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_perfllm_fakes
import torch
from test_perfllm_fakes import FakeEmbedder, TextRunner, speedup_cost

from agent.evaluate import Evaluator, replay_moves
from agent.perfllm.checkpoint import policy_state, save_atomically
from agent.perfllm.embed import canonical_text
from agent.perfllm.game import legal_moves, successors
from agent.perfllm.learner import Learner
from agent.perfllm.search import search
from dojo_ir import load
from dojo_ir.derivation import without_comments
from dojo_ir.library import KERNELS

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)


def spec(name: str = "matmul"):
    return without_comments(load(KERNELS[name].small()))


@pytest.fixture()
def policy(tmp_path: Path) -> Path:
    """An untrained agent's policy file, for the fake embedder."""
    path = tmp_path / "policy.pt"
    save_atomically(policy_state(Learner(16), FakeEmbedder()), path)
    return path


def test_a_search_spends_its_budget_on_new_programs_and_keeps_the_best(policy: Path) -> None:
    start = spec()
    runner = TextRunner()
    evaluator = Evaluator(start, runner=runner, budget=30)
    result = search(start, policy, evaluator, embedder=FakeEmbedder())
    assert result.ended == "budget" and evaluator.evaluations == 30
    assert runner.runs == 31  # the start and thirty programs, none timed twice
    assert [s.index for s in result.steps] == list(range(1, 31))
    assert result.time_s == min(evaluator.cache.values()) and result.start_s == 1e-3
    assert replay_moves(start, result.moves)[0] == result.program


class Rated(FakeEmbedder):
    """The fake embedding, with a rating of the program from `ratings` (by canonical text, 0 for
    the others) in its first entry."""

    def __init__(self, ratings: dict[str, float]):
        super().__init__()
        self.ratings = ratings

    def embed_many(self, items) -> torch.Tensor:
        rows = super().embed_many(items)
        rows[:, 0] = torch.tensor([self.ratings.get(canonical_text(item), 0.0) for item in items])
        return rows


def test_the_search_measures_the_move_rated_highest_among_every_program_met(policy: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With Q = the rating of the program a move leads to: the start's best move (5), then its
    second best (4), which beats every move out of the first program (1): best first over all
    that was met, not greedy from the last program."""
    monkeypatch.setattr(Learner, "q_values", lambda self, state, afters: afters[:, 0].clone())
    start = spec()
    first, second = (str(m) for m in legal_moves(start)[:2])
    after_first = replay_moves(start, [first])[0]
    ratings = {canonical_text(p): 1.0 for p in successors(after_first, legal_moves(after_first))}
    ratings |= {canonical_text(after_first): 5.0, canonical_text(replay_moves(start, [second])[0]): 4.0}
    measured: list[list[str]] = []

    def cost(moves: list[str]) -> float:
        measured.append(moves)
        return 1e-3

    search(start, policy, cost, embedder=Rated(ratings), epsilon=0.0, learn=False, steps=3)
    assert measured[:3] == [[], [first], [second]]
    assert measured[3][0] == first and len(measured[3]) == 2


def test_a_search_ends_when_no_program_met_has_a_move_left(policy: Path) -> None:
    tiny = load(KERNELS["relu"].generate(m=1, n=1))
    runner = TextRunner()
    result = search(tiny, policy, Evaluator(tiny, runner=runner), embedder=FakeEmbedder())
    assert result.ended == "dead end" and result.steps
    assert runner.runs == len(result.steps) + 1  # it met every program there is, each once


def test_a_search_goes_on_learning_and_leaves_the_checkpoint_as_it_was(policy: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    learned: list[int] = []
    record = Learner.record

    def counted(self, buffer, transition, vectors):
        learned.append(len(buffer))
        return record(self, buffer, transition, vectors)

    monkeypatch.setattr(Learner, "record", counted)
    saved = policy.read_bytes()
    result = search(spec(), policy, speedup_cost(lambda m: 0.9), embedder=FakeEmbedder(), steps=40)
    assert len(learned) == len(result.steps) == 40  # every measurement is a transition it learns from
    assert policy.read_bytes() == saved
    learned.clear()
    search(spec(), policy, speedup_cost(lambda m: 0.9), embedder=FakeEmbedder(), steps=5, learn=False)
    assert learned == []


def test_a_search_stops_when_asked_between_measurements(policy: Path) -> None:
    polls = iter(range(100))
    result = search(spec(), policy, speedup_cost(lambda m: 1.0), embedder=FakeEmbedder(),
                    should_stop=lambda: next(polls) == 3)
    assert result.ended == "stopped" and len(result.steps) == 3
