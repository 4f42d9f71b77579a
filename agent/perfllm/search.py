"""The agent as a search (`dojo tune --method agent`): random sampling's parents, the agent's moves.

    result = search(spec, Path("runs/agent"), evaluator)    # until the evaluator's budget is spent
    result.program, result.moves, result.time_s

The search keeps every program it has measured. As random sampling does (`agent.search`), it draws
the next parent from all of them with a weight that falls with its measured time, (best / time)^4;
then the agent picks the move out of that parent: the one it rates highest among those that lead to
a program not met yet and are of a kind not played from that parent since it last played every
kind (with probability epsilon a random one, of a random kind). The new program is measured and
joins the pool, and the agent learns from the time as in training (the paper's section 4.3
searches by training on the kernel), so its ratings follow the kernel's own times. The checkpoint
on disk is left as it was.

Why parents by measured time rather than best first by Q over every program met (what this search
did before): Q is a prediction, and on a kernel the agent never saw a wrong one compounds. Ranking
every waiting move of every program by one Q sent the search back again and again to moves much
like those it had measured, and on three of four held-out kernels it stopped improving after
about 50 evaluations. Parents drawn by their times keep the search on the programs that are
actually fast and still visit the others, whatever the agent believes; its Q only has to order the
moves of one program, the question it was trained on. An agent that knows nothing is then random
sampling with a fixed order of moves; one that knows something beats it.

Why a kind at a time: a program has a dozen split factors for each scope and the agent rates them
alike, so the best move not met yet was, again and again, the next split of the same scope (41%
of the measurements on the held-out swiglu, against 9% for random sampling). Going through the
kinds in the agent's order, best first, spends those measurements on the other kinds' best moves.

The search ends at `steps` measurements, when the evaluator's budget or time runs out (it raises
BudgetExhausted), when `should_stop()` says so (polled before each measurement), or when no
program met has a move left to a program not met.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dojo_ir import Program

from ..evaluate import BudgetExhausted, Evaluator
from ..search import parent_weights
from .actions import Observation, observe
from .checkpoint import load_policy
from .embed import Embedding
from .game import Cost, Costs, kind
from .learner import Learner, choose
from .play import PlayResult, Step
from .replay import ReplayBuffer, Transition


@dataclass
class _Member:
    """A measured program of the pool: how it was reached, its time, what the agent sees of it, and
    the kinds of move the search has played from it since it last played every kind."""

    moves: tuple[str, ...]
    cost: float
    seen: Observation
    played: set[str] = field(default_factory=set)

    def next_move(self, met: set[str], learner: Learner, epsilon: float, rng: random.Random) -> int:
        """The action to play from this program: among the moves to programs not met, and of a
        kind not played from it since it last played them all, the one the agent rates highest
        (with probability epsilon a random one, of a random kind)."""
        unmet = [i for i in range(1, len(self.seen.keys)) if self.seen.keys[i] not in met]
        kinds = [kind(self.seen.moves[i - 1]) for i in unmet]
        if set(kinds) <= self.played:
            self.played.clear()
        fresh = [(i, k) for i, k in zip(unmet, kinds, strict=True) if k not in self.played]
        rated = learner.q_values(self.seen.state_vector, self.seen.action_vectors([i for i, _ in fresh]))
        index, chosen = fresh[choose(rated, epsilon, rng, [k for _, k in fresh])]
        self.played.add(chosen)
        return index


def search(program: Program, checkpoint: Path, evaluate: Evaluator | Cost, *, steps: int | None = None,
           epsilon: float = 0.1, learn: bool = True, target: str = "native", seed: int = 0,
           embedder: Embedding | None = None, on_step: Callable[[Step], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Search from `program` with the agent of `checkpoint`; see the module's docstring. Every
    program is timed by `evaluate` (an Evaluator whose start is `program`, or a function of the
    moves from `program`); the result is the best program met."""
    learner, embedder = load_policy(checkpoint, embedder)
    costs = Costs(program, evaluate)
    rng = random.Random(seed)
    buffer = ReplayBuffer(learner.config.replay_capacity, seed) if learn else None
    start_cost = costs.start_cost()
    start = observe(costs.start, embedder, target)
    pool = [_Member((), start_cost, start)]
    met = {start.state}
    best = (start_cost, costs.start, ())
    steps_taken: list[Step] = []
    ended = "steps"
    while steps is None or len(steps_taken) < steps:
        if should_stop is not None and should_stop():
            ended = "stopped"
            break
        open_pool = [m for m in pool if any(key not in met for key in m.seen.keys[1:])]
        if not open_pool:
            ended = "dead end"
            break
        parent = rng.choices(open_pool, weights=parent_weights([m.cost for m in open_pool]))[0]
        seen = parent.seen
        index = parent.next_move(met, learner, epsilon, rng)
        move, child_program = seen.moves[index - 1], seen.programs[index]
        moves = (*parent.moves, move)
        try:
            cost = costs(list(moves), child_program)
        except BudgetExhausted:
            ended = "budget"
            break
        met.add(seen.keys[index])
        child = observe(child_program, embedder, target)
        if not math.isinf(cost):
            pool.append(_Member(moves, cost, child))
        best = min(best, (cost, child_program, moves), key=lambda b: b[0])
        steps_taken.append(Step(len(steps_taken) + 1, move, None if math.isinf(cost) else cost, start_cost / cost,
                                best[0]))
        if on_step is not None:
            on_step(steps_taken[-1])
        if buffer is not None:
            transition = Transition(seen.state, seen.actions, index, start_cost / cost, child.state, child.actions,
                                    False)
            learner.record(buffer, transition, {**seen.vectors, **child.vectors})
    return PlayResult(best[1], list(best[2]), None if math.isinf(best[0]) else best[0], start_cost, steps_taken,
                      ended)
