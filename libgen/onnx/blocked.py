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
converted on the way unless a kernel that wants rows (a Winograd or direct convolution, a Concat,
a graph output, a node left to ONNX Runtime) reads it.

The rewrite is of the kernel's text lines, not of the kernels' generators, so that every operator
(a Relu, a pool, a residual Add joined by `--fuse`) reads and writes a blocked value correctly:
each access to a blocked array has its channel index `e` split into `e / B` and `e % B`, which is
affine when e's terms of coefficients that B divides make the block and the others stay within one
block. Where they do not (a loop over all C channels, `{2}`), that loop is split into C/B blocks
of B first. A rewrite that cannot be made (a channel index of another form, a count of channels
that B does not divide) leaves the value in NCHW: `NotBlockable`.

Which values: those a channels-as-lanes convolution's kernel writes and only kernels read that are
channels-as-lanes convolutions or elementwise and pooling nodes (`fuse.FUSABLE`), then on through
those elementwise kernels whose every input of the value's shape is blocked alike; but not a value
that such a kernel would convert back (its output an image in NCHW, for a Concat, say), which the
convolution's write-back does with whole vectors. A rewrite the chosen values would need and
cannot have unblocks the value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from .channels_last import DERIVED_SUFFIX
from .fuse import FUSABLE
from .nodes import ACCESS, LINE, Array, Kernel, Node

_REFERENCE = re.compile(r"\{(\d+)\}")
_TOKEN = re.compile(r"\{\d+\}|\d+|[-+*()]")


class NotBlockable(Exception):
    """A kernel whose accesses to an array cannot be rewritten to blocks of channels."""


@dataclass(frozen=True)
class _Affine:
    """An index: coefficient by loop reference, and a constant."""

    terms: tuple[tuple[int, int], ...]
    constant: int

    @staticmethod
    def parse(text: str) -> _Affine:
        """An index as the format writes one: integers, `{d}`, `+`, `-`, `*` by an integer, parentheses."""
        tokens = _TOKEN.findall(text)
        if "".join(tokens) != text.replace(" ", ""):
            raise NotBlockable(f"index `{text}` is not affine")
        parsed, rest = _sum(tokens)
        if rest:
            raise NotBlockable(f"index `{text}` is not affine")
        return _Affine(tuple(sorted((r, c) for r, c in parsed.items() if r is not None and c)), parsed.get(None, 0))

    def render(self) -> str:
        parts = [(c, f"{{{r}}}" if abs(c) == 1 else f"{{{r}}}*{abs(c)}") for r, c in self.terms]
        parts += [(self.constant, str(abs(self.constant)))] if self.constant else []
        parts.sort(key=lambda part: part[0] < 0)
        return "".join(("-" if c < 0 else "+" if i else "") + t for i, (c, t) in enumerate(parts)) or "0"

    def split(self, loop: int, inner: int) -> _Affine:
        """The index after loop `loop` became loops `loop` (outer) and `loop + 1` (of `inner`)."""
        terms: dict[int, int] = {}
        for r, c in self.terms:
            if r == loop:
                terms[loop], terms[loop + 1] = c * inner, c
            else:
                terms[r + 1 if r > loop else r] = c
        return _Affine(tuple(sorted(terms.items())), self.constant)


@dataclass(frozen=True)
class _Access:
    array: str
    indices: tuple[_Affine, ...]

    def render(self) -> str:
        return f"{self.array}[{','.join(i.render() for i in self.indices)}]"


