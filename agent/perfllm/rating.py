"""The agent's rating of a program's moves, for a person choosing among them (the editor's quick-fixes).

    rater = Rater()                                  # the shipped agent, or Rater(Path("runs/agent"))
    rater.rate(program, moves)                       # [predicted speed-up of each move over `program`]
    rater.rate_all(program)                          # {move: its predicted speed-up}, every legal move

With the max-Bellman target, Q(s, a) estimates the best speed-up over the start of a game that
playing a at s leads to, and Q(s, stop) the speed-up of s itself. A program a person is editing is
the start of its own game, so the rating of a move is Q(s, a) / Q(s, stop): how much faster than
`program` the agent expects the best program through that move to be. Ratings only order moves
and hint at their worth; they are predictions, never measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dojo_ir import Program
from dojo_ir.moves import Move

from .actions import observe
from .checkpoint import SHIPPED, load_policy
from .embed import Embedding


class Rater:
    """The agent of `checkpoint` (a training directory or a policy file), loaded once, rating moves."""

    def __init__(self, checkpoint: Path = SHIPPED, embedder: Embedding | None = None, target: str = "native"):
        self.learner, self.embedder = load_policy(checkpoint, embedder)
        self.target = target

    def rate(self, program: Program, moves: Sequence[Move | str]) -> list[float]:
        """The predicted speed-up over `program` of each of `moves`, legal moves of `program` for
        the rater's target (ValueError naming one that is not)."""
        if not moves:
            return []
        rated = self.rate_all(program)
        missing = [str(m) for m in moves if str(m) not in rated]
        if missing:
            raise ValueError(f"{missing[0]} is not a legal move of {program.name} for {self.target}")
        return [rated[str(m)] for m in moves]

    def rate_all(self, program: Program) -> dict[str, float]:
        """The predicted speed-up over `program` of each of its legal moves for the rater's target."""
        seen = observe(program, self.embedder, self.target)
        q = self.learner.q_values(seen.state_vector, seen.action_vectors())
        stay = max(float(q[0]), 1e-6)
        return {move: max(0.0, float(value)) / stay for move, value in zip(seen.moves, q[1:], strict=True)}
