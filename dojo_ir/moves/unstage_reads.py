"""unstage_reads: read the array directly again; the inverse of stage_reads.

    N  K  J  b_s[{0},{1},{2}] = b[{0}*K+{1},{2}]          N  M  K  J  c[..] += a[..] * b[{0}*K+{2},{3}]
    |  M  K  J  c[..] += a[..] * b_s[{0},{2},{3}]   ->

`unstage_reads(op=T)` names a copy `T[..] = A[g]`: T a temporary alone in
its buffer, A an array of another buffer, the copy alone in a nest of
single-child scopes (none, for a scalar copy), its T index one scope
variable per scope around it, each once, in any order (so a `swap_dims` of T
is undone too), and the node after the nest is a scope S. Every read
`T[h]` in S becomes `A[g]` with each variable of the nest replaced by the
`h` of the dimension it indexes; the copy and T's declaration go.

Legal when
- T is written by the copy only and read inside S only;
- the dimensions of T that the nest indexes are stored whole (a folded
  `D:K` would hold the last of several copies, not the one S reads), and in
  every read of T, those dimensions stay within the nest's extents, while
  the others are indexed by the same variable as in the copy (so S reads what
  the copy wrote in the same iteration of the scopes around it);
- no operation inside S writes an array of A's buffer (S would then see the
  new value where T kept the old one);
- no write in an earlier iteration of a scope around S reaches an element
  that the new reads of A read, as for stage_reads' copy: safe rather than
  exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..affine import affine
from ..analysis import Analysis, Site
from ..dependence import touches
from ..paths import TreePath, siblings, splice, with_body
from ..refs import ref, substitute_expr
from ..tree import Access, Op, Program, Ref, Scope
from .base import EVERY_TARGET, OP, Move, Resolved
from .buffers import undeclared, with_reads
from .examples import MATMUL_B_PACKED, MATMUL_IN_K_BLOCKS
from .inline_accumulator import _nest_root

NAME = "unstage_reads"
TITLE = "Read the array directly, without the copy"
ARGS = (OP,)
TARGETS = EVERY_TARGET


def _is_copy(a: Analysis, op: Op) -> bool:
    target = a.program.buffer_of[op.target.array]
    return (op.assign == "=" and isinstance(op.value, Access) and target.array_names == (op.target.array,)
            and op.target.array in a.program.temporaries and a.program.buffer_of[op.value.array] is not target)


def candidates(a: Analysis) -> Iterator[Move]:
    for site in a.sites:
        if _is_copy(a, site.op):
            yield Move(NAME, (("op", site.label),), site.line)


@dataclass(frozen=True)
class _Pattern:
    copy: Site
    outer: int  # scopes around the nest, and around S
    nest_path: TreePath
    scope_path: TreePath
    dims: tuple[int, ...]  # the depth that indexes each dimension of T in the copy
    reads: tuple[Site, ...]  # the operations in S that read T

    def unstaged(self, access: Access) -> Access:
        """A read of T in S as the read of A it stands for."""
        by_depth = {d: affine(i) for d, i in zip(self.dims, access.index, strict=True)}
        value = self.copy.op.value
        assert isinstance(value, Access)
        return substitute_expr(value, lambda d: ref(d) if d < self.outer else by_depth[d])


def _pattern(a: Analysis, at: Resolved) -> _Pattern | str:
    copy = at.site
    if not _is_copy(a, copy.op):
        return (f"`{copy.label}` is not a copy `T[...] = A[...]` into a temporary alone in its buffer from an "
                "array of another buffer")
    outer = len(copy.chain) - _nest_root(copy)
    nest_path = copy.path[: outer + 1]
    target = copy.op.target
    depths = [i.depth if isinstance(i, Ref) else None for i in target.index]
    if None in depths or sorted(depths) != list(range(len(copy.chain))):
        return (f"the copy's index of `{target.array}` is not one variable of each scope around it, each once, "
                "so it may not fill every element")
    around = siblings(a.program.body, nest_path)
    i = nest_path[-1]
    if i + 1 >= len(around) or not isinstance(around[i + 1], Scope):
        return "the copy is not followed by a scope"
    scope_path = nest_path[:-1] + (i + 1,)
    buffer = a.program.buffer_of[target.array]
    folded = next((k for k, d in enumerate(depths) if d >= outer and buffer.dims[k].stored is not None), None)
    if folded is not None:
        return f"dimension {folded} of `{target.array}` is folded, so it holds the last of several copies"
    reads: dict[TreePath, Site] = {}
    # an operation's write comes before its reads, so one that writes T is refused before its reads are looked at
    for path, t in a.placed_touches_in(()):
        if t.access.array != target.array or path == copy.path:
            continue
        site = a.first_site(path)
        if path[: len(scope_path)] != scope_path or t.write:
            return f"`{site.label}` accesses `{target.array}` other than by a read in the scope after the copy"
        for k, (d, form) in enumerate(zip(depths, t.forms, strict=True)):
            if d < outer and form != ref(d):
                return (f"`{site.label}` reads dimension {k} of `{target.array}` other than by `{{{d}}}`, so "
                        "not what the copy wrote in the same iteration")
            low, high = form.bounds(t.sizes)
            if d >= outer and (low < 0 or high >= copy.chain[d].size):
                return f"`{site.label}` reads dimension {k} of `{target.array}` beyond what the copy wrote"
        reads[path] = site
    return _Pattern(copy, outer, nest_path, scope_path, tuple(depths), tuple(reads.values()))


def why_not(a: Analysis, at: Resolved) -> str | None:
    pattern = _pattern(a, at)
    if isinstance(pattern, str):
        return pattern
    value = pattern.copy.op.value
    assert isinstance(value, Access)
    source = a.program.buffer_of[value.array]
    own = set(source.array_names)
    if any(t.write and t.access.array in own for t in a.touches_in(pattern.scope_path)):
        return f"the scope writes `{value.array}`'s buffer, and would see the new values where the copy kept the old"
    reads = [t for site in pattern.reads for t in touches(_unstaged_op(site.op, pattern), site.chain)
             if not t.write and t.access.array == value.array]
    for k in range(pattern.outer):
        writes = [t for t in a.touches_in(pattern.scope_path[: k + 1]) if t.write]
        if a.depends(writes, reads, ("=",) * k + ("<",), reorderable_reductions=False,
                     private=frozenset({source.name})):
            return (f"an earlier iteration of a scope around it writes an element of `{value.array}` that the scope "
                    "would read; read directly it would be a dependent iteration")
    return None


def _unstaged_op(op: Op, pattern: _Pattern) -> Op:
    return replace(op, value=with_reads(op.value, pattern.copy.op.target.array, pattern.unstaged))


def rewrite(a: Analysis, at: Resolved) -> Program:
    pattern = _pattern(a, at)
    assert not isinstance(pattern, str)
    body = a.program.body
    for site in pattern.reads:
        body = splice(body, site.path, (_unstaged_op(site.op, pattern),))
    body = splice(body, pattern.nest_path, ())
    return with_body(undeclared(a.program, a.program.buffer_of[pattern.copy.op.target.array]), body)


EXAMPLES = [
    (
        # The packed tile of matmul's `b` read in place again.
        MATMUL_B_PACKED,
        "unstage_reads(op=b_s)",
        MATMUL_IN_K_BLOCKS,
    ),
    (
        # A copy written by hand, transposed and into a scalar row index:
        # any affine source and any order of the nest's variables.
        """kernel k(x) -> y

