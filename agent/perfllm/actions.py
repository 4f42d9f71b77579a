"""What the agent sees: a program's vector, and a vector for each of its actions.

    seen = observe(program, embedder, "native")
    seen.state, seen.vectors[seen.state]            # the state's key and E(program), [dim]
    seen.actions                                    # the actions' keys: stop first, then each legal move
    seen.action_vectors()                           # their vectors, [actions, 2 * dim]
    seen.moves[i - 1], seen.programs[i]             # action i > 0: the move and the program it leads to

The state is E(program), the canonical text read by the transformer (`embed`). An action is what
the move is and what it does to the text (`describe` writes both out):

    [ E(the move as written) ; mean of E(each line it adds) - mean of E(each line it removes) ]

    vectorize_scope(op=m#1, depth=1)
    -48 16 m[{0}*16+{1}] = -inf
    +48 16:v m[{0}*16+{1}] = -inf

Why not E(program after the move), as the paper's [E(s); E(s')]: the text embedding is a mean over
a program's tokens and a move changes a handful of them (`:v` on one scope, `8` for `16`), so the
embeddings of a program and of its successors differ in their last few percent, and the Q-network
has to dig the move out of that difference. The move's own words (`parallelize_scope`, a factor)
and the difference of the lines it touches are the move itself, in text a small model reads well.
Programs one move apart get action vectors as far apart as their moves are different
(tests/test_perfllm_actions.py measures both).

Why per line rather than the whole description at once: the transformer is the agent's cost (tens
of milliseconds a text on a core), and lines and moves repeat far more than descriptions do. A
move that leaves a nest alone leaves its lines, and the moves legal in it, as they were, so the next
state's actions are mostly texts the embedder's cache already holds.

The stop action is [E(`STOP`); 0].
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import torch

from dojo_ir import Program, to_text
from dojo_ir.paths import without_comments

from ..evaluate import text_hash, text_key
from .embed import Embedding
from .game import legal_moves, successors

STOP = "stop: keep this program"
_MAX_CHANGED_LINES = 12  # a fusion rewrites a nest; its first lines say what it did


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines of `before` that a move removed and the lines of `after` it added (canonical texts),
    at most `_MAX_CHANGED_LINES` in all."""
    removed, added = [], []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith(("+++", "---")) or line[:1] not in "+-":
            continue
        if len(removed) + len(added) == _MAX_CHANGED_LINES:
            break
        (added if line[0] == "+" else removed).append(line[1:])
    return removed, added


def describe(move: str, before: str, after: str) -> str:
    """The action that plays `move` on the program `before` and makes `after`, as text: the move,
    then the lines it removes (`-`) and adds (`+`)."""
    return _written(move, *changed_lines(before, after))


def _written(move: str, removed: list[str], added: list[str]) -> str:
    return "\n".join([move, *(f"-{line}" for line in removed), *(f"+{line}" for line in added)])


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
    and of every action, the texts they need embedded in one batch."""
    program = without_comments(program)
    legal = legal_moves(program, target)
    moves = [str(m) for m in legal]
    programs = [program, *successors(program, legal)]
    texts = [to_text(p) for p in programs]
    changes = [changed_lines(texts[0], text) for text in texts[1:]]
    pieces = list(dict.fromkeys([texts[0], STOP, *moves, *(line for lines in changes for part in lines
                                                            for line in part)]))
    embedded = dict(zip(pieces, embedder.embed_many(pieces), strict=True))

    def mean(lines: list[str]) -> torch.Tensor:
        return torch.stack([embedded[line] for line in lines]).mean(dim=0) if lines else torch.zeros(embedder.dim)

    state = text_hash(program)
    vectors = {state: embedded[texts[0]], text_key(STOP): torch.cat([embedded[STOP], torch.zeros(embedder.dim)])}
    actions = [text_key(STOP)]
    for move, (removed, added) in zip(moves, changes, strict=True):
        key = text_key(_written(move, removed, added))
        vectors[key] = torch.cat([embedded[move], mean(added) - mean(removed)])
        actions.append(key)
    return Observation(program, state, moves, programs, tuple(text_hash(p) for p in programs), tuple(actions),
                       vectors)
