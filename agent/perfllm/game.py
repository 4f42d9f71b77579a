"""The game as the agent sees it: a program, its legal moves, where they lead, what a program costs.

    moves = legal_moves(program, "native")     # every legal move a search for the target considers
    after = successors(program, moves)         # the program after each of them
    costs = Costs(start, evaluator)            # or Costs(start, lambda moves: seconds)
    seconds = costs(moves_from_start, program)

The legal moves are the searches' (`agent.legal`): `dojo_ir.moves.find`'s, less those the target
cannot use, with no hint of which move pays, so the agent learns that from the times alone (the
paper's section 4.3).

A cost is the median time in seconds of the program that some moves make from the start, +inf
when it failed or did not verify. `Costs` gives one interface to an `agent.evaluate.Evaluator`
(the searches' evaluator, which times each program once, logs it and stops at its budget by
raising BudgetExhausted) and to a plain function of the moves (a cost model for tests, or any
other), which it caches by program in the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from dojo_ir import Program
from dojo_ir.analysis import Analysis
from dojo_ir.moves import Move, apply
from dojo_ir.paths import without_comments

from ..evaluate import Evaluator, text_hash
from ..legal import allowed, legal_moves

__all__ = ["Cost", "Costs", "allowed", "kind", "legal_moves", "successors"]

Cost = Callable[[list[str]], float]


def kind(move: str) -> str:
    """The name of the move `move` writes out: `split_scope` for `split_scope(op=e, depth=1, factor=8)`."""
    return move.partition("(")[0]


def successors(program: Program, moves: Sequence[Move]) -> list[Program]:
    """The program after each of `moves` (all legal in `program`)."""
    analysis = Analysis(program)
    return [apply(program, move, analysis) for move in moves]


class Costs:
    """The cost of programs reached from `start`, each asked of `evaluate` at most once.

    `evaluate` is an Evaluator whose start is `start`, or a function of the moves from `start`."""

    def __init__(self, start: Program, evaluate: Evaluator | Cost):
        self.start = without_comments(start)
        if isinstance(evaluate, Evaluator) and text_hash(evaluate.start) != text_hash(self.start):
            raise ValueError("the evaluator times programs from another start than the agent's")
        self.evaluate = evaluate
        self._cache: dict[str, float] = {}

    def start_cost(self) -> float:
        """The start's time; ValueError when it failed or did not verify (a game has nothing to beat)."""
        cost = self([], self.start)
        if math.isinf(cost):
            raise ValueError("the starting program failed or did not verify, so it has no time to measure against")
        return cost

    def __call__(self, moves: Sequence[str], program: Program) -> float:
        """Seconds for `program`, which `moves` make from the start; +inf when it failed."""
        if isinstance(self.evaluate, Evaluator):
            return self.evaluate.evaluate(list(moves), program)
        key = text_hash(program)
        if key not in self._cache:
            cost = float(self.evaluate(list(moves)))
            self._cache[key] = cost if cost > 0 and not math.isnan(cost) else math.inf
        return self._cache[key]
