"""The dueling Q-network over changing action sets (agent/perfllm/qnet.py)."""

from __future__ import annotations

import torch

from agent.perfllm.qnet import DuelingQNet, dueling, segment_argmax, segment_mean

OWNER = torch.tensor([0, 0, 0, 1, 1])  # state 0 has three actions, state 1 two


def test_segment_mean_averages_each_states_rows() -> None:
    values = torch.tensor([1.0, 2.0, 6.0, 10.0, 20.0])
    assert torch.equal(segment_mean(values, OWNER, 2), torch.tensor([3.0, 15.0]))


def test_segment_argmax_picks_each_states_best_row_the_first_of_equals() -> None:
    values = torch.tensor([1.0, 7.0, 7.0, 30.0, 20.0])
    assert segment_argmax(values, OWNER, 2).tolist() == [1, 3]


def test_dueling_is_the_value_plus_the_advantage_less_the_states_mean_advantage() -> None:
    value = torch.tensor([10.0, -1.0])
    advantage = torch.tensor([1.0, 2.0, 6.0, 10.0, 20.0])
    q = dueling(value, advantage, OWNER)
    assert torch.allclose(q, torch.tensor([10 + 1 - 3, 10 + 2 - 3, 10 + 6 - 3, -1 + 10 - 15, -1 + 20 - 15.0]))
    # the mean of each state's Q is its value: the advantages only rank the actions
    assert torch.allclose(segment_mean(q, OWNER, 2), value)


def test_the_network_scores_any_number_of_actions_and_a_state_does_not_see_anothers() -> None:
    torch.manual_seed(0)
    net = DuelingQNet(dim=8, hidden=16)
    states = torch.randn(2, 8)
    actions = torch.randn(5, 16)
    q = net(states, actions, OWNER)
    assert q.shape == (5,)
    alone = net(states[1:], actions[3:], torch.tensor([0, 0]))
    assert torch.allclose(q[3:], alone, atol=1e-6)
