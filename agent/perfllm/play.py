"""Playing: the agent takes a program one legal move at a time, measuring each, keeping the best.

    result = continue_(program, Path("runs/agent"), 20, evaluator)   # a trained agent, 20 moves
    result.program, result.moves, result.time_s     # the best program met, its moves, its time
    result.steps                                    # every step: the move and the time after it

At each step the agent observes the program (`agent.perfllm.actions`: E(program) and the
embedded description of every legal move and of stopping), scores the actions with its Q-network,
and plays the best (or, with probability epsilon, a random one, of a random kind). It never goes
back to a program it has met in the same game: the programs' times do not change, so a cycle
would only spend steps. The game ends after `max_steps` moves, when the agent stops, when no
unmet program is one move away, or when `should_stop()` says so (polled before each step) or the
evaluator's budget runs out.

`play` is the loop that `continue_` and training share: training passes `learn`, which receives
every transition with the embeddings it names. The reward of a move is c / T(after) and that of
stopping c / T(s), with c the start's time, so that rewards are speed-ups over the start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dojo_ir import Program

from ..evaluate import BudgetExhausted, Evaluator, text_hash
from .actions import observe
from .checkpoint import load_policy
from .embed import Embedding
from .game import Cost, Costs, kind
from .learner import Learner
from .replay import Transition

Learn = Callable[[Transition, dict[str, torch.Tensor]], None]


@dataclass(frozen=True)
class Step:
    """One step: `move` (None when the agent stopped), the time of the program after it (None when
    it failed), its reward, and the best time so far."""

    index: int
    move: str | None
    time_s: float | None
    reward: float
    best_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "move": self.move, "time_s": self.time_s, "reward": self.reward,
                "best_s": self.best_s}


@dataclass(frozen=True)
class PlayResult:
    """The best program met (the start when nothing beat it), the moves that make it from the
    start, its time and the start's (seconds, None when failed), every step, and why the game
    ended: `steps`, `agent` (it stopped), `dead end`, `stopped` (should_stop) or `budget`."""

    program: Program
    moves: list[str]
    time_s: float | None
    start_s: float | None
    steps: list[Step]
    ended: str

    @property
    def speedup(self) -> float | None:
        if self.time_s is None or self.start_s is None or self.time_s <= 0:
            return None
        return self.start_s / self.time_s

    def to_json(self) -> dict[str, Any]:
        return {"moves": self.moves, "time_s": self.time_s, "start_s": self.start_s, "speedup": self.speedup,
                "ended": self.ended, "steps": [step.to_json() for step in self.steps]}


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def play(learner: Learner, embedder: Embedding, costs: Costs, *, max_steps: int, epsilon: float,
         rng: random.Random, target: str = "native", may_stop: bool = True, learn: Learn | None = None,
         on_step: Callable[[Step], None] | None = None,
         should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Play from `costs.start` for at most `max_steps` moves; see the module's docstring. With
    `may_stop=False` the agent plays on until `max_steps` or a dead end, whatever it thinks of
    stopping."""
    program, moves = costs.start, ()
    start_cost = costs.start_cost()
    best = (start_cost, program, moves)
    met = {text_hash(program)}
    steps: list[Step] = []

    def report(move: str | None, cost: float) -> None:
        steps.append(Step(len(steps) + 1, move, _finite(cost), start_cost / cost, _finite(best[0])))
        if on_step is not None:
            on_step(steps[-1])

    ended = "steps"
    seen = observe(program, embedder, target)
    for index in range(1, max_steps + 1):
        if should_stop is not None and should_stop():
            ended = "stopped"
            break
        unmet = [i for i in range(1, len(seen.keys)) if seen.keys[i] not in met]
        if not unmet:
            ended = "dead end"
            break
        open_ = [0, *unmet] if may_stop else unmet
        kinds = [kind(seen.moves[i - 1]) if i else "stop" for i in open_]
        choice = open_[learner.act(seen.state_vector, seen.action_vectors(open_), epsilon, rng, kinds)]
        if choice == 0:
            cost = costs(moves, program)
            if learn is not None:
                learn(Transition(seen.state, seen.actions, 0, start_cost / cost, seen.state, (), True), seen.vectors)
            report(None, cost)
            ended = "agent"
            break
        move, after = seen.moves[choice - 1], seen.programs[choice]
        try:
            cost = costs([*moves, move], after)
        except BudgetExhausted:
            ended = "budget"
            break
        program, moves = after, (*moves, move)
        met.add(seen.keys[choice])
        best = min(best, (cost, program, moves), key=lambda b: b[0])
        report(move, cost)
        # the last program's observation is needed only as the next state of a transition
        following = observe(program, embedder, target) if index < max_steps or learn is not None else None
        if learn is not None:
            learn(Transition(seen.state, seen.actions, choice, start_cost / cost, following.state, following.actions,
                             False), {**seen.vectors, **following.vectors})
        seen = following
    return PlayResult(best[1], list(best[2]), _finite(best[0]), _finite(start_cost), steps, ended)


def continue_(program: Program, checkpoint: Path, steps: int, evaluate: Evaluator | Cost, *,
              target: str = "native", epsilon: float = 0.0, seed: int = 0, may_stop: bool = True,
              embedder: Embedding | None = None, on_step: Callable[[Step], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Let the agent trained in `checkpoint` (a training directory or its policy.pt) play up to
    `steps` moves from `program`, greedily (or epsilon-greedily, from `random.Random(seed)`),
    every program timed by `evaluate`: an Evaluator whose start is `program`, or a function of the
    moves from `program` to seconds. `embedder` defaults to the model the agent was trained with.
    The result's moves are from `program`; recording them in a derivation is the caller's."""
    learner, embedder = load_policy(checkpoint, embedder)
    return play(learner, embedder, Costs(program, evaluate), max_steps=steps, epsilon=epsilon,
                rng=random.Random(seed), target=target, may_stop=may_stop, on_step=on_step, should_stop=should_stop)
