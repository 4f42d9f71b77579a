"""The agent as a search (agent/perfllm/search.py): parents drawn by their measured time, the
move out of each chosen by the Q-values, every program measured once, the budget spent, the best
kept, learning as it goes without touching the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_perfllm_fakes
import torch
from test_perfllm_fakes import FakeEmbedder, TextRunner, speedup_cost

from agent.evaluate import Evaluator, replay_moves
from agent.perfllm.checkpoint import policy_state, save_atomically
from agent.perfllm.embed import canonical_text
from agent.perfllm.game import legal_moves
from agent.perfllm.learner import Learner
from agent.perfllm.search import search
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments

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
    """The fake embedding, with the rating of a move from `ratings` (by the move an action's
    description names in its first line, 0 for the others) in its first entry."""

    def __init__(self, ratings: dict[str, float]):
        super().__init__()
        self.ratings = ratings

    def embed_many(self, items) -> torch.Tensor:
        rows = super().embed_many(items)
        rows[:, 0] = torch.tensor([self.ratings.get(canonical_text(item).split("\n")[0], 0.0) for item in items])
        return rows


def rated_search(cost_of_first: float, monkeypatch: pytest.MonkeyPatch, policy: Path) -> tuple[str, list[list[str]]]:
    """A search of 12 measurements with Q = the rating of the move, the first legal move of every
    program rated highest, the program it makes from the start timed at `cost_of_first` and every
    other at 1 ms; the first move and what was measured."""
    monkeypatch.setattr(Learner, "q_values", lambda self, state, actions: actions[:, 0].clone())
    start = spec()
    first = str(legal_moves(start)[0])
    measured: list[list[str]] = []

    def cost(moves: list[str]) -> float:
        measured.append(moves)
        return cost_of_first if moves == [first] else 1e-3

    search(start, policy, cost, embedder=Rated({first: 5.0}), epsilon=0.0, learn=False, steps=12)
    return first, measured


def test_the_move_out_of_a_parent_is_the_one_the_agent_rates_highest(policy: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first, measured = rated_search(1e-3, monkeypatch, policy)
    assert measured[:2] == [[], [first]]


def test_parents_are_drawn_by_their_measured_time_whatever_the_agent_thinks_of_them(
        policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's favourite move makes a program 1000 times slower: the search measures it once
    and then draws its parents from the fast programs ((best / time)^4: 1e-12 for it)."""
    first, measured = rated_search(1.0, monkeypatch, policy)
    assert measured[1] == [first]
    assert not any(moves[:1] == [first] for moves in measured[2:])
    # made 10 times faster instead, it is where the search goes on from ((1/10)^4 for the start)
    monkeypatch.undo()
    first, measured = rated_search(1e-4, monkeypatch, policy)
    assert sum(moves[:1] == [first] for moves in measured[2:]) >= 8


def test_from_one_program_the_search_plays_the_agents_best_move_of_each_kind_before_a_second_of_any(
        policy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every split rated above every other move, and every program but the start slow, so that the
    start is the parent each time: one split, then the best of each other kind, then splits again."""
    monkeypatch.setattr(Learner, "q_values", lambda self, state, actions: actions[:, 0].clone())
    start = without_comments(load(KERNELS["softmax"].quick()))  # a dozen splits of each scope
    legal = [str(m) for m in legal_moves(start)]
    kinds = list(dict.fromkeys(m.partition("(")[0] for m in legal))
    measured: list[list[str]] = []

    def cost(moves: list[str]) -> float:
        measured.append(moves)
        return 1e-3 if not moves else 1.0

    ratings = {m: 5.0 if m.startswith("split_scope") else 1.0 for m in legal}
    search(start, policy, cost, embedder=Rated(ratings), epsilon=0.0, learn=False, steps=len(kinds) + 1)
    played = [moves[0].partition("(")[0] for moves in measured[1:]]
    assert all(len(moves) == 1 for moves in measured[1:])
    assert played[0] == "split_scope" and sorted(played[:len(kinds)]) == sorted(kinds)
    assert played[len(kinds)] == "split_scope"


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
