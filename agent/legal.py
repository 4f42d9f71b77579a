"""The moves a search for a target considers: every legal move (`dojo_ir.moves.find`) that the
target can use at all, as each move declares it (its `TARGETS`: no GPU mapping on a CPU, no threads
or vectors on a GPU, no shared memory outside a GPU); of the splits that leave a tail, only those by
a power of two; no staging for a scope that only copies the array. Nothing else, so neither the
searches nor the learned agent get a hint of which move pays.

Why the splits: the listing offers every factor from 2 to 16 besides the divisors and powers of
two, for the register tiles the heuristic pass sizes from the target (6 rows of 1024). Played at
random, a factor such as 7 or 13 is a tail nobody asked for, and it doubles the moves a program
offers (matmul's 51 to 102), which halves how often a search plays anything else and doubles what
the learned agent embeds at each state. Divisors and powers of two (vectors, cache lines, tiles)
leave 53. Likewise a staging for a scope that only copies the array (another staging's copy nest):
it copies the same elements twice, and the agent, greedy, once staged a staged copy three times.

    legal_moves(program, "native")     # in find's fixed order
"""

from __future__ import annotations

from codegen.targets import Target, get_target
from dojo_ir import Program
from dojo_ir.analysis import Analysis
from dojo_ir.moves import TARGETS, Move, find
from dojo_ir.moves.base import scope_of
from dojo_ir.tree import Access, walk_ops


def allowed(target: Target, move: Move) -> bool:
    """Whether a search for `target` should consider `move`: whether the move serves the target."""
    return TARGETS[move.name].serve(move, target.language)


def legal_moves(program: Program, target: Target | str = "native") -> list[Move]:
    """Every legal move of `program` that `target` can use, in `find`'s fixed order."""
    facts = get_target(target) if isinstance(target, str) else target
    analysis = Analysis(program)
    return find(program, analysis,
                lambda m: allowed(facts, m) and _searched_split(analysis, m) and _searched_staging(analysis, m))


def _searched_split(analysis: Analysis, move: Move) -> bool:
    """Whether `move`, when a split, is by a divisor of the scope or by a power of two."""
    if move.name != "split_scope":
        return True
    factor = move.arg("factor")
    return scope_of(analysis, move)[2].size % factor == 0 or factor & (factor - 1) == 0


def _searched_staging(analysis: Analysis, move: Move) -> bool:
    """Whether `move`, when a staging, stages for a scope that does more than copy the array:
    staging it for a copy nest (another staging's, most often) copies the same elements twice."""
    if move.name != "stage_reads":
        return True
    array = move.arg("buffer")
    return not all(op.assign == "=" and isinstance(op.value, Access) and op.value.array == array
                   for op, _ in walk_ops(scope_of(analysis, move)[2].body))
