"""The Q-learner: Max-Q targets, Double DQN, a dueling network, epsilon-greedy (sections 3.2, 3.3).

    learner = Learner(dim=384, config=LearnerConfig(), seed=0)
    index = learner.act(state, actions, epsilon, rng)   # an index into `actions`
    loss = learner.learn(buffer.sample(32), buffer)     # one gradient step, then the target follows

The reward of a step is r = c / T(after), c a constant of the kernel (its spec's time, so that
rewards are speed-ups), and the goal is the best program of an episode rather than the sum of its
rewards, so the target is the max-Bellman one of Gottipati et al. (the paper's equation 4):

    y = max(r, gamma * Q_target(s', a*))      a* = argmax over the legal actions a' of s' of Q_online(s', a')
    y = r                                     for the stop action, which ends the episode

The online network picks a* and the target network evaluates it (Double DQN); the target
network follows the online one by Polyak averaging, target <- tau * online + (1 - tau) * target,
after every gradient step. Everything runs on the CPU.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from itertools import accumulate
from typing import Any

import torch
from torch import nn

from dojo_ir.moves import of_a_random_kind

from .qnet import DuelingQNet, segment_argmax
from .replay import ReplayBuffer, Transition


@dataclass(frozen=True)
class LearnerConfig:
    """The hyper-parameters. Epsilon falls linearly from `epsilon_start` to `epsilon_end` over
    `epsilon_decay_episodes` episodes (None: half of the episodes a training run is asked for)."""

    gamma: float = 0.95
    hidden: int = 256
    learning_rate: float = 1e-3
    batch_size: int = 32
    replay_capacity: int = 20_000  # transitions; the vectors they name are shared, and moves repeat across states
    tau: float = 0.01
    updates_per_step: int = 2  # a gradient step over 32 whole action sets costs ~0.2 s, a measurement ~0.5 s
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_decay_episodes: int | None = None
    max_grad_norm: float = 10.0

    def epsilon(self, episode: int) -> float:
        """Epsilon for `episode` (0-based)."""
        return epsilon_at(episode, self.epsilon_start, self.epsilon_end, self.epsilon_decay_episodes or 0)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LearnerConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def epsilon_at(episode: int, start: float, end: float, decay_episodes: int) -> float:
    """Epsilon for `episode` (0-based): linear from `start` to `end`, then `end`."""
    if decay_episodes <= 0:
        return end
    return start + (end - start) * min(1.0, episode / decay_episodes)


def choose(q: torch.Tensor, epsilon: float, rng: random.Random, kinds: Sequence[str] | None = None) -> int:
    """An index into `q`, the legal actions' values: with probability epsilon a random one, else
    the best (the first of equals). With `kinds`, the kind of each action (the move's name), the
    random one is of a random kind (`of_a_random_kind`): a program has dozens of split factors for
    each vectorisation or parallelisation, and drawing uniformly would explore little else."""
    if len(q) == 0:
        raise ValueError("no action to choose from: the stop action is always legal, so pass it")
    if rng.random() < epsilon:
        return rng.randrange(len(q)) if kinds is None else of_a_random_kind(rng, kinds)
    return int(torch.argmax(q))


def max_bellman_target(reward: torch.Tensor, next_q: torch.Tensor, terminal: torch.Tensor,
                       gamma: float) -> torch.Tensor:
    """y = r where terminal, else max(r, gamma * next_q) (`next_q` is ignored where terminal)."""
    return torch.where(terminal, reward, torch.maximum(reward, gamma * next_q))


def _rows(rows: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[str], torch.Tensor]:
    """The keys of every action of several (state, its actions) pairs, and each action's state
    index."""
    actions, owner = [], []
    for index, (_, keys) in enumerate(rows):
        actions += keys
        owner += [index] * len(keys)
    return actions, torch.tensor(owner, dtype=torch.long)


class Learner:
    """The online and target networks and their optimiser."""

    def __init__(self, dim: int, config: LearnerConfig | None = None, seed: int = 0, action_dim: int | None = None):
        self.config = config or LearnerConfig()
        self.dim = dim
        self.action_dim = 2 * dim if action_dim is None else action_dim  # agent.perfllm.actions: [move; change]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.online = DuelingQNet(dim, self.config.hidden, self.action_dim)
        self.target = DuelingQNet(dim, self.config.hidden, self.action_dim)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=self.config.learning_rate)
        self.updates = 0

    def q_values(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q_online(s, a) for each action vector in `actions` ([K, action_dim]), a state's legal actions."""
        with torch.no_grad():
            return self.online(state[None], actions, torch.zeros(len(actions), dtype=torch.long))

    def act(self, state: torch.Tensor, actions: torch.Tensor, epsilon: float, rng: random.Random,
            kinds: Sequence[str] | None = None) -> int:
        """The index of the action to play among `actions` (see `q_values`), epsilon-greedy
        (`choose`)."""
        return choose(self.q_values(state, actions), epsilon, rng, kinds)

    def _q(self, net: DuelingQNet, rows: Sequence[tuple[str, Sequence[str]]], buffer: ReplayBuffer,
           ) -> tuple[torch.Tensor, torch.Tensor]:
        """`net`'s Q of every action of several states, given as (state, its actions' keys),
        and each action's state index."""
        actions, owner = _rows(rows)
        return net(buffer.vectors([state for state, _ in rows]), buffer.vectors(actions), owner), owner

    def targets(self, batch: Sequence[Transition], buffer: ReplayBuffer) -> torch.Tensor:
        """The max-Bellman Double-DQN target y of each transition."""
        reward = torch.tensor([t.reward for t in batch], dtype=torch.float32)
        terminal = torch.tensor([t.terminal for t in batch])
        next_q = torch.zeros(len(batch))
        going = [i for i, t in enumerate(batch) if not t.terminal]
        if going:
            rows = [(batch[i].next_state, batch[i].next_actions) for i in going]
            with torch.no_grad():
                online, owner = self._q(self.online, rows, buffer)
                best = segment_argmax(online, owner, len(going))
                next_q[going] = self._q(self.target, rows, buffer)[0][best]
        return max_bellman_target(reward, next_q, terminal, self.config.gamma)

    def learn(self, batch: Sequence[Transition], buffer: ReplayBuffer) -> float:
        """One gradient step on the Huber loss between Q_online(s, a) of the actions taken and
        their targets; returns the loss."""
        y = self.targets(batch, buffer)
        q, _ = self._q(self.online, [(t.state, t.actions) for t in batch], buffer)
        first_row = [0, *accumulate(len(t.actions) for t in batch)][:-1]
        taken = torch.tensor([row + t.taken for row, t in zip(first_row, batch, strict=True)])
        loss = nn.functional.smooth_l1_loss(q[taken], y)
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.online.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self._follow()
        self.updates += 1
        return float(loss.detach())

    def record(self, buffer: ReplayBuffer, transition: Transition, vectors: dict[str, torch.Tensor]) -> list[float]:
        """Store `transition` (with the embeddings it names) in `buffer`; then, once the buffer
        holds a minibatch, take `updates_per_step` gradient steps. Returns their losses."""
        buffer.push(transition, vectors)
        if len(buffer) < self.config.batch_size:
            return []
        return [self.learn(buffer.sample(self.config.batch_size), buffer) for _ in range(self.config.updates_per_step)]

    def _follow(self) -> None:
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.online.parameters(), strict=True):
                target.lerp_(online, self.config.tau)

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "action_dim": self.action_dim, "config": self.config.to_json(),
                "online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Learner:
        learner = cls(int(state["dim"]), LearnerConfig.from_json(state["config"]), action_dim=int(state["action_dim"]))
        learner.online.load_state_dict(state["online"])
        learner.target.load_state_dict(state["target"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.updates = int(state["updates"])
        return learner
