"""The agent as a search (`dojo tune --method agent`): best first by the learned Q.

    result = search(spec, Path("runs/agent"), evaluator)    # until the evaluator's budget is spent
    result.program, result.moves, result.time_s

With the max-Bellman target, Q(s, a) estimates the best speed-up over the start that playing a
at s leads to, in the same unit whatever the state (rewards are c / T, c the start's time). So the
Q-values of the moves out of every program measured so far can be compared, and the search
measures next the one program, anywhere in what it has met, that the agent rates highest (with
probability epsilon a random one instead, of a random kind): a move out of the best program when the agent believes
in it, a move out of an earlier one when that looks better. Each measurement then expands the new
program (its legal moves, embedded and rated), and the agent learns from it as in training, so its
ratings follow the kernel's own times (the paper's section 4.3 searches by training on the
kernel); every `RESCORE_EVERY` measurements the waiting moves are rated again with what it
learned. The checkpoint on disk is left as it was. No program is measured twice.

The search ends at `steps` measurements, when the evaluator's budget or time runs out (it raises
BudgetExhausted), when `should_stop()` says so (polled before each measurement), or when no
program met has a move left to a program not met.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from dojo_ir import Program
from dojo_ir.moves import apply

from ..evaluate import BudgetExhausted, Evaluator, text_hash
from .checkpoint import load_policy
from .embed import Embedding
from .game import Cost, Costs, kind, legal_moves, successors
from .learner import choose
from .play import PlayResult, Step
from .replay import ReplayBuffer, Transition

RESCORE_EVERY = 10  # measurements between two ratings of every waiting move by the learning agent


@dataclass
class _Expanded:
    """A measured program, its moves from the start, its legal moves, the keys and embeddings of
    the programs they lead to and the Q-values of its actions (index 0 is the program itself, the
    stop action, which a search never plays), and which of them the search has not met yet."""

    program: Program
    moves: tuple[str, ...]
    legal: list[str]
    keys: tuple[str, ...]
    vectors: torch.Tensor
    q: torch.Tensor
    waiting: set[int]


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
    start_cost = costs([], costs.start)
    if math.isinf(start_cost):
        raise ValueError("the starting program failed or did not verify, so it has no time to measure against")
    met: set[str] = set()

    def expand(node_program: Program, moves: tuple[str, ...]) -> _Expanded:
        legal = legal_moves(node_program, target)
        programs = [node_program, *successors(node_program, legal)]
        keys = tuple(text_hash(p) for p in programs)
        met.add(keys[0])
        vectors = embedder.embed_many(programs)
        return _Expanded(node_program, moves, [str(m) for m in legal], keys, vectors,
                         learner.q_values(vectors[0], vectors), set(range(1, len(keys))))

    frontier = [expand(costs.start, ())]
    best = (start_cost, costs.start, ())
    steps_taken: list[Step] = []
    ended = "steps"
    while steps is None or len(steps_taken) < steps:
        for node in frontier:
            node.waiting -= {i for i in node.waiting if node.keys[i] in met}
        waiting = [(node, sorted(node.waiting)) for node in frontier if node.waiting]
        open_ = [(node, i) for node, indices in waiting for i in indices]
        if not open_:
            ended = "dead end"
            break
        if should_stop is not None and should_stop():
            ended = "stopped"
            break
        rated = torch.cat([node.q[indices] for node, indices in waiting])
        parent, index = open_[choose(rated, epsilon, rng, [kind(node.legal[i - 1]) for node, i in open_])]
        move = parent.legal[index - 1]
        child_program = apply(parent.program, move)
        moves = (*parent.moves, move)
        try:
            cost = costs(list(moves), child_program)
        except BudgetExhausted:
            ended = "budget"
            break
        child = expand(child_program, moves)
        frontier.append(child)
        best = min(best, (cost, child_program, moves), key=lambda b: b[0])
        steps_taken.append(Step(len(steps_taken) + 1, move, None if math.isinf(cost) else cost, start_cost / cost,
                                best[0]))
        if on_step is not None:
            on_step(steps_taken[-1])
        if buffer is not None:
            transition = Transition(parent.keys[0], parent.keys, index, start_cost / cost, child.keys, False)
            learner.record(buffer, transition, {**_named(parent), **_named(child)})
            if len(steps_taken) % RESCORE_EVERY == 0:
                for node in frontier:
                    node.q = learner.q_values(node.vectors[0], node.vectors)
    return PlayResult(best[1], list(best[2]), None if math.isinf(best[0]) else best[0], start_cost, steps_taken,
                      ended)


def _named(node: _Expanded) -> dict[str, torch.Tensor]:
    return dict(zip(node.keys, node.vectors, strict=True))
