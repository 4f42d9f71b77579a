"""Experience replay (section 3.3): a bounded buffer of transitions, sampled uniformly.

A transition names programs by the key of their embedding rather than holding the vectors: a
state's successors are embedded once however many transitions mention them, and the buffer keeps
each vector for as long as a transition refers to it.

    buffer = ReplayBuffer(capacity=2000, seed=0)
    buffer.push(Transition(state, actions, taken, reward, next_state, next_actions, terminal), {key: vector, ...})
    batch = buffer.sample(32)
    buffer.vectors([t.state for t in batch])      # [32, dim]

The oldest transition goes first when the buffer is full. Sampling draws from its own
`random.Random(seed)`, so it is reproducible, and `state_dict` holds that generator's state
along with the transitions, so a buffer restored from a checkpoint samples what the original
would have.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Transition:
    """One step: at `state`, whose legal actions are `actions` (the keys of their vectors, see
    `agent.perfllm.actions`), the action `taken` (an index into `actions`) earned `reward` and
    led to `next_state`, whose legal actions `next_actions` are what the target of the Bellman
    update maximises over; a terminal transition (the stop action) has none. The whole list at
    `state` is kept because the dueling network's Q of one action depends on all of them."""

    state: str
    actions: tuple[str, ...]
    taken: int
    reward: float
    next_state: str
    next_actions: tuple[str, ...]
    terminal: bool

    def __post_init__(self) -> None:
        if not 0 <= self.taken < len(self.actions):
            raise ValueError(f"action {self.taken} is not one of the {len(self.actions)} legal actions")
        if not self.terminal and not self.next_actions:
            raise ValueError("a transition that does not end the episode needs the next state's actions")

    def keys(self) -> Iterable[str]:
        return (self.state, *self.actions, self.next_state, *self.next_actions)


class ReplayBuffer:
    def __init__(self, capacity: int, seed: int = 0):
        if capacity < 1:
            raise ValueError(f"a replay buffer holds at least 1 transition, not {capacity}")
        self.capacity = capacity
        self.rng = random.Random(seed)
        self._transitions: deque[Transition] = deque()
        self._vectors: dict[str, torch.Tensor] = {}
        self._references: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._transitions)

    def push(self, transition: Transition, vectors: Mapping[str, torch.Tensor]) -> None:
        """Store `transition`; `vectors` must hold the embedding of every key it names that the
        buffer does not hold yet. The oldest transition is dropped when the buffer is full."""
        missing = [key for key in transition.keys() if key not in self._vectors and key not in vectors]
        if missing:
            raise KeyError(f"no embedding for {len(missing)} of the transition's programs, e.g. {missing[0]}")
        if len(self._transitions) == self.capacity:
            self._forget(self._transitions.popleft())
        self._transitions.append(transition)
        for key in transition.keys():
            if key not in self._vectors:
                self._vectors[key] = vectors[key].detach().clone()
            self._references[key] += 1

    def _forget(self, transition: Transition) -> None:
        for key in transition.keys():
            self._references[key] -= 1
            if self._references[key] == 0:
                del self._references[key]
                del self._vectors[key]

    def sample(self, size: int) -> list[Transition]:
        """`size` transitions drawn uniformly with replacement."""
        if not self._transitions:
            raise ValueError("cannot sample an empty replay buffer")
        return [self._transitions[self.rng.randrange(len(self._transitions))] for _ in range(size)]

    def vectors(self, keys: Sequence[str]) -> torch.Tensor:
        """The embeddings of `keys`, as rows."""
        return torch.stack([self._vectors[key] for key in keys])

    @property
    def stored_vectors(self) -> int:
        return len(self._vectors)

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        keys = list(self._vectors)
        return {"capacity": self.capacity, "rng": self.rng.getstate(),
                "transitions": [(t.state, list(t.actions), t.taken, t.reward, t.next_state, list(t.next_actions),
                                 t.terminal) for t in self._transitions],
                "keys": keys, "vectors": [self._vectors[k] for k in keys]}  # states' and actions' sizes differ

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ReplayBuffer:
        buffer = cls(int(state["capacity"]))
        buffer.rng.setstate(state["rng"])
        vectors = dict(zip(state["keys"], state["vectors"], strict=True))
        for s, actions, taken, reward, next_state, next_actions, terminal in state["transitions"]:
            buffer.push(Transition(s, tuple(actions), int(taken), float(reward), next_state, tuple(next_actions),
                                   bool(terminal)), vectors)
        return buffer