@dataclass(frozen=True)
class _Line:
    """A body line as Kernel.loop writes it: its expression cut into text and accesses."""

    sizes: tuple[int, ...]
    target: _Access
    assign: str
    pieces: tuple[str | _Access, ...]

    @staticmethod
    def parse(text: str) -> _Line:
        line = LINE.fullmatch(text)
        if line is None:
            raise NotBlockable(f"line `{text}` is not a loop nest")
        pieces: list[str | _Access] = []
        expression, at = line["expression"], 0
        for match in ACCESS.finditer(expression):
            end = expression.index("]", match.end())
            pieces += [expression[at:match.start()], _access(match[1], expression[match.end():end])]
            at = end + 1
        pieces.append(expression[at:])
        return _Line(tuple(int(s) for s in line["sizes"].split()), _access(line["array"], line["indices"]),
                     line["assign"], tuple(pieces))

    def render(self) -> str:
        expression = "".join(p if isinstance(p, str) else p.render() for p in self.pieces)
        return " ".join([*map(str, self.sizes), self.target.render(), self.assign, expression])

    @property
    def accesses(self) -> list[_Access]:
        return [self.target, *(p for p in self.pieces if isinstance(p, _Access))]

    def split(self, loop: int, inner: int) -> _Line:
        """Loop `loop` as an outer loop and an inner one of `inner` iterations."""
        def renumber(match: re.Match) -> str:
            r = int(match[1])
            return f"({{{r}}}*{inner}+{{{r + 1}}})" if r == loop else f"{{{r + 1 if r > loop else r}}}"

        def moved(access: _Access) -> _Access:
            return _Access(access.array, tuple(i.split(loop, inner) for i in access.indices))

        sizes = (*self.sizes[:loop], self.sizes[loop] // inner, inner, *self.sizes[loop + 1:])
        pieces = tuple(_REFERENCE.sub(renumber, p) if isinstance(p, str) else moved(p) for p in self.pieces)
        return _Line(sizes, moved(self.target), self.assign, pieces)


_Terms = dict  # loop reference (None: the constant) -> coefficient


def _sum(tokens: list[str]) -> tuple[_Terms, list[str]]:
    total: _Terms = {}
    sign = 1
    while tokens and tokens[0] in "+-":
        sign, tokens = (-sign if tokens[0] == "-" else sign), tokens[1:]
    while True:
        term, tokens = _product(tokens)
        for r, c in term.items():
            total[r] = total.get(r, 0) + sign * c
        if not tokens or tokens[0] not in "+-":
            return total, tokens
        sign, tokens = (-1 if tokens[0] == "-" else 1), tokens[1:]


def _product(tokens: list[str]) -> tuple[_Terms, list[str]]:
    result, tokens = _factor(tokens)
    while tokens and tokens[0] == "*":
        factor, tokens = _factor(tokens[1:])
        if set(factor) <= {None}:
            result = {r: c * factor.get(None, 0) for r, c in result.items()}
        elif set(result) <= {None}:
            result = {r: c * result.get(None, 0) for r, c in factor.items()}
        else:
            raise NotBlockable("a product of two loop references is not affine")
    return result, tokens


def _factor(tokens: list[str]) -> tuple[_Terms, list[str]]:
    if not tokens:
        raise NotBlockable("an index ends early")
    head, tokens = tokens[0], tokens[1:]
    if head == "(":
        inside, tokens = _sum(tokens)
        if not tokens or tokens[0] != ")":
            raise NotBlockable("unbalanced parentheses in an index")
        return inside, tokens[1:]
    if head == "-":
        inside, tokens = _factor(tokens)
        return {r: -c for r, c in inside.items()}, tokens
    if head.startswith("{"):
        return {int(head[1:-1]): 1}, tokens
    if head.isdigit():
        return {None: int(head)}, tokens
    raise NotBlockable(f"`{head}` in an index")


def _lanes_innermost(line: _Line, blocks: Mapping[str, int]) -> _Line:
    """A line that writes a blocked array element by element, its loop over the lanes innermost,
    where a write-back to NCHW had its positions: the lanes are then the vector, contiguous.
    Only a plain assignment whose target uses every loop and which reads no target element: its
    iterations are independent, and any order computes the same."""
    target, loops = line.target, len(line.sizes)
    if target.array not in blocks or line.assign != "=" or any(a.array == target.array for a in line.accesses[1:]):
        return line
    used = {r for index in target.indices for r, _ in index.terms}
    lane = target.indices[-1].terms
    if used != set(range(loops)) or len(lane) != 1 or lane[0][1] != 1 or lane[0][0] == loops - 1:
        return line
    moved = lane[0][0]
    order = [r for r in range(loops) if r != moved] + [moved]  # new position -> old loop
    new = {old: position for position, old in enumerate(order)}
    text = "".join(p if isinstance(p, str) else "\0" for p in line.pieces)
    if _REFERENCE.search(text):  # a loop read as a value: left as it is
        return line

    def renamed(access: _Access) -> _Access:
        return _Access(access.array, tuple(_Affine(tuple(sorted((new[r], c) for r, c in i.terms)), i.constant)
                                           for i in access.indices))

    return _Line(tuple(line.sizes[r] for r in order), renamed(target), line.assign,
                 tuple(p if isinstance(p, str) else renamed(p) for p in line.pieces))


def _access(array: str, indices: str) -> _Access:
    return _Access(array, tuple(_Affine.parse(i.replace(" ", "")) for i in indices.split(",") if i.strip()))


def _decompose(index: _Affine, block: int, sizes: Sequence[int]) -> tuple[_Affine, _Affine] | int:
    """(index / block, index % block) as two indices, or the loop to split first so that they are."""
    outer = [(r, c // block) for r, c in index.terms if c % block == 0]
    inner = [(r, c) for r, c in index.terms if c % block]
    lowest = index.constant % block + sum(min(0, c * (sizes[r] - 1)) for r, c in inner)
    highest = index.constant % block + sum(max(0, c * (sizes[r] - 1)) for r, c in inner)
    if 0 <= lowest and highest < block:
        return (_Affine(tuple(outer), index.constant // block),
                _Affine(tuple(inner), index.constant % block))
    for r, c in inner:  # a loop that crosses blocks, whose steps a block holds a whole number of
        if 0 < c < block and block % c == 0 and sizes[r] * c > block and (sizes[r] * c) % block == 0:
            return r
    raise NotBlockable(f"channel index `{index.render()}` crosses blocks of {block}")


def _blocked_line(line: _Line, blocks: Mapping[str, int]) -> _Line:
    while True:
        accesses = []
        for access in line.accesses:
            block = blocks.get(access.array)
            if block is None:
                accesses.append(access)
                continue
            parts = _decompose(access.indices[1], block, line.sizes)
            if isinstance(parts, int):
                line = line.split(parts, block // dict(access.indices[1].terms)[parts])
                break
            first, *rest = access.indices[2:]
            accesses.append(_Access(access.array, (access.indices[0], parts[0], first, *rest, parts[1])))
        else:
            pieces = iter(accesses[1:])
            return _Line(line.sizes, accesses[0], line.assign,
                         tuple(p if isinstance(p, str) else next(pieces) for p in line.pieces))


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
    result.lines = [_lanes_innermost(_blocked_line(line, blocks), blocks).render() for line in lines]
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
            channel = {a.array: a.indices[1] for a in line.accesses if len(a.indices) >= 3}
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


def _reads_blocks(nodes: Sequence[Node], kernel: Kernel) -> bool:
    return all(node.op in FUSABLE for node in nodes) or _lanes_block(nodes, kernel) is not None


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
        block = _lanes_block(nodes, kernel)
        if block is None and all(node.op in FUSABLE for node in nodes):
            block = _passed_on(kernel, blocks)
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
    of spatial extent that is not blocked, for a Concat or a graph output): a product's write-back
    converts with whole vectors, an elementwise line element by element (Inception v2: 4% slower)."""
    while True:
        converting = {value for value in blocks for i in readers.get(value, ()) if _converts(groups[i], blocks)}
        if not converting:
            return blocks
        blocks = {v: b for v, b in blocks.items() if v not in converting}


def _converts(group: tuple[Sequence[Node], Kernel], blocks: Mapping[str, int]) -> bool:
    nodes, kernel = group
    return _lanes_block(nodes, kernel) is None and any(
        kernel.sources[a.name] not in blocks and any(size > 1 for size in a.shape[2:]) for a in kernel.outputs)


def _passed_on(kernel: Kernel, blocks: Mapping[str, int]) -> int | None:
    """The block of an elementwise kernel's inputs of its output's shape, when all are blocked alike."""
    shapes = {a.shape for a in kernel.outputs}
    alike = {blocks.get(kernel.sources[a.name]) for a in kernel.inputs if a.shape in shapes}
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
