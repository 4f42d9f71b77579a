"""A register tile's neighbours brought into its nest: the operation that starts the reduction's
target (`c[...] = b[...]`, the loop nest just before) and the one that reads the result
elementwise (`y[...] = max(c[...] + r[...], 0)`, the loop nest just after). Each is split and
ordered as the reduction's scopes and joined with them, down to the tile: a tile is then started,
reduced and finished while its values are in registers, where passes of their own over the
target wrote and read it again through the cache. On a convolution with its bias, residual and
ReLU (ResNet-50's 1x1 from 64 to 256 channels at 56x56), that took 0.97 ms a call against 0.79
ms (Intel Xeon, 2 cores), the compiler forwarding the tile's stores to the epilogue's loads.

The neighbour's access to the target is matched to the reduction's by the coefficients of their
indices, so that a dimension the import flattened (a channels-innermost row, `t[.., h*1792 +
w*32 + c]`) splits into the reduction's scopes along it as a dimension of its own does."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from codegen.targets import Target
from dojo_ir.affine import NotAffine, affine
from dojo_ir.analysis import Site
from dojo_ir.tree import Access, Scope

from . import vectorization
from .state import State, last_coef


def fuse_epilogue(state: State, root: int, target: Access, roles: list[str], chain: tuple[Scope, ...],
                  facts: Target) -> bool:
    """Move the loop nest after the blocked reduction at `root`, one operation reading the
    reduction's target elementwise, into the reduction's nest just after the tile's store. The
    reduction's scopes are `roles` (register_tile's names) of sizes `chain`; `target` is its
    target."""
    if root + 1 >= len(state.program.body):
        return False
    after = state.analysis.first_site((root + 1,))
    reads = [r for r in after.op.reads if r.array == target.array]
    if not reads or any(r != reads[0] for r in reads) or after.op.reduction is not None or not _alone(after):
        return False
    joined = _align(state, after, reads[0], target, roles, chain)
    aligned = state.analysis.by_label[after.label]
    if joined is None or last_coef(aligned.op.target, len(aligned.chain) - 1) != 1:
        return False  # an output whose last dimension is not the tile's lanes (NCHW): its vectors would scatter
    return _join(state, state.analysis.first_site((root,)).label, after.label, joined, facts)


def fuse_init(state: State, root: int, target: Access, roles: list[str], chain: tuple[Scope, ...],
              facts: Target) -> bool:
    """Move the operation that sets a blocked reduction's target (`c[...] = 0`, the loop nest just
    before the reduction's, at `root`) into the reduction's nest, just before the tile's load, so
    that each tile is set while it is in cache instead of in a pass over the whole array."""
    if root == 0:
        return False
    init = state.analysis.first_site((root - 1,))
    if init.op.assign != "=" or init.op.target.array != target.array or not _alone(init):
        return False
    joined = _align(state, init, init.op.target, target, roles, chain)
    return joined is not None and _join(state, init.label, init.label, joined, facts)


def _alone(site: Site) -> bool:
    """Whether `site`'s operation is its loop nest's only one, every scope holding one child."""
    return len(site.path) == len(site.chain) + 1 and all(len(scope.body) == 1 for scope in site.chain)


def _join(state: State, first: str, moved: str, joined: int, facts: Target) -> bool:
    """Join the `joined` outer scopes around `first` with the next nest's, then unroll `moved`'s
    scopes inside them and vectorise its innermost, as the tile's are."""
    for depth in range(joined):
        if not state.play(f"join_scopes(op={first}, depth={depth})"):
            return False
    chain = state.analysis.by_label[moved].chain
    for depth in range(joined, len(chain) - 1):
        if chain[depth].size > 1 and not state.play(f"unroll_scope(op={moved}, depth={depth})"):
            return False
    return vectorization.vectorize_innermost(state, moved, facts) is not None


def _align(state: State, site: Site, access: Access, target: Access, roles: list[str],
           chain: tuple[Scope, ...]) -> int | None:
    """Split and order the scopes of `site`'s nest as the reduction's (`roles`, sizes `chain`)
    along the array that `access` (the nest's) and `target` (the reduction's) both index; the
    number of the reduction's scopes around its reduction that the nest then starts with, or
    None when its scopes do not cover the same elements in the same way."""
    parts = _spanned(access, [s.size for s in site.chain], target, chain)
    if parts is None:
        return None
    site_roles: list[str] = []
    for spanned in parts:
        sizes = [chain[d].size for d in spanned]
        for k in range(len(spanned) - 1):  # [N] -> [s1, s2 * s3] -> [s1, s2, s3]
            if not state.play(f"split_scope(op={site.label}, depth={len(site_roles) + k}, "
                              f"factor={prod(sizes[k + 1:])})"):
                return None
        site_roles += [roles[d] for d in spanned]
    order = [r for r in roles if r in site_roles]
    for position, role in enumerate(order):
        at = site_roles.index(role)
        for depth in range(at - 1, position - 1, -1):
            if not state.play(f"swap_scopes(op={site.label}, depth={depth})"):
                return None
            site_roles[depth], site_roles[depth + 1] = site_roles[depth + 1], site_roles[depth]
    outer = roles[:roles.index("Kt")]
    return len(outer) if site_roles[:len(outer)] == outer else None


def _spanned(access: Access, sizes: Sequence[int], target: Access, chain: tuple[Scope, ...]) -> list[list[int]] | None:
    """For each scope of a nest (of `sizes`) whose operation indexes the array as `access` does,
    the scopes of the reduction (`chain`, indexing it as `target`) that walk the same elements,
    outermost first: those whose coefficient in the same index lies within the scope's stride and
    its stride times its size, each the stride of the ones inside it. None when a scope moves
    more than one index, or the reduction's scopes do not tile it exactly or walk elements no
    scope of the nest does."""
    try:
        forms, reduced = [affine(i) for i in access.index], [affine(i) for i in target.index]
    except NotAffine:
        return None
    if len(forms) != len(reduced) or any(f.const != r.const for f, r in zip(forms, reduced, strict=True)):
        return None
    parts: list[list[int]] = []
    claimed: set[int] = set()
    for depth, size in enumerate(sizes):
        moved = [(p, f.coef(depth)) for p, f in enumerate(forms) if f.coef(depth)]
        if len(moved) != 1:
            return None
        position, step = moved[0]
        inside = sorted((c, d) for d, c in reduced[position].terms if c % step == 0 and step <= c < step * size)
        stride = step
        for coefficient, d in inside:  # innermost first
            if coefficient != stride:
                return None
            stride *= chain[d].size
        if stride != step * size:
            return None
        parts.append([d for _, d in reversed(inside)])
        claimed.update(d for _, d in inside)
    if any(d not in claimed for r in reduced for d, _ in r.terms):
        return None
    return parts

