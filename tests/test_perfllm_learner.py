"""The Q-learner (agent/perfllm/learner.py): the max-Bellman target, Double DQN, epsilon-greedy
choice among the legal actions, checkpoints, and learning on small problems with known answers."""

from __future__ import annotations

import random

import pytest
import test_perfllm_fakes
import torch
from torch import nn

from agent.perfllm.learner import Learner, LearnerConfig, choose, epsilon_at, max_bellman_target
from agent.perfllm.replay import ReplayBuffer, Transition

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)


def test_the_max_bellman_target_is_the_larger_of_the_reward_and_the_discounted_next_value() -> None:
    reward = torch.tensor([1.0, 0.5, 2.0, 4.0])
    next_q = torch.tensor([3.0, 0.2, 10.0, 2.0])
    terminal = torch.tensor([False, False, True, False])
    y = max_bellman_target(reward, next_q, terminal, gamma=0.9)
    # 0.9 * 3 beats 1; 0.5 beats 0.9 * 0.2; a terminal step earns its reward alone; 4 beats 1.8
    assert torch.allclose(y, torch.tensor([2.7, 0.5, 2.0, 4.0]))


class TableNet(nn.Module):
    """Q of a row = the table's entry for the action (its vector's first coordinate), whatever the
    state."""

    def __init__(self, dim: int, table: dict[int, float]):
        super().__init__()
        self.dim, self.table = dim, table

    def forward(self, states, actions, owner):
        return torch.tensor([self.table[int(a)] for a in actions[:, 0]])


def vectors_of(*ids: int, dim: int = 2) -> dict[str, torch.Tensor]:
    return {f"p{i}": torch.tensor([float(i)] + [0.0] * (dim - 1)) for i in ids}


def test_double_dqn_lets_the_online_network_choose_and_the_target_network_value() -> None:
    learner = Learner(dim=2, config=LearnerConfig(gamma=0.5), action_dim=2)
    # at the next state p1, the actions lead to p1 (stop), p2 and p3
    learner.online = TableNet(2, {1: 1.0, 2: 5.0, 3: 2.0})  # picks p2
    learner.target = TableNet(2, {1: 10.0, 2: 4.0, 3: 0.0})  # values p2 at 4
    buffer = ReplayBuffer(10)
    move = Transition("p0", ("p0", "p1"), 1, 1.0, "p1", ("p1", "p2", "p3"), False)
    stop = Transition("p0", ("p0", "p1"), 0, 1.5, "p0", (), True)
    buffer.push(move, vectors_of(0, 1, 2, 3))
    buffer.push(stop, {})
    y = learner.targets([move, stop], buffer)
    # max(1, 0.5 * Q_target(p1, argmax Q_online)) = max(1, 0.5 * 4); not 0.5 * 10 (the target's
    # own maximum, plain DQN) nor 0.5 * 5 (the online network's value)
    assert y.tolist() == [2.0, 1.5]


def test_choose_never_picks_outside_the_legal_actions() -> None:
    rng = random.Random(0)
    q = torch.tensor([0.1, 0.9, 0.3])
    assert {choose(q, 0.0, rng) for _ in range(50)} == {1}
    assert {choose(q, 1.0, rng) for _ in range(300)} == {0, 1, 2}
    assert choose(torch.tensor([2.0, 2.0]), 0.0, rng) == 0  # the first of equals
    # exploring by kind: the one `vectorize` is drawn as often as the nine `split`s together
    kinds = ["split"] * 9 + ["vectorize"]
    drawn = [choose(torch.zeros(10), 1.0, rng, kinds) for _ in range(2000)]
    assert 850 < drawn.count(9) < 1150 and set(drawn) == set(range(10))
    with pytest.raises(ValueError, match="no action"):
        choose(torch.tensor([]), 0.5, rng)


def test_act_indexes_the_actions_it_is_given() -> None:
    learner = Learner(dim=4, seed=1)
    rng = random.Random(0)
    state = torch.randn(4)
    for count in (1, 2, 7):
        afters = torch.randn(count, 8)
        assert all(0 <= learner.act(state, afters, 0.5, rng) < count for _ in range(30))


