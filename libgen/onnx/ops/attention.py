"""Operators of attention layers: RotaryEmbedding.

    check_node("RotaryEmbedding", {"x": normal(2, 3, 5, 8), "cos": cos, "sin": sin}, {})

RotaryEmbedding turns pairs of each head's first `rotary_embedding_dim` features by the angle of
the token's position: (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), the pairs being the two
halves of those features, or neighbours when `interleaved`; the features past them are copied.
The input is [batch, heads, sequence, head] or [batch, sequence, heads * head] (`num_heads`
given); the caches are [batch, sequence, rotary / 2]. With `position_ids`, a token's angles are a
row of 2-D caches picked by its position: indirection, unless the positions and the caches are
constants, which the import then picks itself (derived constants, as a folded BatchNormalization's).
"""

from __future__ import annotations

import numpy as np

from ..nodes import Array, Derived, Kernel, Nest, Node, Unsupported, Value, affine
from ..registry import operator
from .layout import expect


@operator("RotaryEmbedding")
def rotary_embedding(node: Node) -> Kernel:
    x, cos, sin, positions = node.inputs[0], node.input(1), node.input(2), node.input(3)
    (y,) = node.outputs
    if x.rank not in (3, 4) or cos is None or sin is None:
        raise Unsupported("invalid", f"RotaryEmbedding of a rank-{x.rank} input, or without its caches")
    expect(y, x.shape)
    heads = node.attr("num_heads", 0)
    if x.rank == 3 and (heads < 1 or x.shape[2] % heads):
        raise Unsupported("invalid", f"a 3-D input of {x.shape[2]} features needs num_heads dividing them")
    # [batch, sequence, heads, head], and where each is in the input's own order
    batch, sequence, heads, head = (x.shape[0], x.shape[1], heads, x.shape[2] // heads) if x.rank == 3 else \
        (x.shape[0], x.shape[2], x.shape[1], x.shape[3])
    rotary = node.attr("rotary_embedding_dim", 0) or head
    if rotary % 2 or rotary > head:
        raise Unsupported("invalid", f"rotary_embedding_dim {rotary} must be even and at most the head's {head}")
    kernel = Kernel("rotaryembedding")
    xs = kernel.input(x)
    coss, sins = (_angles(kernel, node, cache, positions, name, (batch, sequence, rotary // 2))
                  for cache, name in ((cos, "cos"), (sin, "sin")))
    ys = kernel.output(y)

    def at(array: Array, b: str, s: str, n: str, feature: str) -> str:
        return array.at([b, s, affine([(n, head), (feature, 1)])] if x.rank == 3 else [b, n, s, feature])

    half = rotary // 2
    line = Nest()
    b, s, n = line.over(batch), line.over(sequence), line.over(heads)
    i = line.over(half)
    # the pair's features: neighbours, or the same place in the two halves
    first, second = (affine([(i, 2)]), affine([(i, 2)], 1)) if node.attr("interleaved", 0) else \
        (affine([(i, 1)]), affine([(i, 1)], half))
    c, sn = coss.at([b, s, i]), sins.at([b, s, i])
    x1, x2 = at(xs, b, s, n, first), at(xs, b, s, n, second)
    kernel.loop(line.sizes, at(ys, b, s, n, first), "=", f"{c} * {x1} - {sn} * {x2}")
    kernel.loop(line.sizes, at(ys, b, s, n, second), "=", f"{sn} * {x1} + {c} * {x2}")
    if rotary < head:
        line = Nest()
        b, s, n = line.over(batch), line.over(sequence), line.over(heads)
        feature = affine([(line.over(head - rotary), 1)], rotary)
        kernel.loop(line.sizes, at(ys, b, s, n, feature), "=", at(xs, b, s, n, feature))
    return kernel


def _angles(kernel: Kernel, node: Node, cache: Value, positions: Value | None, name: str,
            shape: tuple[int, int, int]) -> Array:
    """The cache as the kernel reads it, [batch, sequence, rotary / 2]: as given, or its rows at
    the constant `positions` (a derived constant)."""
    if positions is None:
        if cache.shape != shape:
            raise Unsupported("invalid", f"`{cache.name}` has shape {list(cache.shape)}, not {list(shape)}")
        return kernel.input(cache, name)
    if positions.constant is None or cache.constant is None:
        raise Unsupported("indirection", "position_ids pick the caches' rows, known only when the model runs")
    picked = np.asarray(positions.constant)
    if cache.rank != 2 or cache.shape[1] != shape[2] or picked.shape != shape[:2] or picked.min() < 0 \
            or picked.max() >= cache.shape[0]:
        raise Unsupported("invalid", f"position_ids {list(picked.shape)} into `{cache.name}` {list(cache.shape)}")
    rows = Derived(np.ascontiguousarray(cache.constant[picked]), (cache.name, positions.name),
                   f"{node.name}'s {name} cache at its constant positions")
    return kernel.derived_input(Value(f"{cache.name}.{positions.name}", cache.dtype, shape), rows, name)
