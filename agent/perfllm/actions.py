"""What the agent sees: a program's vector, and a vector for each of its actions.

    seen = observe(program, embedder, "native")
    seen.state, seen.vectors[seen.state]            # the state's key and E(program)
    seen.actions                                    # the actions' keys: stop first, then each legal move
    seen.moves[i - 1], seen.programs[i]             # action i > 0: the move and the program it leads to

The state is E(program), the canonical text read by the transformer (`embed`). An action is the
embedding of its *description*: the move as written, then the lines of the program it removes and
adds, as a diff (`describe`). Why not E(program after the move), as the paper's [E(s); E(s')]:
the text embedding is a mean over a program's tokens, and a move changes a handful of them (`:v`
on one scope, `8` for `16`), so the embeddings of a program and of its successors differ in
their last few percent and the Q-network has to dig the move out of that difference. A diff is the
move itself, in a few words a small model reads well: `parallelize_scope`, `:p` on a scope of
4096, a scope split by 8. Programs one move apart get action vectors as far apart as their moves
are different (tests/test_perfllm_actions.py measures both).

It is cheaper too: a state costs its own embedding and one short text per move, and the
descriptions of the moves that a move leaves alone are the same texts at the next state, which
the embedder's cache already holds; the successors' whole texts are never embedded.

The stop action's description is the fixed text `STOP`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import torch

from dojo_ir import Program, to_text
from dojo_ir.derivation import without_comments
from dojo_ir.moves import Analysis, apply

from ..evaluate import text_hash
from ..legal import legal_moves
from .embed import Embedding, text_key

STOP = "stop: keep this program"
_MAX_CHANGED_LINES = 12  # a fusion rewrites a nest; its first lines say what it did


def describe(move: str, before: str, after: str) -> str:
    """The text of the action that plays `move` on the program `before` (canonical text) and makes
    `after`: the move, then its removed lines (`-`) and its added lines (`+`), at most
    `_MAX_CHANGED_LINES` of them."""
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return "\n".join([move, *changed[:_MAX_CHANGED_LINES]])


@dataclass(frozen=True)
class Observation:
    """A program as the agent sees it; see the module's docstring. `keys[i]` is the text hash of
    the program action i leads to (`keys[0]`, the stop action's, is the program's own)."""

    program: Program
    state: str
    moves: list[str]
    programs: list[Program]
    keys: tuple[str, ...]
    actions: tuple[str, ...]
    vectors: dict[str, torch.Tensor]

    @property
    def state_vector(self) -> torch.Tensor:
        return self.vectors[self.state]

    def action_vectors(self, indices: list[int] | None = None) -> torch.Tensor:
        """The rows of the actions `indices` (default: all), in that order."""
        chosen = self.actions if indices is None else [self.actions[i] for i in indices]
        return torch.stack([self.vectors[key] for key in chosen])


def observe(program: Program, embedder: Embedding, target: str = "native") -> Observation:
    """`program`, its legal moves for `target` and where they lead, and the vectors of the state
    and of every action, embedded in one batch."""
    program = without_comments(program)
    analysis = Analysis(program)
    moves = legal_moves(program, target)
    programs = [program, *(apply(program, move, analysis) for move in moves)]
    texts = [to_text(p) for p in programs]
    descriptions = [STOP, *(describe(str(m), texts[0], t) for m, t in zip(moves, texts[1:], strict=True))]
    state = text_hash(program)
    actions = tuple(text_key(d) for d in descriptions)
    unique = dict(zip(actions, descriptions, strict=True))
    rows = embedder.embed_many([texts[0], *unique.values()])
    vectors = {state: rows[0], **dict(zip(unique, rows[1:], strict=True))}
    return Observation(program, state, [str(m) for m in moves], programs, tuple(text_hash(p) for p in programs),
                       actions, vectors)
