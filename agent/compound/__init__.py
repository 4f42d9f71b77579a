"""Compound steps of a ranked search: sequences of single moves that pay only together, offered as
one step that the cost model scores like any single move.

- `register_tile`: a reduction's tile of R rows by W vectors kept in registers;
- `fused_nests`: a scope fused with the next ones, and the temporaries then inside it folded.

Each step is the single moves that make it, each played only where it is legal, so a step keeps the
meaning as they do, and the derivation it adds to replays move by move. None of them says which
step pays: every one that applies is offered, and the model chooses.

    for step in compound_steps(program, target):   # step.moves: single moves, in order
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from codegen.targets import Target
from dojo_ir import Program

from .fused_nests import Fusion, fused_nests
from .register_tile import Tile, register_tiles

__all__ = ["FUSION", "TILE", "Compound", "Fusion", "Tile", "compound_steps", "fused_nests", "register_tiles"]

TILE, FUSION = "register_tile", "fused_nests"  # the kinds of compound step, as a search explores by


class Compound(NamedTuple):
    text: str  # as a game's steps say it
    kind: str
    moves: tuple[str, ...]
    program: Program


def compound_steps(program: Program, target: Target) -> Iterator[Compound]:
    """Every compound step from `program` on `target`."""
    for tile, moves, after in register_tiles(program, target):
        yield Compound(str(tile), TILE, moves, after)
    for fusion, moves, after in fused_nests(program):
        yield Compound(str(fusion), FUSION, moves, after)
