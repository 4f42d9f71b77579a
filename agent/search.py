"""Searches over move sequences: random sampling and simulated annealing (section 4.2).

Two graphs (section 4.2.1):

- `edges`: the transformation graph itself. A state is a program (the moves that reached it);
  its neighbours are the programs one legal move away.
- `heuristic`: a state is a whole candidate sequence of moves, first the heuristic pass's. A
  neighbour changes one move (another place or factor of the same kind, or another legal move
  there), inserts a legal move or deletes one, anywhere in the sequence; the sequence is replayed
  from the start and a move that no longer applies is skipped.

Two methods (section 4.2.2):

- `random`: global random sampling over every program met so far. A parent is drawn with a
  probability that falls with its cost (its own runtime, so a child's cost is the runtime of its
  parent when it is picked), a random neighbour of it is evaluated and joins the pool.
- `sa`: simulated annealing with the runtime as the cost: a neighbour of the current state is
  accepted when faster, and when slower with probability exp(-delta / T), delta the relative
  slow-down log(new / current), T falling geometrically from T0 to T1 over the budget.

Everything random comes from one `random.Random(seed)`, and the legal moves are listed in a fixed
order, so a search is deterministic given its seed and its costs. That also makes `--resume`
cheap: the search retraces its steps through the evaluator's cache, which the log restored, and
pays only for what it had not evaluated yet.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from codegen.targets import Target
from dojo_ir.moves import Move, of_a_random_kind

from .evaluate import INF, BudgetExhausted, Evaluator, text_hash
from .legal import legal_moves
from .methods import GRAPHS, SEARCHES

T0, T1 = 0.2, 0.005  # simulated annealing: accept a 20% slow-down with probability 1/e at first
_TRIES_PER_EVALUATION = 300  # proposals in a row that meet only known programs before a search gives up
def _pick_move(rng: random.Random, legal: list[Move]) -> Move | None:
    """A random legal move, of a random kind (`of_a_random_kind`)."""
    return legal[of_a_random_kind(rng, [m.name for m in legal])] if legal else None


# -- the graphs ------------------------------------------------------------------------------


class EdgesGraph:
    """States are move sequences that all applied; a neighbour adds one legal move."""

    def __init__(self, evaluator: Evaluator, target: Target):
        self.evaluator, self.target = evaluator, target

    def initial(self) -> list[tuple[str, ...]]:
        return [()]

    def neighbour(self, rng: random.Random, state: tuple[str, ...]) -> tuple[str, ...] | None:
        program, _ = self.evaluator.program(state)
        move = _pick_move(rng, legal_moves(program, self.target))
        return None if move is None else state + (str(move),)


class HeuristicGraph:
    """States are candidate sequences; a neighbour changes, inserts or deletes one move."""

    def __init__(self, evaluator: Evaluator, target: Target):
        self.evaluator, self.target = evaluator, target

    def initial(self) -> list[tuple[str, ...]]:
        # imported here: this graph alone knows the hardware, and the searches that must not (the
        # edges graph's, the learned agent's) import this module
        from .passes import heuristic

        return [tuple(heuristic(self.evaluator.start, self.target)), ()]

    def neighbour(self, rng: random.Random, state: tuple[str, ...]) -> tuple[str, ...] | None:
        kind = rng.choice(("change", "insert", "delete") if state else ("insert",))
        position = rng.randrange(len(state) + (1 if kind == "insert" else 0))
        if kind == "delete":
            return state[:position] + state[position + 1:]
        before, _ = self.evaluator.program(state[:position])
        legal = legal_moves(before, self.target)
        if kind == "change":
            old = state[position]
            name = old.partition("(")[0]
            same = [m for m in legal if m.name == name and str(m) != old]
            move = rng.choice(same) if same and rng.random() < 0.7 else _pick_move(rng, legal)
            if move is None:
                return None
            return state[:position] + (str(move),) + state[position + 1:]
        move = _pick_move(rng, legal)
        return None if move is None else state[:position] + (str(move),) + state[position:]


def make_graph(name: str, evaluator: Evaluator, target: Target) -> EdgesGraph | HeuristicGraph:
    if name == "edges":
        return EdgesGraph(evaluator, target)
    if name == "heuristic":
        return HeuristicGraph(evaluator, target)
    raise ValueError(f"unknown graph `{name}`; expected {' or '.join(GRAPHS)}")


# -- the methods -----------------------------------------------------------------------------


def _evaluate(evaluator: Evaluator, moves: Sequence[str], met: set[str]) -> tuple[float, tuple[str, ...], bool]:
    """The cost of a candidate, the moves of it that applied (its canonical state), and whether
    this search met the program for the first time. A search counts its progress in programs it
    met, not in the evaluator's count, so that on resume it retraces its steps exactly."""
    program, applied = evaluator.program(moves)
    key = text_hash(program)
    cost = evaluator.evaluate(applied, program)
    new = key not in met
    met.add(key)
    return cost, tuple(applied), new


def parent_weights(costs: list[float]) -> list[float]:
    """Selection weights: (best / cost)^4, so a parent twice as slow is picked 16 times less often;
    failed programs (+inf) are never picked."""
    best = min(costs)
    if best == INF:
        return [1.0] * len(costs)
    return [(best / c) ** 4 if c < INF else 0.0 for c in costs]


def random_sampling(evaluator: Evaluator, graph: EdgesGraph | HeuristicGraph, seed: int) -> None:
    """Global random sampling over every program met so far, parents weighted by their cost."""
    rng = random.Random(seed)
    pool: list[tuple[tuple[str, ...], float]] = []
    met: set[str] = set()
    try:
        for state in graph.initial():
            cost, applied, new = _evaluate(evaluator, state, met)
            if new:
                pool.append((applied, cost))
        idle = 0
        while not evaluator.stopped() and idle < _TRIES_PER_EVALUATION:
            parent = rng.choices(pool, weights=parent_weights([c for _, c in pool]))[0][0]
            child = graph.neighbour(rng, parent)
            if child is None:
                idle += 1
                continue
            cost, applied, new = _evaluate(evaluator, child, met)
            idle = 0 if new else idle + 1
            if new:
                pool.append((applied, cost))
    except BudgetExhausted:
        pass


def simulated_annealing(evaluator: Evaluator, graph: EdgesGraph | HeuristicGraph, seed: int,
                        t0: float = T0, t1: float = T1) -> None:
    """Simulated annealing on the program's runtime."""
    rng = random.Random(seed)
    budget = max(1, evaluator.budget or 1000)
    met: set[str] = set()
    try:
        starts = [_evaluate(evaluator, state, met)[:2] for state in graph.initial()]
        current_cost, current = min(starts, key=lambda s: s[0])
        best_cost, best = current_cost, current
        idle = 0
        while not evaluator.stopped() and idle < _TRIES_PER_EVALUATION:
            progress = min(1.0, (len(met) - 1) / budget)
            temperature = t0 * (t1 / t0) ** progress
            child = graph.neighbour(rng, current)
            if child is None:
                # a dead end (no legal move): go back to the best program met
                current, current_cost = best, best_cost
                idle += 1
                continue
            cost, applied, new = _evaluate(evaluator, child, met)
            idle = 0 if new else idle + 1
            if cost == INF:
                continue
            delta = math.log(cost / current_cost) if current_cost < INF else -INF
            if delta <= 0 or rng.random() < math.exp(-delta / temperature):
                current, current_cost = applied, cost
            if cost < best_cost:
                best, best_cost = applied, cost
    except BudgetExhausted:
        pass


METHODS = dict(zip(SEARCHES, (random_sampling, simulated_annealing), strict=True))
