"""PerfDojo-v0 (agent/perfllm/env.py): gymnasium's checker, the observation, the action as an index
into the listed moves, rewards, and the ways an episode ends."""

from __future__ import annotations

import math
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from test_perfllm_fakes import TextRunner, speedup_cost

from agent.evaluate import Evaluator
from agent.perfllm.embed import canonical_text
from agent.perfllm.env import STOP, PerfDojoEnv
from agent.perfllm.game import legal_moves
from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments

MATMUL = KERNELS["matmul"].small()
HALVES = speedup_cost(lambda m: 0.5 if m.startswith("parallelize") else 2.0)


def make(**options) -> PerfDojoEnv:
    return gymnasium.make("PerfDojo-v0", program=MATMUL, evaluate=HALVES, **options).unwrapped


def test_the_environment_passes_gymnasiums_checker_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gymnasium.make("PerfDojo-v0", program=MATMUL, evaluate=HALVES, max_steps=5).unwrapped)


def test_the_observation_is_the_program_and_its_moves_after_stop_with_their_mask() -> None:
    env = make()
    observation, info = env.reset(seed=0)
    spec = without_comments(load(MATMUL))
    assert observation["program"] == canonical_text(spec) == to_text(spec)
    assert observation["moves"] == (STOP, *map(str, legal_moves(spec)))
    assert observation["action_mask"].dtype == np.int8
    listed = len(observation["moves"])
    assert observation["action_mask"][:listed].all() and not observation["action_mask"][listed:].any()
    assert info == {"time_s": 1e-3, "move": None, "invalid": False}
    assert env.observation_space.contains(observation)


def test_an_action_plays_the_move_at_its_index_and_earns_the_starts_time_over_the_new_one() -> None:
    env = make()
    observation, _ = env.reset()
    index = next(i for i, m in enumerate(observation["moves"]) if m.startswith("parallelize"))
    after, reward, terminated, truncated, info = env.step(index)
    assert reward == pytest.approx(2.0) and info["time_s"] == pytest.approx(5e-4)
    assert info["move"] == observation["moves"][index] and not terminated and not truncated
    assert after["program"] != observation["program"] and ":p" in after["program"]
    unrolled = next(i for i, m in enumerate(after["moves"]) if m.startswith("unroll"))
    assert env.step(unrolled)[1] == pytest.approx(1.0)  # 1 ms / (0.5 ms * 2)


def test_stop_ends_the_episode_with_the_current_programs_reward() -> None:
    env = make()
    env.reset()
    observation, reward, terminated, truncated, info = env.step(0)
    assert terminated and not truncated and reward == pytest.approx(1.0) and info["move"] is None


def test_an_index_past_the_moves_changes_nothing_and_earns_nothing() -> None:
    env = make(max_actions=64)
    observation, _ = env.reset()
    after, reward, terminated, truncated, info = env.step(len(observation["moves"]))
    assert reward == 0.0 and info["invalid"] and not terminated
    assert after["program"] == observation["program"] and after["moves"] == observation["moves"]


def test_an_episode_is_truncated_after_max_steps() -> None:
    env = make(max_steps=2)
    env.reset()
    assert env.step(1)[3] is False
    assert env.step(1)[3] is True


def test_a_program_that_fails_earns_nothing() -> None:
    env = gymnasium.make("PerfDojo-v0", program=MATMUL, evaluate=lambda moves: math.inf if moves else 1e-3).unwrapped
    env.reset()
    _, reward, _, _, info = env.step(1)
    assert reward == 0.0 and info["time_s"] is None


def test_the_moves_offered_are_at_most_what_the_action_space_holds() -> None:
    env = make(max_actions=4)
    observation, _ = env.reset()
    assert len(observation["moves"]) == 4 and env.action_space.n == 4


def test_an_evaluator_times_the_programs_and_a_scale_sets_the_unit_of_reward() -> None:
    spec = without_comments(load(MATMUL))
    env = gymnasium.make("PerfDojo-v0", program=spec, evaluate=Evaluator(spec, runner=TextRunner()), scale=2e-3)
    observation, _ = env.reset()
    index = observation["moves"].index(next(m for m in observation["moves"] if m.startswith("parallelize")))
    assert env.step(index)[1] == pytest.approx(2e-3 / 0.9e-3)


def test_the_ansi_rendering_is_the_program() -> None:
    env = make(render_mode="ansi")
    observation, _ = env.reset()
    assert env.render() == observation["program"]
