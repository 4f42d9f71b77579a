"""The Q-network: a dueling network over a changing set of actions (sections 3.1 and 3.3).

The state is s = E(program), one vector of `dim` floats, and an action is two: the embedding of
the move as written and the change it makes to the program's lines (`agent.perfllm.actions`), so
a network of fixed size scores however many legal moves a program has. It has two streams:

    V(s)      the value of the state, from E(s)
    A(s, a)   the advantage of each action, from the action's vector
    Q(s, a) = V(s) + A(s, a) - mean of A(s, .) over the legal actions of s

Several states' actions are scored in one call: `actions` holds every action of every state as
rows, and `owner[i]` is the index of the state that row i belongs to.
"""

from __future__ import annotations

import torch
from torch import nn


def segment_mean(values: torch.Tensor, owner: torch.Tensor, states: int) -> torch.Tensor:
    """The mean of `values` over the rows of each state, one entry per state (0 for none)."""
    sums = torch.zeros(states, dtype=values.dtype).index_add(0, owner, values)
    counts = torch.zeros(states, dtype=values.dtype).index_add(0, owner, torch.ones_like(values))
    return sums / counts.clamp(min=1)


def segment_argmax(values: torch.Tensor, owner: torch.Tensor, states: int) -> torch.Tensor:
    """For each state, the row index of its largest value (the first of equals)."""
    best = torch.full((states,), -torch.inf, dtype=values.dtype).scatter_reduce(0, owner, values, "amax")
    rows = torch.arange(len(values))
    is_best = values == best[owner]
    # the smallest row index among each state's maxima
    return torch.full((states,), len(values)).scatter_reduce(0, owner[is_best], rows[is_best], "amin")


def dueling(value: torch.Tensor, advantage: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """Q = V(s) + A(s, a) - mean over s's actions of A(s, .), for each action row."""
    return value[owner] + advantage - segment_mean(advantage, owner, len(value))[owner]


class DuelingQNet(nn.Module):
    """Q(s, a) for embeddings of `dim` floats; see the module's docstring.

    The advantage stream sees the state, the action and the product of the state with the move's
    embedding: the product lets one layer weigh a move by what the program around it is (a
    `parallelize_scope` pays on a program with no parallel scope yet, not on one that has)."""

    def __init__(self, dim: int, hidden: int = 256, action_dim: int | None = None):
        super().__init__()
        self.dim = dim
        self.action_dim = 2 * dim if action_dim is None else action_dim
        self.value = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.advantage = nn.Sequential(nn.Linear(2 * dim + self.action_dim, hidden), nn.ReLU(),
                                       nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, states: torch.Tensor, actions: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """Q for each row of `actions` ([N, action_dim]), given `states` ([B, dim]) and `owner` ([N],
        the state of each row). Every state needs at least one action."""
        context = states[owner]
        features = torch.cat([context, actions, context * actions[:, :self.dim]], dim=1)
        return dueling(self.value(states)[:, 0], self.advantage(features)[:, 0], owner)
