"""reuse_dims: store one dimension of a temporary buffer as `D:1`.

    t f32 [N] heap                     t f32 [N:1] heap
    N  t[{0}] = ...            ->      N  t[{0}] = ...
    |  y[{0}] = t[{0}] ...             |  y[{0}] = t[{0}] ...

`reuse_dims(buffer=t, dim=k)` keeps one element of dimension k instead of N:
index i now means stored element i mod 1 = 0, so every iteration reuses the
same storage (the paper's Figure 6). The accesses do not change.

Legal when t is a temporary (the layout of inputs and outputs is the kernel's
interface), dimension k has an extent above 1 and is not folded yet, and each
element is produced and consumed within one iteration, which indexes
dimension k by one value:
- every access to every array of t indexes dimension k by one affine form g;
- with d the deepest scope that g refers to, all these accesses lie inside
  one scope S at depth d (the root when g is a constant);
- g, together with the forms of the other dimensions that every access
  indexes alike by scopes at depths 0 to d only, is injective over the box of
  those scopes around S, so an element is touched in one iteration of S and
  of the scopes around it only (a staged `t[{0},{1},...]` whose dimension 0
  tells the iterations of scope 0 apart needs only `{1}` to tell those of
  scope 1);
- each of those scopes runs its iterations one after another (sequential or
  `:u`), or gives each of them its own copy of t (a `stack` t under `:p :g :b
  :w`, a `shared` t under `:g`; see mapping.py): iterations that run at once
  on one copy (`:v`, or t on the heap) would share the one element.
Then each iteration touches only elements no other iteration touches, all
with the same index in dimension k, so keeping one of them at a time changes
no value that is read (a read of an element never written is undefined
either way). Without a preceding `join_scopes` the producer and the consumer
are separate scopes and the move is not legal. The inverse is `unreuse_dims`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..affine import Affine, affine
from ..analysis import Analysis, Site
from ..printer import expr_text
from ..solve import Constraint, feasible
from ..tree import Access, Buffer, Dim, Program
from .base import BUFFER, DIM, EVERY_TARGET, Move, Resolved
from .buffers import bad_dim, buffer_accesses, buffer_move, interface, temporaries, with_dim
from .examples import FUSED_PAIR
from .mapping import OWN_MEMORY

NAME = "reuse_dims"
TITLE = "Store one element of the dimension"
ARGS = (BUFFER, DIM)
TARGETS = EVERY_TARGET

SEQUENTIAL = ("", "u")  # scope kinds whose iterations run one after another


# -- the condition shared with unreuse_dims ------------------------------------


def injective(forms: Sequence[Affine], sizes: Sequence[int]) -> bool:
    """Whether `forms` together take a different tuple of values at every
    point of the box `0 <= {d} < sizes[d]`: no nonzero step inside the box
    (`|step_d| < sizes[d]`) leaves them all unchanged. A step and its negation
    are the same question, so it is enough to ask, for each scope, for steps
    whose first nonzero entry is there and positive. Undecided counts as not
    injective."""
    moving = [d for d, size in enumerate(sizes) if size > 1]
    if any(not any(f.coef(d) for f in forms) for d in moving):
        return False
    for first, depth in enumerate(moving):
        rest = moving[first:]
        bounds = [(1, sizes[depth] - 1)] + [(1 - sizes[d], sizes[d] - 1) for d in rest[1:]]
        steps = [tuple((i, f.coef(d)) for i, d in enumerate(rest) if f.coef(d)) for f in forms]
        # a form that none of these scopes moves is unchanged by every step
        unchanged = [Constraint(step, 0, True) for step in steps if step]
        if feasible(bounds, unchanged) is not False:
            return False
    return True


def _alike(found: Sequence[tuple[Site, Access]], k: int) -> Affine | None:
    """The one form by which every access in `found` indexes dimension k, or None."""
    forms = {affine(x.index[k]) for _, x in found}
    return forms.pop() if len(forms) == 1 else None


def one_iteration(a: Analysis, buffer: Buffer, k: int, *, one_at_a_time: bool) -> str | None:
    """None when every element of `buffer` is touched in one iteration only
    of one scope and the scopes around it, each iteration with one index in
    dimension k (conditions 1-3 of the module docstring; with
    `one_at_a_time`, also condition 4), else why not."""
    found = buffer_accesses(a, buffer)
    if not found:
        return f"no operation accesses `{buffer.name}`"
    forms = {affine(x.index[k]): x.index[k] for _, x in found}
    if len(forms) > 1:
        first, second = list(forms.values())[:2]
        return (f"the accesses to `{buffer.name}` index dimension {k} differently (`{expr_text(first, True)}` and "
                f"`{expr_text(second, True)}`), so one element may be used by several iterations")
    (g,) = forms
    depth = max(g.depths, default=-1)
    scope = found[0][0].path[: depth + 1]
    if any(s.path[: depth + 1] != scope for s, _ in found):
        return (f"the accesses to `{buffer.name}` lie in different scopes at depth {depth}, so an element of "
                f"dimension {k} is produced in one scope and used in another; join the scopes first")
    chain = found[0][0].chain[: depth + 1]
    # Another dimension indexed alike by these scopes only tells their iterations apart as well as g does.
    pinning = [f for j in range(len(buffer.dims)) if j != k and (f := _alike(found, j)) is not None
               and f.depths and max(f.depths) <= depth]
    if not injective([g, *pinning], [s.size for s in chain]):
        return (f"index `{expr_text(forms[g], True)}` takes the same value in several iterations of the scopes "
                "around the accesses, and the other dimensions do not tell them apart, so an element lives "
                "across iterations")
    shared = [s for s in chain if s.size > 1 and s.kind not in SEQUENTIAL
              and buffer.location not in OWN_MEMORY.get(s.kind, ())]
    if one_at_a_time and shared:
        return (f"the scope `{shared[0].token}` runs its iterations at once on one copy of `{buffer.name}` (in "
                f"`{buffer.location}` memory), and they would all share the one stored element of dimension {k}")
    return None


# -- the move ---------------------------------------------------------------------


def candidates(a: Analysis) -> Iterator[Move]:
    for buffer in temporaries(a.program):
        for k, dim in enumerate(buffer.dims):
            if dim.stored is None and dim.size > 1:
                yield buffer_move(NAME, buffer, dim=k)


def why_not(a: Analysis, at: Resolved) -> str | None:
    buffer = at.buffer
    k = at.arg("dim")
    reason = interface(a.program, buffer) or bad_dim(buffer, k)
    if reason:
        return reason
    dim = buffer.dims[k]
    if dim.stored is not None:
        return f"dimension {k} of `{buffer.name}` is already stored as `{dim}`"
    if dim.size == 1:
        return f"dimension {k} of `{buffer.name}` has extent 1 already"
    return one_iteration(a, buffer, k, one_at_a_time=True)


def rewrite(a: Analysis, at: Resolved) -> Program:
    buffer = at.buffer
    k = at.arg("dim")
    return with_dim(a.program, buffer, k, Dim(buffer.dims[k].size, 1))


EXAMPLES = [
    (
        # Figure 6, top: after join_scopes each t[i] is written and read in iteration i.
        FUSED_PAIR,
        "reuse_dims(buffer=t, dim=0)",
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4:1] heap

4 t[{0}] = exp(x[{0}])
| y[{0}] = t[{0}] + 1
""",
    ),
    (
        # Fused softmax rows: one row of e and one sum at a time.
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3, 5] heap
s f32 [3] heap

