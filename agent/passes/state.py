"""The state the heuristic's steps share: a program and the moves played on it, the bounds on the
steps, and the questions of access and layout that several steps ask."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from codegen.cvector import lane_use, vector_pieces
from codegen.targets import Target, get_target
from dojo_ir import Program
from dojo_ir.affine import NotAffine, affine
from dojo_ir.analysis import Analysis, Site
from dojo_ir.moves import Move, apply, find, why_not
from dojo_ir.moves.set_location import CAPACITY
from dojo_ir.paths import without_comments
from dojo_ir.tree import DTYPE_BYTES, Access, Op

STACK_BYTES = CAPACITY["stack"]

# The largest folded temporary the passes keep on each thread's stack. A larger one stays on the
# heap, where the threads share it: its folded scope cannot be parallel, so the parallel scope is
# found inside it. On the stack, ResNet-50's fused pairs of pointwise convolutions at 56x56 (a
# 400 KB temporary each) ran their 8 blocks of channels in parallel, each thread streaming the
# whole input, 20-45% slower than with their rows in parallel (bench/results/real_models.md's
# libraries, profiled kernel by kernel).
FOLDED_STACK_BYTES = 64 * 1024


STREAMED_LOAD_COST = 2  # a vector from the private cache against a broadcast from the first level


TAIL_COST = 0.5  # a register tile's side that leaves a tail: its loop overhead and its tail's smaller tile


BALANCED_ITERATIONS = 4  # iterations per core from which an uneven last share costs little


MAX_STEPS = 500  # a bound on any loop of moves; no library kernel comes near it


class State:
    """A program and the moves played on it."""

    def __init__(self, program: Program):
        self.program = without_comments(program)
        self.moves: list[str] = []
        self._analysis: Analysis | None = None

    @property
    def analysis(self) -> Analysis:
        if self._analysis is None:
            self._analysis = Analysis(self.program)
        return self._analysis

    def legal(self, move: str) -> bool:
        """Whether `move` applies here; a malformed move, or one naming something that is not
        there, does not."""
        return why_not(self.program, move, self.analysis) is None

    def play(self, move: str | Move) -> bool:
        """Apply `move` if it is legal here; say whether it was."""
        text = str(move)
        if not self.legal(text):
            return False
        self.program = apply(self.program, text, self.analysis)
        self.moves.append(text)
        self._analysis = None
        return True

    def play_all(self, moves: list[str]) -> bool:
        """Apply every move of `moves` or none of them."""
        mark = self.mark()
        for move in moves:
            if not self.play(move):
                self.undo(mark)
                return False
        return True

    def mark(self) -> tuple[Program, int, Analysis | None]:
        """Where the game stands, for `undo`."""
        return self.program, len(self.moves), self._analysis

    def undo(self, mark: tuple[Program, int, Analysis | None]) -> None:
        """Take back every move played since `mark`."""
        self.program, played, self._analysis = mark
        del self.moves[played:]

    def find(self, where: Callable[[Move], bool]) -> list[Move]:
        return find(self.program, self.analysis, where)


def as_target(target: Target | str) -> Target:
    return get_target(target) if isinstance(target, str) else target


def exhaust(state: State, kinds: tuple[str, ...]) -> None:
    for _ in range(MAX_STEPS):
        legal = state.find(lambda m: m.name in kinds)
        if not legal or not state.play(legal[0]):
            return


def fuse_and_reuse(state: State) -> None:
    """join_scopes and reuse_dims while any applies, then the folded temporaries to the stack."""
    exhaust(state, ("join_scopes", "reuse_dims"))
    to_stack(state)


def to_stack(state: State, only: Collection[str] | None = None) -> None:
    """Every folded temporary on the heap (of `only`, when given) that fits FOLDED_STACK_BYTES to the stack."""
    for buffer in state.program.buffers:
        if (only is None or buffer.name in only) and buffer.location == "heap" \
                and any(d.stored is not None for d in buffer.dims) and buffer.storage_bytes <= FOLDED_STACK_BYTES:
            state.play(f"set_location(buffer={buffer.name}, location=stack)")


def op_bytes(program: Program, op: Op) -> int:
    """The widest dtype that `op` touches, in bytes."""
    arrays = [op.target.array, *(a.array for a in op.reads)]
    return max(DTYPE_BYTES[program.buffer_of[a].dtype] for a in arrays if a in program.buffer_of)


def lanes(target: Target, dtype_bytes: int) -> int:
    """How many elements of `dtype_bytes` one of the target's vectors holds."""
    return max(1, target.vector_bytes // dtype_bytes)


def last_coef(access, depth: int) -> int:
    """The coefficient of `{depth}` in the last index of `access` (0 for a scalar)."""
    if not access.index:
        return 0
    try:
        return affine(access.index[-1]).coef(depth)
    except NotAffine:
        return 0


def strided(op: Op, depth: int) -> int:
    """How many of `op`'s accesses would stride through memory with the scope at `depth`
    innermost: those that use it other than as `{depth}` alone in their last index. An access
    that does not use it stays put (a register); one with coefficient 1 there is contiguous."""
    count = 0
    for access in (op.target, *op.reads):
        try:
            forms = [affine(i) for i in access.index]
        except NotAffine:
            count += 1
            continue
        used = [k for k, f in enumerate(forms) if f.coef(depth)]
        if used and (used != [len(forms) - 1] or forms[-1].coef(depth) != 1):
            count += 1
    return count


def vector_along(op: Op, depth: int) -> bool:
    """Whether the scope at `depth`, innermost, could be a vector (`vectorize_scope`): the target
    contiguous along it (or, in a reduction, not using it), every read contiguous, strided or
    not using it."""
    try:
        target = lane_use(op.target, depth)
        return target in ("contiguous", "invariant" if op.reduction else "contiguous") and all(
            lane_use(access, depth) is not None for access in op.reads)
    except NotAffine:
        return False


def uses(access, depth: int) -> bool:
    try:
        return any(affine(i).coef(depth) for i in access.index)
    except NotAffine:
        return True


def sites(state: State) -> list[Site]:
    return list(state.analysis.sites)


def uses_at(access: Access, position: int, depth: int) -> bool:
    """Whether index `position` of `access` uses the scope at `depth`."""
    try:
        return bool(affine(access.index[position]).coef(depth))
    except NotAffine:
        return True


def contiguous_scope(site: Site) -> int | None:
    """The innermost sequential scope that walks the target's last dimension with stride 1 (and
    no other dimension): the one whose iterations can be the lanes of a vector."""
    target = site.op.target
    leading = replace(target, index=target.index[:-1])
    found = [d for d, scope in enumerate(site.chain)
             if not scope.kind and last_coef(target, d) == 1 and not uses(leading, d)]
    return found[-1] if found else None


def vector_registers(size: int, dtype_bytes: int, target: Target) -> int:
    """How many of the target's vector registers a `size`-lane vector takes, in the pieces the
    code generator computes it in."""
    return sum(max(1, lanes * dtype_bytes // target.vector_bytes) for _, lanes in vector_pieces(size, dtype_bytes))


def balanced(iterations: int, cores: int) -> bool:
    """Whether `iterations` share out evenly over `cores`: a multiple of them, or enough that the
    last uneven share costs little."""
    return iterations % cores == 0 or iterations >= BALANCED_ITERATIONS * cores


def alone(state: State, label: str, depth: int) -> bool:
    """Make the child of the scope at `depth` around `label` its only child, splitting off
    (fission) its siblings before and after."""
    site = state.analysis.by_label.get(label)
    if site is None or depth + 1 > len(site.chain):
        return False
    if len(site.chain[depth].body) > 1:
        if site.path[depth + 1] > 0 and not state.play(f"fission(op={label}, depth={depth})"):
            return False
        site = state.analysis.by_label[label]
        if len(site.chain[depth].body) > 1:
            after = state.analysis.first_site(site.path[: depth + 1] + (1,)).label
            if not state.play(f"fission(op={after}, depth={depth})"):
                return False
    return True


def swap_alone(state: State, label: str, depth: int) -> bool:
    """Interchange the scope at `depth` around `label` with its child, alone first."""
    site = state.analysis.by_label.get(label)
    if site is None or depth + 1 >= len(site.chain):
        return False
    return alone(state, label, depth) and state.play(f"swap_scopes(op={label}, depth={depth})")


def reorder(state: State, label: str, roles: list[str], wanted: list[str]) -> bool:
    """Interchange the scopes around `label`, named by `roles` outermost first, into the order of
    `wanted`, each bubbled out to its place (`swap_alone`); `roles` follows them."""
    for position, role in enumerate(wanted):
        for depth in range(roles.index(role, position) - 1, position - 1, -1):
            if not swap_alone(state, label, depth):
                return False
            roles[depth], roles[depth + 1] = roles[depth + 1], roles[depth]
    return True


def isolate(state: State, label: str) -> bool:
    """Give the operation `label` a loop nest of its own, innermost scope first."""
    site = state.analysis.by_label.get(label)
    if site is None:  # renamed by a split (`vectorize_innermost`)
        return False
    depths = len(site.chain)
    return all(alone(state, label, depth) for depth in reversed(range(depths)))


def tail_label(state: State, label: str, depth: int) -> str:
    """The label of the first operation in the tail that splitting the scope at `depth` around
    `label` left: the scope right after it."""
    path = state.analysis.by_label[label].path
    return state.analysis.first_site(path[:depth] + (path[depth] + 1,)).label


def divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]
