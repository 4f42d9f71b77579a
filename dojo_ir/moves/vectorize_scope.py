"""vectorize_scope: run the iterations of a sequential scope as the lanes of
one vector instruction.

    N/4 4  y[{0}*4+{1}] = x[{0}*4+{1}] * 2      ->      N/4 4:v  y[...] = ...

`vectorize_scope(op=X, depth=d)` marks the sequential scope at depth d around
operation X `:v`. As in the paper (section 2), the scope must already have the
vector's size (tile it with `split_scope` first) and wrap a single operation
with vectorizable arguments. The vector may be wider than one register, or
not a power of two (a convolution's 54 output columns): the code generator
covers it with register-wide vectors and narrower ones for the rest, which is
how a row whose length the lane count does not divide is vectorized at all.
Legal when
- the size is 2 to 512 lanes, and the size times the bytes of the widest
  dtype the operation touches is at most 2 KiB (AVX-512's 32 registers);
- the body is exactly one operation, no scope;
- every access is vectorizable: an index either does not use the lane
  variable `{d}` (a broadcast) or is `{d}` with coefficient 1 plus terms of
  outer scopes in the last dimension only (contiguous), and that dimension is
  not folded (`D:K`); a read may also step by a constant of more than 1
  there (strided: `x[{h}*2+{i}, {d}*2+{j}]`, a pool's or a strided
  convolution's window, which the code generator loads as contiguous
  vectors and shuffles);
- the target varies with the lane (contiguous), except that a reduction
  (`+= *= max= min=`) may have a target without `{d}`: a horizontal
  reduction, whose lanes are combined in another order (reassociation, which
  reductions allow);
- `{d}` is not used as a value outside an index (there is no index vector);
- no element is touched by two lanes with one writing, apart from updates of
  one reduction;
- the nesting rules of `mapping.py` still hold (no `:v` inside a `:v`).
The inverse is `unmap_scope`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..affine import affine
from ..analysis import Analysis
from ..paths import iter_paths
from ..printer import access_text
from ..refs import used_as_value
from ..tree import DTYPE_BYTES, Access, Op, Program, Scope
from .base import CPU_ONLY, DEPTH, OP, Move, Resolved
from .mapping import nesting_problem, with_kind

NAME = "vectorize_scope"
TITLE = "Vectorize the scope"
ARGS = (OP, DEPTH)
TARGETS = CPU_ONLY

MAX_LANES = 512
VECTOR_BYTES = 2048  # a vector's most bytes: the 32 registers of AVX-512


def candidates(a: Analysis) -> Iterator[Move]:
    for path, node in iter_paths(a.program.body):
        if isinstance(node, Scope) and not node.kind and 2 <= node.size <= MAX_LANES:
            label, depth = a.locate(path)
            yield Move(NAME, (("op", label), ("depth", depth)), a.first_site(path).line)


def _unvectorizable(a: Analysis, access: Access, lane: int, read: bool) -> str | None:
    """Why the lanes' instances of `access` are not one vector load or store
    (contiguous), one broadcast, or for a read a strided load, or None."""
    last = len(access.index) - 1
    for position, index in enumerate(access.index):
        coef = affine(index).coef(lane)
        if not coef:
            continue
        if position != last or coef < 1 or (coef > 1 and not read):
            return (f"`{access_text(access)}` is strided in the lanes: `{{{lane}}}` may appear only in the last "
                    f"index, with coefficient 1{', or more in a read' if read else ''}")
        if a.program.buffer_of[access.array].dims[last].stored is not None:
            return f"`{access_text(access)}` runs along a folded (`D:K`) dimension, which is not contiguous"
    return None


def _vector_problem(a: Analysis, op: Op, lane: int, size: int) -> str | None:
    arrays = (op.target, *op.reads)
    widest = max(DTYPE_BYTES[a.program.buffer_of[x.array].dtype] for x in arrays)
    if size * widest > VECTOR_BYTES:
        return f"{size} lanes of {widest} bytes exceed the {VECTOR_BYTES} bytes a vector may take"
    for access in arrays:
        problem = _unvectorizable(a, access, lane, read=access is not op.target)
        if problem:
            return problem
    if not any(affine(i).coef(lane) for i in op.target.index) and not op.reduction:
        return f"every lane would write the same element `{access_text(op.target)}`"
    if used_as_value(op.value, lane):
        return f"`{{{lane}}}` is used as a value, and there is no vector of lane indices"
    return None


def why_not(a: Analysis, at: Resolved) -> str | None:
    path, scope = at.path, at.scope
    if scope.kind:
        return f"the scope is already mapped (`{scope.token}`); only a sequential scope can be vectorized"
    if not 2 <= scope.size <= MAX_LANES:
        return f"the scope has {scope.size} iterations; a vector has 2 to {MAX_LANES} lanes"
    if len(scope.body) != 1 or not isinstance(scope.body[0], Op):
        return "the scope must hold exactly one operation and nothing else"
    lane = len(path) - 1
    problem = _vector_problem(a, scope.body[0], lane, scope.size) or nesting_problem(a, path, "v")
    if problem:
        return problem
    inside = a.touches_in(path)
    # Both lists are the same, so `<` also tries every pair the other way round.
    if a.depends(inside, inside, ("=",) * lane + ("<",)):
        return "two lanes touch the same element, one writing"
    return None


def rewrite(a: Analysis, at: Resolved) -> Program:
    path = at.path
    return with_kind(a, path, "v")


EXAMPLES = [
    (
        # After `split_scope(op=y, depth=0, factor=16)`.
        """kernel k(x) -> y

