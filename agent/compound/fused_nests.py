"""Fused nests as one step of a ranked search: a scope joined with every next sibling that it can
fuse with, and the temporaries that then live wholly inside it folded to what one iteration needs.

A temporary between two loop nests, an input padded for a convolution or a product kept to be
transposed, goes to memory and back between them. Fusing the nests alone changes little: the
temporary is as large as before, and its lines leave the cache between producer and consumer
all the same. What pays is the pair, fusion and then `reuse_dims` on each dimension the fused
scope tells apart, so that one iteration's slice, a block of channels, stays in the first-level
cache (ShuffleNet's depthwise convolution: its padded input and its product fused into one scope of
8 blocks of channels, 54 KB and 12 KB a block rather than 430 KB and 100 KB). Each join alone is a
single move the search already offers; the folds become legal only after the last join that
brings the temporary's consumer in, so a search one move deeper a batch would value programs that
are no faster on the way.

Nothing here says which fusion pays: every scope that can fuse with the one after it is offered,
joined with as many of the next as stay legal, and the model chooses. A folded temporary goes to the
stack when it is no larger than the stack's bound for folded buffers (`FOLDED_STACK_BYTES`, a limit
of the stack rather than a choice of schedule): a thread's stack copy is what lets the fused scope
run in parallel later.

    for fusion, moves, program in fused_nests(program):   # moves: single moves, in order
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dojo_ir import Program
from dojo_ir.paths import TreePath, iter_paths
from dojo_ir.tree import Scope

from ..passes.state import State, to_stack


@dataclass(frozen=True)
class Fusion:
    """The scope at `depth` around `label` joined with the `joined` scopes after it; `folded`: the
    temporaries folded after, each with the dimensions folded."""

    label: str
    depth: int
    joined: int
    folded: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __str__(self) -> str:
        folds = "".join(f", {name} folded along dim {', '.join(map(str, dims))}" for name, dims in self.folded)
        return f"fuse the scope at depth {self.depth} of {self.label} with the next {self.joined}{folds}"


def fused_nests(program: Program) -> Iterator[tuple[Fusion, tuple[str, ...], Program]]:
    """For every scope that can join the next (and that the scope before it cannot join: that one's
    fusion includes it), the fusion with as many next scopes as stay legal, and the folds of the
    temporaries only the fused scope touches: the fusion, its single moves and the program after."""
    start = State(program)
    scopes = {path: start.analysis.locate(path) for path, node in iter_paths(start.program.body)
              if isinstance(node, Scope)}
    joinable = {path for path, (label, depth) in scopes.items() if start.legal(_join(label, depth))}
    for path, (label, depth) in scopes.items():
        if path not in joinable or _before(path) in joinable:
            continue
        state = State(program)
        while state.play(_join(label, depth)):
            pass
        joined = len(state.moves)
        folded = _fold(state, path)
        yield Fusion(label, depth, joined, folded), tuple(state.moves), state.program


def _join(label: str, depth: int) -> str:
    return f"join_scopes(op={label}, depth={depth})"


def _before(path: TreePath) -> TreePath | None:
    return path[:-1] + (path[-1] - 1,) if path[-1] else None


def _fold(state: State, path: TreePath) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Fold every dimension that `reuse_dims` allows of the temporaries that only the scope at `path`
    touches, and move those that become small enough to the stack; what was folded."""
    inside, outside = set(), set()
    for site in state.analysis.sites:
        arrays = {site.op.target.array, *(read.array for read in site.op.reads)}
        (inside if site.path[:len(path)] == path else outside).update(arrays)
    buffers = [b for b in state.program.buffers if set(b.array_names) <= inside - outside]
    folded = []
    for buffer in buffers:
        dims = tuple(dim for dim in range(len(buffer.dims))
                     if state.play(f"reuse_dims(buffer={buffer.name}, dim={dim})"))
        if dims:
            folded.append((buffer.name, dims))
            to_stack(state, only=(buffer.name,))
    return tuple(folded)
