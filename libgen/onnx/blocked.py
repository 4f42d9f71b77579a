"""Activations in blocks of channels across the graph, as ONNX Runtime's NCHWc transformer and
oneDNN's nChw16c lay them out.

    blocks = blocked_values(groups, keep={"logits"}, outside=read_by_other_nodes)  # value -> B
    kernel = with_blocked(kernel, {"y": 32})   # its array y now [N, C/32, H, W, 32], lines rewritten

A convolution whose vector lanes are its output channels (channels_last.py) accumulates in blocks of
B channels, each position's B channels adjacent: `t[n, c/B, h, w, c%B]`. Written back to the
graph's NCHW layout, every vector of the write-back gathers one channel from B positions, a fifth
of a 1x1 convolution's time at 28x28 on an AVX-512 Xeon; the next such convolution then broadcasts
its input element by element, which any layout serves. So the value between two of them is kept in
their blocked layout: `y[n, c/B, h, w, c%B]`, the write-back a contiguous copy, and nothing is
converted on the way unless a kernel that wants rows (a Winograd or direct convolution, a graph
output, a node left to ONNX Runtime) reads it.

The rewrite is of the kernel's text lines, not of the kernels' generators, so that every operator
(a Relu, a pool, a residual Add joined by `--fuse`) reads and writes a blocked value correctly:
each access to a blocked array has its channel index `e` split into `e / B` and `e % B`, which is
affine when e's terms of coefficients that B divides make the block and the others stay within one
block. Where they do not (a loop over all C channels, `{2}`), that loop is split into C/B blocks
of B first. A rewrite that cannot be made (a channel index of another form, a count of channels
that B does not divide) leaves the value in NCHW: `NotBlockable`.

Which values: those a channels-as-lanes convolution's kernel writes and only kernels read that are
channels-as-lanes convolutions, elementwise and pooling nodes (`fuse.FUSABLE`) or Concats along the
channels, none of them a window along the channels (`ACROSS_CHANNELS`: LRN); then on through
those elementwise and pooling kernels whose every image of the output's channels is blocked alike,
and through such Concats whose every input is. Blocked alike, a Concat's inputs are stretches of its
output as in NCHW, and their kernels write them there in place (plan.concatenated_in_place):
SqueezeNet's fire modules and Inception's blocks stay in blocks from one convolution to the next
(SqueezeNet 3.12 -> 2.63 ms on an AVX-512 Xeon, Inception v2 17.4 -> 15.8 ms). Not a value that
such a kernel would convert back (its output an image in NCHW: for a graph output, or a Concat
with an input in rows), which the convolution's write-back does with whole vectors. A rewrite the
chosen values would need and cannot have unblocks the value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from dojo_ir.affine import Affine, NotAffine, affine
from dojo_ir.fastparse import fast_line
from dojo_ir.printer import op_text
from dojo_ir.refs import ref, substitute_op, used_as_value
from dojo_ir.tree import Access, Op, accesses, map_accesses

from .channels_last import DERIVED_SUFFIX
from .fuse import FUSABLE
from .nodes import Array, Kernel, Node


class NotBlockable(Exception):
    """A kernel whose accesses to an array cannot be rewritten to blocks of channels."""


@dataclass(frozen=True)
class _Line:
    """A body line as Kernel.loop writes it: its loops' sizes and its operation, read by the
    format's own parser and printed back by its printer."""

    sizes: tuple[int, ...]
    op: Op

    @staticmethod
    def parse(text: str) -> _Line:
        body = fast_line(text, 1, "body")
        if body is None or any(token.kind != "size" for token in body.tokens):
            raise NotBlockable(f"line `{text}` is not a loop nest")
        return _Line(tuple(token.size for token in body.tokens), body.op)

    def render(self) -> str:
        return " ".join([*map(str, self.sizes), op_text(self.op)])

    @property
    def accesses(self) -> list[Access]:
        return [self.op.target, *accesses(self.op.value)]

    def split(self, loop: int, inner: int) -> _Line:
        """Loop `loop` as an outer loop and an inner one of `inner` iterations."""
        sizes = (*self.sizes[:loop], self.sizes[loop] // inner, inner, *self.sizes[loop + 1:])
        return _Line(sizes, substitute_op(self.op, lambda d: ref(loop).scale(inner) + ref(loop + 1) if d == loop
                                          else ref(d + 1) if d > loop else ref(d)))


def _index(access: Access, position: int) -> Affine:
    try:
        return affine(access.index[position])
    except NotAffine as error:
        raise NotBlockable(f"index `{access.index[position]}` is not affine") from error


def _decompose(index: Affine, block: int, sizes: Sequence[int]) -> tuple[Affine, Affine] | int:
    """(index / block, index % block) as two indices, or the loop to split first so that they are."""
    outer = Affine.of({d: c // block for d, c in index.terms if c % block == 0}, index.const // block)
    inner = Affine.of({d: c for d, c in index.terms if c % block}, index.const % block)
    lowest, highest = inner.bounds(sizes)
    if 0 <= lowest and highest < block:
        return outer, inner
    for d, c in inner.terms:  # a loop that crosses blocks, whose steps a block holds a whole number of
        if 0 < c < block and block % c == 0 and sizes[d] * c > block and (sizes[d] * c) % block == 0:
            return d
    raise NotBlockable(f"channel index `{index.to_expr()}` crosses blocks of {block}")


def _blocked_line(line: _Line, blocks: Mapping[str, int]) -> _Line:
    while True:
        rewrite: dict[Access, Access] = {}
        for access in line.accesses:
            block = blocks.get(access.array)
            if block is None:
                continue
            channel = _index(access, 1)
            parts = _decompose(channel, block, line.sizes)
            if isinstance(parts, int):
                line = line.split(parts, block // channel.coef(parts))
                break
            rest = access.index[2:]
            rewrite[access] = replace(access, index=(access.index[0], parts[0].to_expr(), *rest, parts[1].to_expr()))
        else:
            return _rewritten(line, rewrite)


def _rewritten(line: _Line, rewrite: Mapping[Access, Access]) -> _Line:
    """`line` with each access in `rewrite` replaced."""
    def change(access: Access) -> Access:
        return rewrite.get(access, access)

    return _Line(line.sizes, replace(line.op, target=change(line.op.target), value=map_accesses(line.op.value, change)))


def _lanes_innermost(line: _Line, blocks: Mapping[str, int]) -> _Line:
    """A line that writes a blocked array element by element, its loop over the lanes innermost,
    where a write-back to NCHW had its positions: the lanes are then the vector, contiguous.
    Only a plain assignment whose target uses every loop and which reads no target element: its
    iterations are independent, and any order computes the same."""
    op, loops = line.op, len(line.sizes)
    if op.target.array not in blocks or op.assign != "=" or any(a.array == op.target.array
                                                                 for a in accesses(op.value)):
        return line
    used = {d for i in range(len(op.target.index)) for d, _ in _index(op.target, i).terms}
    lane = _index(op.target, -1)
    if used != set(range(loops)) or len(lane.terms) != 1 or lane.terms[0][1] != 1 \
            or lane.terms[0][0] == loops - 1 or any(used_as_value(op.value, d) for d in range(loops)):
        return line
    moved = lane.terms[0][0]
    order = [d for d in range(loops) if d != moved] + [moved]  # new position -> old loop
    new = {old: position for position, old in enumerate(order)}
    return _Line(tuple(line.sizes[d] for d in order), substitute_op(op, lambda d: ref(new[d])))


def blocked_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    """An NC... array's shape in blocks of `block` channels: (N, C/block, ..., block)."""
    return (shape[0], shape[1] // block, *shape[2:], block)


def with_blocked(kernel: Kernel, blocks: Mapping[str, int]) -> Kernel:
    """`kernel` with its arrays named in `blocks` (at least 3 dimensions, channels second, which
    their block divides) laid out in blocks of that many channels; NotBlockable when it cannot."""
    lines = [_Line.parse(text) for text in kernel.lines]
    blocks = _with_copies(kernel, lines, blocks)
    for array in kernel.arrays:
        if array.name in blocks and (len(array.shape) < 3 or array.shape[1] % blocks[array.name]):
            raise NotBlockable(f"`{array.name}` {list(array.shape)} in blocks of {blocks[array.name]}")
    result = Kernel(kernel.name)

    def layout(arrays: list[Array]) -> list[Array]:
        return [replace(a, shape=blocked_shape(a.shape, blocks[a.name])) if a.name in blocks else a for a in arrays]

    result.inputs, result.outputs = layout(kernel.inputs), layout(kernel.outputs)
    result.temporaries = layout(kernel.temporaries)
    result.lines = [_lanes_innermost(_blocked_line(line, blocks), blocks).render()
                    if any(a.array in blocks for a in line.accesses) else text
                    for line, text in zip(lines, kernel.lines, strict=True)]
    result.sources, result.derived = dict(kernel.sources), dict(kernel.derived)
    result.notes = [*kernel.notes, "Blocked layout: " + ", ".join(
        f"`{name}` in blocks of {block} channels, innermost" for name, block in blocks.items()) + "."]
    return result


def _with_copies(kernel: Kernel, lines: Sequence[_Line], blocks: Mapping[str, int]) -> dict[str, int]:
    """`blocks` and the temporaries that a line accesses channel for channel beside a blocked array
    (a convolution's padded input, a fused product's result that a residual line adds), in the
    same blocks: else that line would transpose, element by element, between the two layouts."""
    blocks = dict(blocks)
    shapes = {a.name: a.shape for a in kernel.temporaries}
    grown = True
    while grown:
        grown = False
        for line in lines:
            channel = {a.array: _index(a, 1) for a in line.accesses if len(a.index) >= 3}
            for name, index in channel.items():
                if name not in shapes or name in blocks or len(shapes[name]) < 3:
                    continue
                alike = [blocks[a] for a, i in channel.items() if a in blocks and i == index
                         and not shapes[name][1] % blocks[a]]
                if alike:
                    blocks[name], grown = alike[0], True
    return blocks


# -- which values -----------------------------------------------------------------------------------

def _lanes_block(nodes: Sequence[Node], kernel: Kernel) -> int | None:
    """The block of channels in which the group's convolutions accumulate, when every one of them
    has its output channels as vector lanes (and they agree)."""
    convs = sum(node.op == "Conv" for node in nodes)
    derived = [d.value.shape[-1] for name, d in kernel.derived.items() if name.endswith(DERIVED_SUFFIX)]
    if not convs or len(derived) != convs or len(set(derived)) != 1:
        return None
    return int(derived[0])


# nodes whose window slides along the channels: blocked, each window's channels straddle blocks and
# the lines run a scalar loop over them (ZFNet-512's stem, a Conv, Relu, LRN and MaxPool in one
# kernel: 9.9 ms with the LRN's values in blocks, 3.2 ms with them in NCHW), so a value they touch
# stays in NCHW
ACROSS_CHANNELS = {"LRN"}


def _reads_blocks(nodes: Sequence[Node], kernel: Kernel) -> bool:
    return not _across_channels(nodes) and (all(node.op in FUSABLE for node in nodes) or _channel_concat(nodes)
                                            or _lanes_block(nodes, kernel) is not None)


def _channel_concat(nodes: Sequence[Node]) -> bool:
    """A Concat along the channels of images: blocked alike, its inputs' blocks follow one another
    as their channels do, and each input is a stretch of the output as it is in NCHW."""
    if len(nodes) != 1 or nodes[0].op != "Concat":
        return False
    rank = nodes[0].outputs[0].rank
    return rank >= 3 and nodes[0].attr("axis", 0) % rank == 1


def _across_channels(nodes: Sequence[Node]) -> bool:
    return any(node.op in ACROSS_CHANNELS for node in nodes)


def blocked_values(groups: Sequence[tuple[Sequence[Node], Kernel]], keep: Collection[str],
                   outside: Collection[str]) -> dict[str, int]:
    """The values to lay out in blocks (value -> channels a block) among the calls `groups` (in an
    order that runs the graph): see the module's docstring. `keep` (graph outputs) and `outside`
    (values that a node without a kernel reads) stay in NCHW."""
    readers: dict[str, list[int]] = {}
    for i, (_, kernel) in enumerate(groups):
        for array in kernel.inputs:
            readers.setdefault(kernel.sources[array.name], []).append(i)
    blocks: dict[str, int] = {}
    for nodes, kernel in groups:
        if _across_channels(nodes):
            continue
        block = _lanes_block(nodes, kernel)
        if block is None and all(node.op in FUSABLE for node in nodes):
            block = _passed_on(kernel, blocks)
        elif block is None and _channel_concat(nodes):
            block = _blocked_alike(kernel.inputs, kernel, blocks)
        if block is None:
            continue
        for array in kernel.outputs:
            value = kernel.sources[array.name]
            if value in keep or value in outside or len(array.shape) < 3 or array.shape[1] % block \
                    or all(size == 1 for size in array.shape[2:]) or value not in readers:
                continue
            if all(_reads_blocks(*groups[i]) for i in readers[value]):
                blocks[value] = block
    return _converted_by_products(groups, readers, blocks)


def _converted_by_products(groups: Sequence[tuple[Sequence[Node], Kernel]], readers: Mapping[str, list[int]],
                           blocks: dict[str, int]) -> dict[str, int]:
    """`blocks` without the values that an elementwise kernel would convert back to NCHW (an output
    of spatial extent that is not blocked, for a graph output): a product's write-back converts
    with whole vectors, an elementwise line element by element (Inception v2: 4% slower); nor the
    output of a Concat with an input not blocked alike, which would convert that input the other way."""
    while True:
        converting = {value for value in blocks for i in readers.get(value, ()) if _converts(groups[i], blocks)}
        converting |= {kernel.sources[a.name] for nodes, kernel in groups if _channel_concat(nodes)
                       and _blocked_alike(kernel.inputs, kernel, blocks) is None for a in kernel.outputs}
        if not converting & blocks.keys():
            return blocks
        blocks = {v: b for v, b in blocks.items() if v not in converting}


def _converts(group: tuple[Sequence[Node], Kernel], blocks: Mapping[str, int]) -> bool:
    nodes, kernel = group
    return _lanes_block(nodes, kernel) is None and any(
        kernel.sources[a.name] not in blocks and any(size > 1 for size in a.shape[2:]) for a in kernel.outputs)


def _passed_on(kernel: Kernel, blocks: Mapping[str, int]) -> int | None:
    """The block of an elementwise or pooling kernel's images of its output's channels (its inputs
    of the output's rank, batch and channels, not one value a channel), when all are blocked alike."""
    heads = {(len(a.shape), a.shape[:2]) for a in kernel.outputs}
    return _blocked_alike([a for a in kernel.inputs if (len(a.shape), a.shape[:2]) in heads
                           and any(size > 1 for size in a.shape[2:])], kernel, blocks)


def _blocked_alike(arrays: Sequence[Array], kernel: Kernel, blocks: Mapping[str, int]) -> int | None:
    """The block of the values of `arrays` when every one is blocked, all alike."""
    alike = {blocks.get(kernel.sources[a.name]) for a in arrays}
    return next(iter(alike)) if len(alike) == 1 and None not in alike else None


def blocked_groups(groups: list[tuple[tuple[Node, ...], Kernel]], keep: Collection[str],
                   outside: Collection[str]) -> tuple[list[tuple[tuple[Node, ...], Kernel]], dict[str, int]]:
    """`groups` with the values `blocked_values` chooses laid out in blocks, and those values;
    a value that some kernel touching it cannot be rewritten for stays in NCHW."""
    blocks = blocked_values(groups, keep, outside)
    while True:
        rewritten, refused = [], set()
        for nodes, kernel in groups:
            arrays = {a.name: blocks[v] for a, v in ((a, kernel.sources.get(a.name)) for a in kernel.arrays)
                      if v in blocks}
            try:
                rewritten.append((nodes, with_blocked(kernel, arrays) if arrays else kernel))
            except NotBlockable:
                refused.update(kernel.sources[name] for name in arrays)
        if not refused:
            return rewritten, blocks
        blocks = {v: b for v, b in blocks.items() if v not in refused}
