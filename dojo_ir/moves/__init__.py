"""The moves: atomic, located transformations that never change a kernel's
meaning.

Each kind of move is one module with
- `NAME` and `TITLE` (what the editor shows),
- `ARGS`: its arguments, declared (see `base.Param`), which `parse_move` checks
  and puts in order,
- `TARGETS`: the targets it serves (see `base.Targets`),
- `candidates(analysis)`: every location where the move might apply,
- `why_not(analysis, at)`: None if the move is legal there, else the reason;
  `at` is the move with the nodes its arguments name (`base.Resolved`),
  resolved once by `base.resolve`,
- `rewrite(analysis, at)`: the new program (only called when legal),
- `EXAMPLES` (before, move, after) and `NOT_APPLICABLE` (before, move): its
  specification, run as its tests.

`find` lists every legal move, which is what the editor's quick-fixes and the
agent's action mask are made of; `apply` applies one, or says why it cannot.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

from ..analysis import Analysis
from ..errors import NOWHERE
from ..tree import Program
from .base import IllegalMove, Move, Param, Targets, check_args, move_lines, read_move, resolve


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
DECLARED: dict[str, tuple[Param, ...]] = {name: kind.ARGS for name, kind in KINDS.items()}
TARGETS: dict[str, Targets] = {name: kind.TARGETS for name, kind in KINDS.items()}


def parse_move(text: str) -> Move:
    """`name(key=value, ...)` to a Move, checked against the move's declared
    arguments and with them in the declared order; IllegalMove otherwise, at
    the culprit's column in `text`."""
    return read_move(text, DECLARED)


def _kind(move: Move | str) -> tuple[ModuleType, Move]:
    """The module of a move, and the move, checked against its declaration."""
    if isinstance(move, str):
        move = parse_move(move)
    kind = KINDS.get(move.name)
    if kind is None:
        raise IllegalMove.at(NOWHERE, f"unknown move `{move.name}`; the moves are {', '.join(sorted(KINDS))}", "move")
    check_args(move, kind.ARGS)
    return kind, move


def _candidates(a: Analysis, kind: ModuleType) -> list[Move]:
    """`kind.candidates(a)`, remembered (the editor filters them per line)."""
    key = ("candidates", kind.NAME)
    if key not in a.memo:
        a.memo[key] = list(kind.candidates(a))
    return a.memo[key]


def _legal(a: Analysis, kind: ModuleType, move: Move) -> bool:
    """Whether `kind` allows `move` here; remembered, as the editor asks again
    for the moves of the scopes around each line."""
    key = ("legal", move)
    if key not in a.memo:
        a.memo[key] = kind.why_not(a, resolve(a, move, kind.ARGS)) is None
    return a.memo[key]


def find(program: Program, analysis: Analysis | None = None, where: Callable[[Move], bool] | None = None) -> list[Move]:
    """Every legal move in `program`, grouped by kind, in tree order; with
    `where`, only those it keeps (asked before the costly legality check, so
    the editor pays only for the moves at the cursor)."""
    return list(legal_moves(analysis or Analysis(program), where))


def legal_moves(a: Analysis, where: Callable[[Move], bool] | None = None,
                order: Callable[[Move], Any] | None = None) -> Iterator[Move]:
    """`find`'s moves one at a time, as each is proved legal; with `order`, the
    candidates sorted by it first, so that a caller who stops early (the
    editor, answering within its time) has the ones it wanted most."""
    placed = [(kind, m) for kind in KINDS.values() for m in _candidates(a, kind) if where is None or where(m)]
    if order is not None:
        placed.sort(key=lambda kind_move: order(kind_move[1]))
    return (m for kind, m in placed if _legal(a, kind, m))


def why_not(program: Program, move: Move | str, analysis: Analysis | None = None) -> str | None:
    """None if `move` is legal in `program`, else the reason in words (also
    for a move that is malformed: an unknown argument, a value out of range)."""
    try:
        kind, move = _kind(move)
        a = analysis or Analysis(program)
        return kind.why_not(a, resolve(a, move, kind.ARGS))
    except IllegalMove as error:
        return error.diagnostics[0].message


def apply(program: Program, move: Move | str, analysis: Analysis | None = None) -> Program:
    """`program` after `move`, or IllegalMove saying why it is malformed or not legal."""
    kind, move = _kind(move)
    a = analysis or Analysis(program)
    at = resolve(a, move, kind.ARGS)
    reason = kind.why_not(a, at)
    if reason is not None:
        raise IllegalMove.at(program.span or NOWHERE, f"`{move}` is not legal here: {reason}", move.name)
    return kind.rewrite(a, at)


def of_a_random_kind(rng: random.Random, kinds: Sequence[str]) -> int:
    """The index of a random entry of `kinds`, the names of some moves, drawn a kind first and
    then a place: drawn uniformly, the kinds with many places (a split's factors) crowd out the
    others. The fuzzer, the searches and the agent's exploration all draw so."""
    kind = rng.choice(sorted(set(kinds)))
    return rng.choice([i for i, k in enumerate(kinds) if k == kind])


__all__ = ["DECLARED", "KINDS", "TARGETS", "IllegalMove", "Move", "Param", "Targets", "apply", "find", "legal_moves",
           "move_lines", "of_a_random_kind", "parse_move", "why_not"]
