"""The moves a search for a target considers: every legal move (`dojo_ir.moves.find`) that the
target can use at all. No GPU mapping on a CPU, no threads or vectors on a GPU, no shared memory
outside a GPU; nothing else, so neither the searches nor the learned agent get a hint of which
move pays.

    legal_moves(program, "native")     # in find's fixed order
"""

from __future__ import annotations

from codegen.targets import Target, get_target
from dojo_ir import Program
from dojo_ir.analysis import Analysis
from dojo_ir.moves import Move, find

_GPU_ONLY = ("map_gpu",)
_CPU_ONLY = ("parallelize_scope", "vectorize_scope")


def allowed(target: Target, move: Move) -> bool:
    """Whether a search for `target` should consider `move`."""
    if target.language == "c":
        return move.name not in _GPU_ONLY and dict(move.args).get("location") != "shared"
    return move.name not in _CPU_ONLY


def legal_moves(program: Program, target: Target | str = "native") -> list[Move]:
    """Every legal move of `program` that `target` can use, in `find`'s fixed order."""
    facts = get_target(target) if isinstance(target, str) else target
    return find(program, Analysis(program), lambda m: allowed(facts, m))
