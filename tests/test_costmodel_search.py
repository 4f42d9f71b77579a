"""The ranked searches (agent/costmodel/search.py): candidates ranked by the cost model, only the best few
and one at random measured a batch, the model refit on what was measured, every move legal, the best
program met kept, the budget respected."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_agent_search import FakeRunner

from agent.costmodel.features import NAMES, Host
from agent.costmodel.model import SHIPPED, CostModel
from agent.costmodel.search import CONTINUING, Ranked, _Game, continue_ranked, search_ranked
from agent.evaluate import Evaluator, replay_moves, text_hash
from agent.perfllm.game import kind
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments

HOST = Host(peak_flops=4e11, bandwidth_Bps=2e10, cores=2, vector_bytes=64, l1d=48 << 10, l2=2 << 20, l3=32 << 20,
            l2_Bps=4e11, l3_Bps=2e11)
SPEC = without_comments(load(KERNELS["softmax"].small()))
MODEL = CostModel.load(SHIPPED)


class Paying:
    """A cost of the moves: each vector or parallel scope halves the time, anything else costs 1%.
    It counts its calls and the programs' moves it was asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def __call__(self, moves: list[str]) -> float:
        self.asked.append(tuple(moves))
        return self.time(moves)

    @staticmethod
    def time(moves) -> float:
        paying = sum(kind(m) in ("vectorize_scope", "parallelize_scope") for m in moves)
        return 1e-3 * 0.5 ** paying * 1.01 ** (len(moves) - paying)


def test_each_step_measures_a_batch_and_plays_one_of_its_moves_all_legal() -> None:
    cost, ranked = Paying(), Ranked(measure=2, explore=1, refit_steps=5)
    result = continue_ranked(SPEC, MODEL, HOST, 4, cost, ranked=ranked)
    assert result.ended == "steps" and len(result.steps) == 4
    batch = ranked.measure + ranked.by_roofline + ranked.explore
    assert len(cost.asked) <= 1 + 4 * batch  # the start, then the batches
    played = [s.move for s in result.steps]
    program, applied = replay_moves(SPEC, played)
    assert applied == played  # every move was legal where it was played
    # a step plays one of the programs its batch measured, one move on from the last
    assert all(tuple(played[:k + 1]) in cost.asked for k in range(len(played)))
    assert result.time_s == min(Paying.time(m) for m in cost.asked)  # the best program met


def test_a_search_spends_its_budget_once_on_each_program_and_keeps_the_best() -> None:
    runner = FakeRunner()
    evaluator = Evaluator(SPEC, runner=runner, budget=12)
    result = search_ranked(evaluator.start, MODEL, HOST, evaluator, ranked=Ranked(refit_steps=5))
    assert result.ended == "budget" and evaluator.evaluations == 12 and len(result.steps) == 12
    assert len(runner.calls) == 13 == len(set(runner.calls))  # the start and twelve others, none twice
    assert result.time_s == min(s.time_s for s in result.steps if s.time_s is not None) <= result.start_s
    program, applied = replay_moves(SPEC, result.moves)
    assert applied == result.moves and text_hash(program) == text_hash(result.program)


def test_refitting_on_what_was_measured_finds_what_pays_on_this_kernel() -> None:
    """With the same model, budget and seeds, refitting after each batch reaches faster programs than not
    refitting: the batches after the first are ranked by a model that has seen this kernel's times (the
    roofline's candidates left out, which find this cost's paying moves without the model)."""
    def log_time(refit_steps: int) -> float:
        ranked = Ranked(refit_steps=refit_steps, refit_after=2, by_roofline=0)
        return sum(math.log(search_ranked(SPEC, MODEL, HOST, Paying(), ranked=ranked, steps=24, seed=seed).time_s)
                   for seed in range(3))

    assert log_time(60) < log_time(0) - math.log(2)


class FourMovesOn:
    """A model that sees nothing in a program but how many moves made it, and likes only four."""

    log_moves = NAMES.index("program.log_moves")

    def score_features(self, rows: np.ndarray) -> np.ndarray:
        return np.where(np.isclose(rows[:, self.log_moves], math.log1p(4) / 4), -1.0, 0.0)


@pytest.mark.parametrize(("lookahead", "sees"), [(4, True), (3, False)])
def test_a_candidates_value_is_the_best_score_within_the_lookahead(lookahead: int, sees: bool) -> None:
    game = _Game(SPEC, FourMovesOn(), HOST, Paying(), "native", (), Ranked(lookahead=lookahead), 0)
    values = [c.value for c in game.candidates([((), SPEC)])]
    assert all(c == 0 for c in values) != sees  # only a lookahead of four reaches the programs four moves on
    assert (min(values) == -1) == sees


class AgainstTheRoofline:
    """A model that expects the opposite of the roofline bound the features compute."""

    bound = NAMES.index("program.bound_s")

    def score_features(self, rows: np.ndarray) -> np.ndarray:
        return -rows[:, self.bound]


@pytest.mark.parametrize("by_roofline", [0, 1])
def test_a_batch_can_take_the_candidate_the_roofline_expects_fastest_whatever_the_model_says(
        by_roofline: int) -> None:
    ranked = Ranked(measure=3, explore=0, lookahead=1, by_roofline=by_roofline)
    game = _Game(SPEC, AgainstTheRoofline(), HOST, Paying(), "native", (), ranked, 0)
    candidates = game.candidates([((), SPEC)])
    batch = game.batch(candidates)
    assert len(batch) == 3 + by_roofline
    smallest_bound = min(-c.score for c in candidates)
    assert (min(-c.score for c in batch) == smallest_bound) == bool(by_roofline)


def test_a_search_looks_further_ahead_in_smaller_batches_than_a_ten_move_game() -> None:
    """A search can come back for what pays later and gets a move deeper a batch; a continuation plays
    every step, so each of its batches measures more (see Ranked and CONTINUING)."""
    assert (Ranked().lookahead, Ranked().measure, Ranked().by_roofline) == (4, 2, 1)
    assert (CONTINUING.lookahead, CONTINUING.measure, CONTINUING.explore, CONTINUING.by_roofline) == (2, 3, 2, 1)


def test_a_search_reads_each_programs_features_and_moves_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches share their parents and lookahead with the last one; what the game learnt of a program is kept."""
    import agent.costmodel.search as search

    read, listed = [], []
    features, legal_moves = search.features, search.legal_moves
    monkeypatch.setattr(search, "features", lambda program, host, moves: read.append(moves) or features(
        program, host, moves))
    monkeypatch.setattr(search, "legal_moves", lambda program, facts: listed.append(program) or legal_moves(
        program, facts))
    result = search_ranked(SPEC, MODEL, HOST, Paying(), ranked=Ranked(refit_steps=0), steps=16)
    assert len(result.steps) == 16
    assert len(read) == len(set(read)) > 16 * 8  # the lookahead scored many programs, none twice
    assert len(listed) == len({without_comments(p) for p in listed})


def test_the_start_must_run() -> None:
    with pytest.raises(ValueError, match="no time to measure against"):
        continue_ranked(SPEC, MODEL, HOST, 2, lambda moves: math.inf)
