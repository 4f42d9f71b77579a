"""The game's rules (agent/perfllm/game.py) and the game loop (agent/perfllm/play.py), with the
fake embedder and cost models: legal moves only, no program met twice, the best program kept,
the ways a game ends."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest
import test_perfllm_fakes
from test_perfllm_fakes import FakeEmbedder, TextRunner, speedup_cost

from agent.evaluate import Evaluator, replay_moves, text_hash
from agent.perfllm.game import Costs, allowed, legal_moves, successors
from agent.perfllm.learner import Learner
from agent.perfllm.play import play
from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.moves import find, why_not
from dojo_ir.paths import without_comments

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)


def spec(name: str = "matmul"):
    return without_comments(load(KERNELS[name].small()))


def random_game(start, cost, *, max_steps: int = 6, seed: int = 0, **options):
    """A game with an untrained agent that plays at random (epsilon 1)."""
    return play(Learner(16), FakeEmbedder(), Costs(start, cost), max_steps=max_steps, epsilon=1.0,
                rng=random.Random(seed), **options)


# -- the rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["native", "cuda"])
def test_the_legal_moves_are_finds_less_what_the_target_cannot_run_as_the_searches_have_them(target: str) -> None:
    facts = get_target(target)
    for name in ("softmax", "matmul", "swiglu"):
        program = spec(name)
        usable = [str(m) for m in find(program) if allowed(facts, m)]
        legal = [str(m) for m in legal_moves(program, target)]
        assert legal == [m for m in usable if m in legal]  # find's order
        dropped = [m for m in find(program) if allowed(facts, m) and str(m) not in legal]
        # only the splits with a tail by a factor that is not a power of two (test_agent_search.py)
        # and stagings for a copy nest, which the specs have none of
        assert all(m.name == "split_scope" and m.arg("factor") & (m.arg("factor") - 1) for m in dropped)
        kinds = {m.name for m in legal_moves(program, target)}
        assert ("map_gpu" in kinds) == (target == "cuda") and ("vectorize_scope" in kinds) == (target == "native")
    assert not any(m.name == "map_gpu" for m in legal_moves(spec("softmax"), "native"))
    assert not any(m.name == "parallelize_scope" for m in legal_moves(spec("softmax"), "cuda"))


def test_successors_are_the_programs_after_each_move() -> None:
    program = spec()
    moves = legal_moves(program)
    after = successors(program, moves)
    assert len(after) == len(moves)
    for move, result in zip(moves, after, strict=True):
        assert replay_moves(program, [str(move)])[0] == result


def test_costs_ask_a_cost_function_once_per_program_and_make_failures_infinite() -> None:
    asked: list[list[str]] = []

    def cost(moves: list[str]) -> float:
        asked.append(moves)
        return -1.0 if moves else 2e-3

    program = spec()
    costs = Costs(program, cost)
    move = str(legal_moves(program)[0])
    after = replay_moves(program, [move])[0]
    assert costs([], program) == 2e-3 and costs([], program) == 2e-3
    assert costs([move], after) == math.inf
    assert asked == [[], [move]]


def test_costs_refuse_an_evaluator_of_another_start() -> None:
    with pytest.raises(ValueError, match="another start"):
        Costs(spec("matmul"), Evaluator(spec("softmax"), runner=TextRunner()))


def test_the_agent_imports_no_heuristic() -> None:
    code = ("import sys, agent.perfllm.train, agent.perfllm.play, agent.perfllm.env; "
            "sys.exit('agent.passes' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- the game --------------------------------------------------------------------------------------


def test_a_game_plays_only_legal_moves_meets_no_program_twice_and_keeps_the_best() -> None:
    start = spec()
    cost = speedup_cost(lambda m: 0.7 if m.startswith("parallelize") else 1.05)
    for seed in range(4):
        result = random_game(start, cost, seed=seed, may_stop=False)
        played = [s.move for s in result.steps]
        assert len(played) == 6 and None not in played
        program, met = start, {text_hash(start)}
        for move in played:
            assert why_not(program, move) is None
            program = replay_moves(program, [move])[0]
            assert text_hash(program) not in met
            met.add(text_hash(program))
        times = [s.time_s for s in result.steps]
        assert result.time_s == min([*times, result.start_s])
        assert [s.best_s for s in result.steps] == [min([result.start_s, *times[:i + 1]]) for i in range(6)]
        assert replay_moves(start, result.moves)[0] == result.program
        assert cost(result.moves) == result.time_s


def test_a_game_ends_when_the_agent_stops() -> None:
    results = [random_game(spec(), speedup_cost(lambda m: 1.0), max_steps=50, seed=s) for s in range(10)]
    stopped = [r for r in results if r.ended == "agent"]
    assert stopped  # at random, among ~17 actions, stop comes up within 50 steps
    for result in stopped:
        assert result.steps[-1].move is None and len(result.steps) < 50


def test_a_game_ends_when_no_unmet_program_is_one_move_away() -> None:
    # relu 1x1 has few programs: the agent runs out of new ones
    tiny = load(KERNELS["relu"].generate(m=1, n=1))
    result = random_game(tiny, speedup_cost(lambda m: 1.0), max_steps=100, may_stop=False)
    assert result.ended == "dead end" and len(result.steps) < 100


def test_a_game_ends_when_asked_to_between_steps() -> None:
    polls = iter(range(100))
    result = random_game(spec(), speedup_cost(lambda m: 1.0), may_stop=False, should_stop=lambda: next(polls) == 2)
    assert result.ended == "stopped" and len(result.steps) == 2


def test_a_game_ends_when_the_evaluators_budget_runs_out() -> None:
    start = spec()
    runner = TextRunner()
    evaluator = Evaluator(start, runner=runner, budget=3)
    result = random_game(start, evaluator, max_steps=20, may_stop=False)
    assert result.ended == "budget" and len(result.steps) == 3 and runner.runs == 4
    assert result.time_s == min(evaluator.cache.values())


def test_a_start_that_fails_is_refused() -> None:
    with pytest.raises(ValueError, match="starting program failed"):
        random_game(spec(), lambda moves: math.inf)


def test_the_reward_is_the_starts_time_over_the_time_after_the_move() -> None:
    result = random_game(spec(), speedup_cost(lambda m: 0.5), may_stop=False, max_steps=3)
    assert [s.reward for s in result.steps] == pytest.approx([2.0, 4.0, 8.0])


def test_each_step_is_reported_as_it_is_played() -> None:
    seen = []
    result = random_game(spec(), speedup_cost(lambda m: 1.0), max_steps=4, on_step=seen.append, may_stop=False)
    assert seen == result.steps

