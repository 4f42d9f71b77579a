"""The race of `dojo model tune --method auto`: which method gets a kernel's next round.

The learned agent continuing the heuristic pass's program took 0.74-0.96 of simulated annealing's
time on the held-out kernels at 40 evaluations (bench/results/agent_heldout.md), but it was
trained on kernels unlike many of a model's, and which search finds more on a kernel shows only by
searching it. So each contender gets a round of each kernel, and then the kernel's rounds go to
whichever found the faster program, a greedy two-armed bandit: one that fell behind gets rounds
again only when the leader runs out of programs. A race costs one round of the loser per kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Entrant:
    """One method's standing on one kernel: the evaluations its log holds after its start (those
    it inherited from the heuristic pass included), its best time, and whether its search ran out
    of programs. Resumed, a round asks for `logged` + its grant, and the search retraces the rest."""

    method: str
    logged: int = 0
    best_s: float | None = None
    rounds: int = 0
    exhausted: bool = False

    def after_round(self, logged: int, best_s: float | None) -> Entrant:
        best = min((t for t in (self.best_s, best_s) if t is not None), default=None)
        return replace(self, logged=logged, best_s=best, rounds=self.rounds + 1, exhausted=logged == self.logged)


def next_entrant(entrants: Sequence[Entrant]) -> int:
    """The position of the method to give a kernel's next round: the first that has had none, then
    the one whose best is fastest (the earlier on a tie), among those with programs left."""
    alive = [i for i, entrant in enumerate(entrants) if not entrant.exhausted]
    untried = [i for i in alive if entrants[i].rounds == 0]
    if untried:
        return untried[0]
    return min(alive, key=lambda i: (entrants[i].best_s if entrants[i].best_s is not None else math.inf, i))
