"""The moves: atomic, located transformations that never change a kernel's
meaning.

Each kind of move is one module with
- `NAME` and `TITLE` (what the editor shows),
- `candidates(analysis)`: every location where the move might apply,
- `why_not(analysis, move)`: None if the move is legal there, else the reason,
- `rewrite(analysis, move)`: the new program (only called when legal),
- `EXAMPLES` (before, move, after) and `NOT_APPLICABLE` (before, move): its
  specification, run as its tests.

`find` lists every legal move, which is what the editor's quick-fixes and the
agent's action mask are made of; `apply` applies one, or says why it cannot.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable, Sequence
from types import ModuleType

from ..tree import Program
from .base import NOWHERE, Analysis, IllegalMove, Move, parse_move


def _discover() -> dict[str, ModuleType]:
    """Every module of this package that defines a move (it has `NAME`)."""
    kinds = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "NAME"):
            kinds[module.NAME] = module
    return kinds


KINDS: dict[str, ModuleType] = _discover()


def _kind(move: Move) -> ModuleType:
    kind = KINDS.get(move.name)
    if kind is None:
        raise IllegalMove.at(NOWHERE, f"unknown move `{move.name}`; the moves are {', '.join(sorted(KINDS))}", "move")
    return kind


def find(program: Program, analysis: Analysis | None = None, where: Callable[[Move], bool] | None = None) -> list[Move]:
    """Every legal move in `program`, grouped by kind, in tree order; with
    `where`, only those it keeps (asked before the costly legality check, so
    the editor pays only for the moves at the cursor)."""
    a = analysis or Analysis(program)
    return [m for kind in KINDS.values() for m in a.candidates(kind)
            if (where is None or where(m)) and a.legal(kind, m)]


def why_not(program: Program, move: Move | str, analysis: Analysis | None = None) -> str | None:
    """None if `move` is legal in `program`, else the reason in words."""
    move = parse_move(move) if isinstance(move, str) else move
    try:
        return _kind(move).why_not(analysis or Analysis(program), move)
    except IllegalMove as error:
        return error.diagnostics[0].message


def apply(program: Program, move: Move | str, analysis: Analysis | None = None) -> Program:
    """`program` after `move`, or IllegalMove saying why it is not legal."""
    move = parse_move(move) if isinstance(move, str) else move
    kind = _kind(move)
    a = analysis or Analysis(program)
    reason = kind.why_not(a, move)
    if reason is not None:
        raise IllegalMove.at(program.span or NOWHERE, f"`{move}` is not legal here: {reason}", move.name)
    return kind.rewrite(a, move)


def of_a_random_kind(rng: random.Random, kinds: Sequence[str]) -> int:
    """The index of a random entry of `kinds`, the names of some moves, drawn a kind first and
    then a place: drawn uniformly, the kinds with many places (a split's factors) crowd out the
    others. The fuzzer, the searches and the agent's exploration all draw so."""
    kind = rng.choice(sorted(set(kinds)))
    return rng.choice([i for i, k in enumerate(kinds) if k == kind])


__all__ = ["KINDS", "Analysis", "IllegalMove", "Move", "apply", "find", "of_a_random_kind", "parse_move", "why_not"]