x f32 [4, 3] heap
y f32 [3, 4] heap
t f32 [3, 4] stack

3 4 t[{0},{1}] = x[{1},{0}]
3 4 y[{0},{1}] = t[{0},{1}] * 2
""",
        "unstage_reads(op=t)",
        """kernel k(x) -> y

x f32 [4, 3] heap
y f32 [3, 4] heap

3 4 y[{0},{1}] = x[{1},{0}] * 2
""",
    ),
]

NOT_APPLICABLE = [
    (
        # `t` is read after the scope too.
        """kernel k(x) -> y, z

x f32 [4] heap
y f32 [4] heap
z f32 [4] heap
t f32 [4] heap

4 t[{0}] = x[{0}]
4 y[{0}] = t[{0}] + 1
4 z[{0}] = t[{0}] * 2
""",
        "unstage_reads(op=t)",
    ),
    (
        # `p` and `q` share a buffer, which the scope writes through `q`:
        # read directly, `p` would already hold the new values.
        """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap
w f32 [8] heap -> p, q
t f32 [8] heap

8 p[{0}] = x[{0}]
8 t[{0}] = p[{0}]
8 q[{0}] = t[{0}] * 2
| y[{0}] = t[{0}] + q[{0}]
""",
        "unstage_reads(op=t)",
    ),
    (
        # The copy writes one element of `t`, four times over.
        """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4 t[0] = x[{0}]
4 y[{0}] = t[0]
""",
        "unstage_reads(op=t)",
    ),
]