3 s[{0}] = 0
| 5 e[{0},{1}] = exp(x[{0},{1}])
| 5 s[{0}] += e[{0},{1}]
| 5 y[{0},{1}] = e[{0},{1}] / s[{0}]
""",
        "reuse_dims(buffer=e, dim=0)",
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3:1, 5] heap
s f32 [3] heap

3 s[{0}] = 0
| 5 e[{0},{1}] = exp(x[{0},{1}])
| 5 s[{0}] += e[{0},{1}]
| 5 y[{0},{1}] = e[{0},{1}] / s[{0}]
""",
    ),
    (
        # After a split the index `{0}*4+{1}` still names one iteration of the two scopes.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap
t f32 [8] heap

2 4 t[{0}*4+{1}] = exp(x[{0}*4+{1}])
| | y[{0}*4+{1}] = t[{0}*4+{1}] + 1
""",
        "reuse_dims(buffer=t, dim=0)",
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap
t f32 [8:1] heap

2 4 t[{0}*4+{1}] = exp(x[{0}*4+{1}])
| | y[{0}*4+{1}] = t[{0}*4+{1}] + 1
""",
    ),
    (
        # Each thread has its own copy of a `stack` temporary, so it may keep one element.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] stack

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
        "reuse_dims(buffer=t, dim=0)",
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4:1] stack

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
    ),
    (
        # A tile that stage_reads made: dimension 0 tells the iterations of the
        # outer scope apart, so `{1}` need only tell those of the inner one.
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2:1, 3, 4] heap

2 3 4 t[{0},{1},{2}] = exp(x[{0},{1},{2}])
| | | y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
        "reuse_dims(buffer=t, dim=1)",
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2:1, 3:1, 4] heap

2 3 4 t[{0},{1},{2}] = exp(x[{0},{1},{2}])
| | | y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
    ),
]

NOT_APPLICABLE = [
    (
        # Figure 6, bottom: all of t is written before any is read, so one
        # element would leave y with exp(x[3]) + 1 everywhere.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4 t[{0}] = exp(x[{0}])
4 y[{0}] = t[{0}] + 1
""",
        "reuse_dims(buffer=t, dim=0)",
    ),
    (
        # Dimension 1 of e is indexed by the inner scopes, and a whole row is
        # written by one inner scope before another reads it.
        """kernel k(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
e f32 [3, 5] heap

3 5 e[{0},{1}] = exp(x[{0},{1}])
| 5 y[{0},{1}] = e[{0},{1}] + 1
""",
        "reuse_dims(buffer=e, dim=1)",
    ),
    (
        # The threads of a parallel scope share the heap, and so t's one element.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4:p t[{0}] = exp(x[{0}])
|   y[{0}] = t[{0}] + 1
""",
        "reuse_dims(buffer=t, dim=0)",
    ),
    (
        # y is the kernel's output: its layout is the interface.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap

4 y[{0}] = exp(x[{0}])
""",
        "reuse_dims(buffer=y, dim=0)",
    ),
    (
        # Dimension 0 is indexed alike everywhere, but by a constant, which
        # tells no iterations apart: both rows write and read t[0,j].
        """kernel k(x) -> y

x f32 [2, 3] heap
y f32 [2, 3] heap
t f32 [2, 3] heap

2 3 t[0,{1}] = exp(x[{0},{1}])
| | y[{0},{1}] = t[0,{1}] + 1
""",
        "reuse_dims(buffer=t, dim=1)",
    ),
    (
        # Dimension 0 tells the blocks of the outer grid scope apart, but the
        # blocks of the inner one would share t[i,0,...] on the heap.
        """kernel k(x) -> y

x f32 [2, 3, 4] heap
y f32 [2, 3, 4] heap
t f32 [2, 3, 4] heap

2:g 3:g 4:b t[{0},{1},{2}] = exp(x[{0},{1},{2}])
|   |   |   y[{0},{1},{2}] = t[{0},{1},{2}] + 1
""",
        "reuse_dims(buffer=t, dim=1)",
    ),
]
