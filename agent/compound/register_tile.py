"""Register tiles as one step of a ranked search: for a reduction, every tile of R rows by W vectors
that the target's vector registers hold, each the sequence of single moves that builds it.

A register tile takes about ten single moves from a spec: split the columns into W vectors of the
target's lanes, split the rows by R, bring the reductions outside the tile, vectorise the lanes,
unroll the vectors and the rows, and keep the tile in an accumulator. Alone, most of those moves
make the program slower than the one before it, and a search that goes one move deeper a batch
must value each of those programs before it reaches the tile. Offered as one step, the tile is a
candidate the cost model scores like any other, one step from the program it starts from.

Nothing here says which tile pays: every shape whose live values fit the registers is offered,
for every scope the target indexes as rows and every one it indexes contiguously as columns, and
the model chooses among them from the loop structure. Where both the rows and the columns leave
blocks outside the tile, the tile comes with the blocks of rows outside and, again, with the blocks
of columns outside: which one keeps the other operand in cache depends on the shapes, and on the
feed-forward matmul of MiniLM (128 x 1536 x 384) the columns outside were 1.56-2.20 times as fast
with each of its 11 shapes of 8 accumulators or more (bench/results/register_tiles.md). The
vector's lanes and the registers are the target's facts. Every tile is the single moves it is made
of, each played only where it is legal (`dojo_ir.moves`), so a tile keeps the meaning as they do,
and the derivation it adds to replays move by move.

    for tile, moves, program in register_tiles(program, target):   # moves: single moves, in order
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from codegen.targets import Target
from dojo_ir import Program
from dojo_ir.affine import NotAffine, affine
from dojo_ir.analysis import Analysis, Site
from dojo_ir.moves.accumulate import is_accumulator, used_depths
from dojo_ir.moves.unroll_scope import MAX_SIZE
from dojo_ir.tree import Access

from ..passes.register_tile import live_registers
from ..passes.state import State, op_bytes, reorder


@dataclass(frozen=True)
class Tile:
    """R rows of the scope at depth `rows` (None: no rows, R = 1) by W vectors of `lanes` along the
    scope at depth `columns`, around the reduction `label`."""

    label: str
    columns: int
    vectors: int
    lanes: int
    rows: int | None = None
    row_factor: int = 1
    columns_outside: bool = False  # the blocks of columns outside those of rows, rather than in place

    def __str__(self) -> str:
        rows = f"{self.row_factor} rows x " if self.rows is not None else ""
        order = ", column blocks outside" if self.columns_outside else ""
        return f"register tile of {self.label}: {rows}{self.vectors} vector(s) of {self.lanes} lanes{order}"


def tiles(site: Site, program: Program, target: Target) -> Iterator[Tile]:
    """Every tile of the reduction at `site` that fits `target`'s vector registers, whose sides divide
    their scopes (a tail would copy the whole nest)."""
    op, chain = site.op, site.chain
    if op.reduction is None or any(s.kind for s in chain) or is_accumulator(program.buffer_of[op.target.array]):
        return
    used = used_depths(op.target)
    if len(used) == len(chain):  # nothing to reduce along
        return
    lanes = target.vector_bytes // op_bytes(program, op)
    for columns in _contiguous(op.target, used):
        vectors, left = divmod(chain[columns].size, lanes)
        if left or not vectors:
            continue
        for w in _divisors(vectors, MAX_SIZE):
            if live_registers(1, w, 1) <= target.vector_registers:
                yield Tile(site.label, columns, w, lanes)
            for rows in sorted(used - {columns}):
                for r in _divisors(chain[rows].size, MAX_SIZE):
                    if r > 1 and live_registers(r, w, 1) <= target.vector_registers:
                        yield Tile(site.label, columns, w, lanes, rows, r)
                        if r < chain[rows].size and w < vectors:  # blocks of both: in either order
                            yield Tile(site.label, columns, w, lanes, rows, r, columns_outside=True)


def _contiguous(output: Access, used: frozenset[int]) -> list[int]:
    """The depths that step the output's last index by one: where its lanes can be (none for a scalar)."""
    if not output.index:
        return []
    try:
        last = affine(output.index[-1])
    except NotAffine:
        return []
    return [d for d in sorted(used) if last.coef(d) == 1]


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def build(program: Program, tile: Tile) -> tuple[tuple[str, ...], Program] | None:
    """The single moves that make `tile` in `program` and the program they make, or None where one
    of them is not legal."""
    state = State(program)
    label = tile.label
    chain = state.analysis.by_label[label].chain
    used = used_depths(state.analysis.by_label[label].op.target)
    roles = [f"s{d}" if d in used else f"r{d}" for d in range(len(chain))]  # the scopes, outermost first

    def split(role: str, factor: int, outer: str, inner: str) -> bool:
        """Split the scope `role` by `factor` into `outer` and `inner`; only rename it when it has that size."""
        depth = roles.index(role)
        if factor == state.analysis.by_label[label].chain[depth].size:
            roles[depth] = inner
            return True
        roles[depth: depth + 1] = [outer, inner]
        return state.play(f"split_scope(op={label}, depth={depth}, factor={factor})")

    roles[tile.columns] = "J"
    if tile.rows is not None:
        roles[tile.rows] = "I"
    if not split("J", tile.vectors * tile.lanes, "Jo", "J") or not split("J", tile.lanes, "W", "L"):
        return None
    if tile.rows is not None and not split("I", tile.row_factor, "Io", "R"):
        return None
    inside = [r for r in ("R", "W", "L") if r in roles]
    reductions = [r for r in roles if r.startswith("r")]
    outside = [r for r in roles if r not in inside and r not in reductions]
    if tile.columns_outside and "Jo" in outside and "Io" in outside:
        outside.remove("Jo")
        outside.insert(outside.index("Io"), "Jo")
    wanted = outside + reductions + inside
    if not reorder(state, label, roles, wanted):
        return None
    mapped = [("vectorize_scope", "L")] + [("unroll_scope", r) for r in ("W", "R") if r in roles]
    for move, role in mapped:
        if not state.play(f"{move}(op={label}, depth={roles.index(role)})"):
            return None
    if not state.play(f"accumulate(op={label}, depth={roles.index(reductions[0])})"):
        return None
    return tuple(state.moves), state.program


def register_tiles(program: Program, target: Target) -> Iterator[tuple[Tile, tuple[str, ...], Program]]:
    """Every register tile of every reduction in `program` for `target` (`tiles`) that its single
    moves can build: the tile, those moves, and the program after them. None on a target without
    vector scopes."""
    if target.language != "c":
        return
    for site in Analysis(program).sites:
        for tile in tiles(site, program, target):
            built = build(program, tile)
            if built is not None:
                yield tile, *built