def test_epsilon_falls_linearly_then_stays() -> None:
    assert [epsilon_at(e, 1.0, 0.1, 10) for e in (0, 5, 10, 50)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert epsilon_at(0, 1.0, 0.1, 0) == 0.1


def test_a_learner_restored_from_its_state_is_the_same_learner() -> None:
    learner = Learner(dim=4, config=LearnerConfig(hidden=8), seed=3)
    restored = Learner.from_state_dict(learner.state_dict())
    state, afters = torch.randn(4), torch.randn(3, 8)
    assert torch.equal(restored.q_values(state, afters), learner.q_values(state, afters))
    assert restored.config == learner.config
    assert not torch.equal(Learner(dim=4, config=LearnerConfig(hidden=8), seed=4).q_values(state, afters),
                           learner.q_values(state, afters))


# -- learning --------------------------------------------------------------------------------------


def unit_vectors(count: int, dim: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {f"p{i}": nn.functional.normalize(torch.randn(dim, generator=generator), dim=0) for i in range(count)}


def trained(transitions: list[Transition], vectors: dict[str, torch.Tensor], updates: int,
            gamma: float = 0.9) -> tuple[Learner, ReplayBuffer, list[float]]:
    # a program's vector stands for the actions that lead to it too: one size for both
    learner = Learner(dim=8, config=LearnerConfig(gamma=gamma, hidden=32, learning_rate=3e-3, tau=0.05), seed=0,
                      action_dim=8)
    buffer = ReplayBuffer(100, seed=0)
    for transition in transitions:
        buffer.push(transition, vectors)
    losses = [learner.learn(buffer.sample(16), buffer) for _ in range(updates)]
    return learner, buffer, losses


def test_on_a_one_step_problem_the_loss_falls_and_the_best_action_wins() -> None:
    # p0's actions: stop (1.0), or the move to p1..p4, which ends the game with these rewards
    rewards = {"p0": 1.0, "p1": 0.8, "p2": 2.0, "p3": 1.2, "p4": 0.5}
    actions = tuple(rewards)
    transitions = [Transition("p0", actions, i, r, "p0", (), True) for i, r in enumerate(rewards.values())]
    learner, _, losses = trained(transitions, unit_vectors(5), updates=300)
    assert sum(losses[-20:]) < 0.05 * sum(losses[:20])
    q = learner.q_values(unit_vectors(5)["p0"], torch.stack([unit_vectors(5)[k] for k in actions]))
    assert int(q.argmax()) == 2
    assert q.tolist() == pytest.approx(list(rewards.values()), abs=0.1)


def test_max_q_values_a_move_by_the_best_program_it_leads_to_not_by_the_sum_of_rewards() -> None:
    # p0 -> p1 earns 0.5, then p1 -> p2 earns 3; p0 -> p3 earns 1.2 and p3 can only stop
    vectors = unit_vectors(4)
    transitions = [
        Transition("p0", ("p0", "p1", "p3"), 0, 1.0, "p0", (), True),
        Transition("p0", ("p0", "p1", "p3"), 1, 0.5, "p1", ("p1", "p2"), False),
        Transition("p0", ("p0", "p1", "p3"), 2, 1.2, "p3", ("p3",), False),
        Transition("p1", ("p1", "p2"), 0, 0.5, "p1", (), True),
        Transition("p1", ("p1", "p2"), 1, 3.0, "p2", ("p2",), False),
        Transition("p2", ("p2",), 0, 3.0, "p2", (), True),
        Transition("p3", ("p3",), 0, 1.2, "p3", (), True),
    ]
    learner, _, _ = trained(transitions, vectors, updates=800)
    q = learner.q_values(vectors["p0"], torch.stack([vectors[k] for k in ("p0", "p1", "p3")]))
    # max(0.5, 0.9 * max(3, 0.9 * 3)) = 2.7; the sum of discounted rewards would be 0.5 + 0.9 * (3 + 0.9 * 3)
    assert q.tolist() == pytest.approx([1.0, 2.7, 1.2], abs=0.05)
    assert int(q.argmax()) == 1