x f32 [64] heap
y f32 [64] heap

4 16 y[{0}*16+{1}] = x[{0}*16+{1}] * 2
""",
        "vectorize_scope(op=y, depth=1)",
        """kernel k(x) -> y

x f32 [64] heap
y f32 [64] heap

4 16:v y[{0}*16+{1}] = x[{0}*16+{1}] * 2
""",
    ),
    (
        # The paper's GPU elementwise multiply (section 4, Figure 15a): the
        # innermost scope of size 4 vectorized under a block of 8.
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8:b 4 z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
        "vectorize_scope(op=z, depth=2)",
        """kernel mul(x, y) -> z

x f32 [2, 32] heap
y f32 [2, 32] heap
z f32 [2, 32] heap

2:g 8:b 4:v z[{0},{1}*4+{2}] = x[{0},{1}*4+{2}] * y[{0},{1}*4+{2}]
""",
    ),
    (
        # A horizontal reduction: all lanes update `s[{0}]`; `g[{1}]` is
        # loaded contiguously and `c[]` broadcast.
        """kernel k(x, g, c) -> s

x f32 [3, 8] heap
g f32 [8] heap
c f32 [] heap
s f32 [3] heap

3 s[{0}] = 0
| 8 s[{0}] += x[{0},{1}] * g[{1}] + c[]
""",
        "vectorize_scope(op=s#2, depth=1)",
        """kernel k(x, g, c) -> s

x f32 [3, 8] heap
g f32 [8] heap
c f32 [] heap
s f32 [3] heap

3 s[{0}] = 0
| 8:v s[{0}] += x[{0},{1}] * g[{1}] + c[]
""",
    ),
    (
        # A convolution's row of 54 output columns, which no lane count
        # divides, as one vector (computed in register-wide pieces).
        """kernel k(x, w) -> y

x f32 [2, 56] heap
w f32 [3] heap
y f32 [2, 54] heap

2 54 y[{0},{1}] = 0
2 3 54 y[{0},{2}] += x[{0},{2}+{1}] * w[{1}]
""",
        "vectorize_scope(op=y#2, depth=2)",
        """kernel k(x, w) -> y

x f32 [2, 56] heap
w f32 [3] heap
y f32 [2, 54] heap

2 54 y[{0},{1}] = 0
2 3 54:v y[{0},{2}] += x[{0},{2}+{1}] * w[{1}]
""",
    ),
]

NOT_APPLICABLE = [
    (
        # `x[{1},{0}]` reads a column: its lanes are strided, not contiguous.
        """kernel k(x) -> y

x f32 [4, 4] heap
y f32 [4, 4] heap

4 4 y[{0},{1}] = x[{1},{0}]
""",
        "vectorize_scope(op=y, depth=1)",
    ),
    (
        # 1000 lanes are more than a vector may have.
        """kernel k(x) -> y

x f32 [1000] heap
y f32 [1000] heap

1000 y[{0}] = x[{0}] * 2
""",
        "vectorize_scope(op=y, depth=0)",
    ),
    (
        # 300 lanes of f64 are 2400 bytes, more than AVX-512's registers hold.
        """kernel k(x) -> y

x f64 [300] heap
y f64 [300] heap

300 y[{0}] = x[{0}] * 2
""",
        "vectorize_scope(op=y, depth=0)",
    ),
    (
        # A plain `=` whose target ignores the lane: every lane writes `y[{0}]`.
        """kernel k(x) -> y

x f32 [3, 4] heap
y f32 [3] heap

3 4 y[{0}] = x[{0},{1}]
""",
        "vectorize_scope(op=y, depth=1)",
    ),
    (
        # The scope holds two operations.
        """kernel k(x) -> y, z

x f32 [4] heap
y f32 [4] heap
z f32 [4] heap

4 y[{0}] = x[{0}]
| z[{0}] = x[{0}]
""",
        "vectorize_scope(op=y, depth=0)",
    ),
]
