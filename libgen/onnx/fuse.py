"""`dojo import --fuse`: elementwise chains and reductions with the elementwise nodes around them,
each joined into one kernel whose loops the tuner can then fuse.

    fused = fuse_graph([(node, kernel_for(node)) for node in nodes], keep={"logits"})
    for covered, kernel in fused:
        write(kernel.render(comment=...))   # one file per group; `kernel.sources` names its ONNX values

A node is fusable when its operator computes each output element from the elements at the same
position (ELEMENTWISE) or reduces and normalises along axes or windows (REDUCTIONS); matrix products,
convolutions and layout operators stay alone. Groups grow in the graph's order: a fusable node
joins the groups of the fusable nodes it reads from when the graph of calls stays acyclic, that is
when no path leaves the joined group and comes back into it. A group's kernels are joined as they
are written: their arrays renamed apart, a value made and read only inside the group becomes a
temporary, every other value it makes stays an output, and a value that several members read is
one input. Then a temporary that one plain line writes whole and one later line reads is written
into that line's expression (`_inline`): an elementwise chain becomes one line, one pass over
memory, where the temporaries would be one pass each.

A matrix product or a convolution (PRODUCTS) and the Adds after it that keep its shape (a bias, a
residual) are a group of their own: the product accumulates onto their sum (`_fold`), so that no
loop nest follows it. When that cannot be written (a Winograd convolution's rows are written, not
accumulated), the product is a kernel of its own and the rest of its group another. Fusable nodes
that read the group's result, which nothing else reads, then join it as loop nests after the
product's (a convolution's Relu and MaxPool: the tuner fuses the convolution and the pool image by
image, and no call reads the convolution's output back).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from dojo_ir.affine import NotAffine, affine
from dojo_ir.fastparse import fast_line
from dojo_ir.tree import Access

from .nodes import ACCESS, LINE, Array, Kernel, Nest, Node, Value, broadcast, loops

ELEMENTWISE = frozenset({
    "Abs", "Add", "Cast", "CastLike", "Celu", "Clip", "Div", "Elu", "Erf", "Exp", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log", "Max", "Mean", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu", "Selu",
    "Shrink", "Sigmoid", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Swish", "Tanh",
})
REDUCTIONS = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization", "MeanVarianceNormalization",
    "RMSNormalization",
    # pools reduce windows: the elementwise nodes before one are written into its reads
    "MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool", "LRN",
})
FUSABLE = ELEMENTWISE | REDUCTIONS
# A product and the Adds after it (a bias, a residual) are one kernel whose product accumulates onto
# their sum, as the library's conv1 accumulates onto nothing but its output: no loop nest after the
# product, whose tile the tuner then keeps in registers.
PRODUCTS = frozenset({"MatMul", "Gemm", "Conv"})
EPILOGUE = frozenset({"Add"})
_MAX_EXPRESSION = 2000  # longer, and a chain whose values are read twice stops doubling its expression
_NAME_LENGTH = 48  # a fused kernel's name lists its members' operators up to about this length


def fuse_graph(graph: Sequence[tuple[Node, Kernel | None]],
               keep: Collection[str]) -> list[tuple[tuple[Node, ...], Kernel]]:
    """The kernels of `graph` (every node in topological order, with its kernel or None) after
    fusion, each with the nodes it covers, in an order that runs the graph. Values in `keep` stay
    outputs of whichever kernel makes them."""
    nodes = [node for node, _ in graph]
    kernels = [kernel for _, kernel in graph]
    producer = {value.name: i for i, node in enumerate(nodes) for value in node.outputs}
    successors: list[set[int]] = [set() for _ in nodes]
    for i, node in enumerate(nodes):
        for value in node.inputs:
            if value is not None and value.name in producer:
                successors[producer[value.name]].add(i)
    group_of, epilogues = _groups(nodes, kernels, producer, successors, keep)
    members: dict[int, list[int]] = {}
    for i, group in enumerate(group_of):
        members.setdefault(group, []).append(i)
    def call(covered: list[int]) -> tuple[tuple[Node, ...], Kernel]:
        kernel = kernels[covered[0]] if len(covered) == 1 else \
            join([(nodes[i], kernels[i]) for i in covered], _used_outside(covered, nodes, keep))
        return tuple(nodes[i] for i in covered), kernel

    result = []
    for group in _call_order(members, group_of, successors):
        covered = members[group]
        if kernels[covered[0]] is None:
            continue
        if nodes[covered[0]].op in PRODUCTS:
            head = [i for i in covered if i == covered[0] or i in epilogues]
            if len(head) > 1 and len(call(head)[1].lines) != len(kernels[covered[0]].lines):
                # an Add that did not fold (into a Winograd convolution's rows, or broadcasting) would be a
                # loop nest after the product: the product alone, and what follows it one kernel of its own
                # (the product comes first in the graph, so no path leaves the rest and comes back)
                result += [call(covered[:1]), call(covered[1:])]
                continue
        result.append(call(covered))
    return result


def _groups(nodes: Sequence[Node], kernels: Sequence[Kernel | None], producer: dict[str, int],
            successors: Sequence[set[int]], keep: Collection[str]) -> tuple[list[int], set[int]]:
    """Each node's group (the index of its first node), grown greedily in the graph's order, and
    the Adds that joined a product's group as its epilogue."""
    group_of = list(range(len(nodes)))
    epilogues: set[int] = set()
    followed: set[int] = set()  # product groups that a node after their epilogue joined
    groups: dict[int, set[int]] = {i: {i} for i in range(len(nodes))}
    written = [kernel is not None for kernel in kernels]
    products = {i for i, node in enumerate(nodes) if written[i] and node.op in PRODUCTS}  # epilogue groups
    fusable = [written[i] and node.op in FUSABLE and i not in products for i, node in enumerate(nodes)]
    readers: dict[str, int] = {}
    for node in nodes:
        for value in {v.name for v in node.inputs if v is not None}:
            readers[value] = readers.get(value, 0) + 1

    def join_groups(choice: list[int], i: int) -> bool:
        joined = set().union(*(groups[c] for c in choice), {i})
        if not _convex(joined, successors, group_of, groups):
            return False
        target = min(choice)
        for member in joined:
            group_of[member] = target
        for c in choice:
            if c != target:
                del groups[c]
        del groups[i]
        groups[target] = joined
        return True

    def joinable(value: Value) -> int | None:
        """The group that a fusable node reading `value` may join: a fusable producer's, or a
        product's whose result it is, read by that node alone (a Relu or a pool after a Conv,
        which the tuner then fuses per image)."""
        made = producer.get(value.name)
        if made is None:
            return None
        group = group_of[made]
        if group not in products:
            return group if fusable[made] else None
        alone = made == max(groups[group]) and readers.get(value.name) == 1 and value.name not in keep
        return group if alone else None

    for i, node in enumerate(nodes):
        if written[i] and node.op in EPILOGUE:
            head = _epilogue_of(node, producer, group_of, products - followed, readers, keep)
            if head is not None and join_groups([head], i):
                epilogues.add(i)
                continue
        if not fusable[i]:
            continue
        candidates = list(dict.fromkeys(g for g in (joinable(v) for v in node.inputs if v is not None)
                                        if g is not None))
        # all the producers' groups at once, else the first one that keeps the calls acyclic
        for choice in ([candidates] if len(candidates) > 1 else []) + [[c] for c in candidates]:
            if join_groups(choice, i):
                followed.update(c for c in choice if c in products)
                break
    return group_of, epilogues


def _epilogue_of(node: Node, producer: dict[str, int], group_of: Sequence[int], products: Collection[int],
                 readers: dict[str, int], keep: Collection[str]) -> int | None:
    """The product group that the Add `node` can end: one operand is that group's result, read by
    nothing else, of the Add's own shape and dtype (the other operand broadcasts onto it), and the
    other operand comes from outside the group."""
    (result,) = node.outputs
    groups = [group_of[producer[v.name]] if v is not None and v.name in producer else None for v in node.inputs]
    for position, value in enumerate(node.inputs):
        group = groups[position]
        if group is None or group not in products or value.name in keep or readers.get(value.name) != 1:
            continue
        made_last = max(i for i, g in enumerate(group_of) if g == group)
        others = [g for p, g in enumerate(groups) if p != position]
        if (producer[value.name] == made_last and (value.shape, value.dtype) == (result.shape, result.dtype)
                and group not in others):
            return group
    return None


def _convex(joined: set[int], successors: Sequence[set[int]], group_of: Sequence[int],
            groups: dict[int, set[int]]) -> bool:
    """Whether no path of the graph of groups leaves `joined` and comes back into it."""
    frontier = [s for m in joined for s in successors[m] if s not in joined]
    seen: set[int] = set()
    while frontier:
        node = frontier.pop()
        if node in joined:
            return False
        group = group_of[node]
        if group in seen:
            continue
        seen.add(group)
        frontier.extend(s for m in groups[group] for s in successors[m])  # a group runs as a whole
    return True


def _call_order(members: dict[int, list[int]], group_of: Sequence[int],
                successors: Sequence[set[int]]) -> list[int]:
    """The groups in topological order, ties going to the group whose first node comes first."""
    waiting = {g: 0 for g in members}
    after: dict[int, set[int]] = {g: set() for g in members}
    for g, covered in members.items():
        after[g] = {group_of[s] for m in covered for s in successors[m]} - {g}
    for followers in after.values():
        for f in followers:
            waiting[f] += 1
    ready = sorted(g for g, n in waiting.items() if n == 0)
    order = []
    while ready:
        g = ready.pop(0)
        order.append(g)
        for f in after[g]:
            waiting[f] -= 1
            if waiting[f] == 0:
                ready.append(f)
                ready.sort()
    assert len(order) == len(members), "the groups form a cycle"
    return order


def _used_outside(covered: Sequence[int], nodes: Sequence[Node], keep: Collection[str]) -> set[str]:
    """The values of the group that something outside it needs."""
    inside = {nodes[i].name for i in covered}
    needed = set(keep)
    for node in nodes:
        if node.name not in inside:
            needed.update(v.name for v in node.inputs if v is not None)
    return needed


def join(members: Sequence[tuple[Node, Kernel]], needed: Collection[str]) -> Kernel:
    """One kernel doing what `members`' kernels do, in order. A value that a member makes stays an
    output when it is in `needed` or no member reads it; otherwise it becomes a temporary."""
    read_inside = {v.name for node, _ in members for v in node.inputs if v is not None}
    fused = Kernel(_fused_name([kernel.name for _, kernel in members]))
    made: dict[str, Array] = {}  # ONNX value -> the fused kernel's array holding it
    for _, kernel in members:
        renamed: dict[str, str] = {}
        for array in kernel.inputs:
            source = kernel.sources[array.name]
            held = made.get(source) or fused.input(Value(source, array.dtype, array.shape), array.name)
            renamed[array.name] = held.name
        for array in kernel.outputs:
            source = kernel.sources[array.name]
            value = Value(source, array.dtype, array.shape)
            held = fused.output(value, array.name) if source in needed or source not in read_inside else \
                fused.temporary(f"{kernel.name.rstrip('_')}_{array.name}", array.dtype, array.shape)
            made[source] = held
            renamed[array.name] = held.name
        for array in kernel.temporaries:
            renamed[array.name] = fused.temporary(f"{kernel.name.rstrip('_')}_{array.name}", array.dtype,
                                                  array.shape).name
        fused.derived.update(kernel.derived)
        fused.notes.extend(kernel.notes)
        fused.lines.extend(ACCESS.sub(lambda m, r=renamed: f"{r[m.group(1)]}[", line) for line in kernel.lines)
    while any(_fold(fused, temporary) for temporary in list(fused.temporaries)):
        pass  # again: a product's result, having become a bias's sum, may be the next Add's operand
    while any(_inline(fused, temporary) or _push(fused, temporary) or _into_padding(fused, temporary)
              for temporary in list(fused.temporaries)) \
            or any(_in_place(fused, temporary) for temporary in list(fused.temporaries)):
        pass  # again: a value read by several lines that have become one is written into it too; a
        # line written into the one after it (a Relu into a pool's reads) saves a pass, in place none
    return fused


def _written_then_read_once(kernel: Kernel, temporary: Array) -> tuple[list[re.Match], list[int], int] | None:
    """The kernel's lines, those that write `temporary`, and the one line that reads it, after all
    of them; None when some line is written otherwise than `Kernel.loop` writes them (left as it
    is), or the temporary is not written and then read by one line."""
    lines = [LINE.fullmatch(text) for text in kernel.lines]
    if None in lines:
        return None
    writers = [i for i, line in enumerate(lines) if line["array"] == temporary.name]
    readers = [i for i, line in enumerate(lines) if _reads(line["expression"], temporary.name)]
    if not writers or len(readers) != 1 or readers[0] <= writers[-1]:
        return None
    return lines, writers, readers[0]


def _fold(kernel: Kernel, temporary: Array) -> bool:
    """Start the accumulation of `temporary` from the other operand of the one line that adds it
    to something, `z = t + e`, and accumulate into z: `t = 0; t += a*b; z = t + e` becomes
    `z = e; z += a*b`. Only when one plain line starts t, only reductions by `+=` follow, the
    adding line reads nothing else of t's and covers it whole, nothing in between touches z or
    changes what e reads, and z is t's shape and dtype. Whether it did."""
    uses = _written_then_read_once(kernel, temporary)
    if uses is None:
        return False
    lines, writers, r = uses
    start = writers[0]
    if lines[start]["assign"] != "=" or any(lines[w]["assign"] != "+=" for w in writers[1:]):
        return False
    reader, rank = lines[r], len(temporary.shape)
    target = next(a for a in kernel.arrays if a.name == reader["array"])
    # the element at each iteration, read along a dimension of one element at 0 as `broadcast` writes it
    # (a batch of one image) or by its loop
    wholes = {f"{temporary.name}[{','.join(index)}]" for index in (loops(rank), broadcast(temporary.shape,
                                                                                        loops(rank)))}
    expression = reader["expression"]
    addend = next((expression.removeprefix(f"{whole} + ") if expression.startswith(f"{whole} + ") else
                   expression.removesuffix(f" + {whole}") for whole in wholes
                   if expression.startswith(f"{whole} + ") or expression.endswith(f" + {whole}")), None)
    if (addend is None or reader["assign"] != "=" or _sizes(reader) != temporary.shape
            or _indices(reader["indices"]) != loops(rank) or (target.shape, target.dtype) != (temporary.shape,
                                                                                             temporary.dtype)
            or _reads(addend, temporary.name)):
        return False
    touched = {m.group(1) for m in ACCESS.finditer(addend)} | {target.name}
    if any(lines[i]["array"] in touched or _reads(lines[i]["expression"], target.name) for i in range(start, r)):
        return False
    indices = _indices(lines[start]["indices"])
    addend = re.sub(r"\{(\d+)\}", lambda d: _operand(indices[int(d.group(1))]), addend)
    first = lines[start]["expression"]
    started = addend if first == "0" else f"{first} + {addend if ' ' not in addend else f'({addend})'}"
    for i in writers:
        line = lines[i]
        expression = started if i == start else line["expression"]
        kernel.lines[i] = f"{line['sizes']}{target.name}[{line['indices']}] {line['assign']} {expression}"
    del kernel.lines[r]
    kernel.temporaries.remove(temporary)
    return True


def _inline(kernel: Kernel, temporary: Array) -> bool:
    """Write the expression of `temporary` into the line that reads it, instead of the temporary,
    when one plain line writes it whole and one later line reads it, nothing that expression reads
    changes in between, and that line computes in the temporary's dtype. An elementwise chain then
    is one line, one scope the tuner vectorises (it vectorises scopes of one operation) and no array
    between its operations; a value read by several lines stays a temporary, computed once. Whether
    it did."""
    uses = _written_then_read_once(kernel, temporary)
    if uses is None or len(uses[1]) != 1:
        return False
    lines, (w,), r = uses
    writer, reader = lines[w], lines[r]
    if next(a.dtype for a in kernel.arrays if a.name == reader["array"]) != temporary.dtype:
        return False  # the line computes in its target's dtype: the expression would be computed in another
    rank = len(temporary.shape)
    if writer["assign"] != "=" or _sizes(writer) != temporary.shape or _indices(writer["indices"]) != loops(rank):
        return False
    inputs = {m.group(1) for m in ACCESS.finditer(writer["expression"])}
    if any(lines[i]["array"] in inputs for i in range(w + 1, r + 1)):
        return False

    def substitute(access: re.Match) -> str:
        indices = _indices(access.group(1))
        return "(" + re.sub(r"\{(\d+)\}", lambda d: _operand(indices[int(d.group(1))]), writer["expression"]) + ")"

    expression = re.sub(rf"\b{temporary.name}\[([^\]]*)\]", substitute, reader["expression"])
    if len(expression) > _MAX_EXPRESSION:
        return False
    kernel.lines[r] = kernel.lines[r][:reader.start("expression")] + expression
    del kernel.lines[w]
    kernel.temporaries.remove(temporary)
    return True


@dataclass(frozen=True)
class _Elementwise:
    """The one line that reads a temporary t after every line that writes it, `z = f(t)`, reading t
    only at its own position and covering z, of t's shape and dtype, whole; as `_reader` finds it."""

    lines: list[re.Match]  # the kernel's lines
    writers: list[int]  # the lines that write t
    reader: int
    target: Array  # z
    parts: list[str]  # f's text split around its reads of t: the reads at the odd positions

    def touched_before(self, arrays: Collection[str]) -> bool:
        """Whether a line from t's first write to the reader writes one of `arrays` or touches z."""
        return any(self.lines[i]["array"] in {*arrays, self.target.name}
                   or _reads(self.lines[i]["expression"], self.target.name)
                   for i in range(self.writers[0], self.reader))


def _reader(kernel: Kernel, temporary: Array) -> _Elementwise | None:
    uses = _written_then_read_once(kernel, temporary)
    if uses is None:
        return None
    lines, writers, r = uses
    rank = len(temporary.shape)
    reader = lines[r]
    target = next(a for a in kernel.arrays if a.name == reader["array"])
    wholes = {f"{temporary.name}[{','.join(index)}]" for index in (loops(rank), broadcast(temporary.shape,
                                                                                        loops(rank)))}
    parts = re.split(r"(?<![\w])(" + "|".join(map(re.escape, wholes)) + ")", reader["expression"])
    if (reader["assign"] != "=" or _sizes(reader) != temporary.shape or _indices(reader["indices"]) != loops(rank)
            or (target.shape, target.dtype) != (temporary.shape, temporary.dtype)
            or any(_reads(part, temporary.name) for part in parts[::2])):
        return None
    return _Elementwise(lines, writers, r, target, parts)


def _in_place(kernel: Kernel, temporary: Array) -> bool:
    """Accumulate into the array z that the one elementwise line reading `temporary` writes:
    `t = e; t += a * b; z = f(t)` becomes `z = e; z += a * b; z = f(z)`, with no temporary and no
    pass from it to z (a 1x1 convolution at 56x56 with its residual and Relu: a temporary as large
    as its output, 3.2 MB, written to memory and read back). Only when nothing from t's first write
    to the reader touches z. Whether it did."""
    found = _reader(kernel, temporary)
    if found is None or found.touched_before(()):
        return False
    renamed = re.compile(rf"(?<![\w]){re.escape(temporary.name)}\[")
    for i in range(found.writers[0], found.reader + 1):
        kernel.lines[i] = renamed.sub(f"{found.target.name}[", kernel.lines[i])
    kernel.temporaries.remove(temporary)
    return True


def _push(kernel: Kernel, temporary: Array) -> bool:
    """Write the one line that reads `temporary` elementwise, `z = f(t)`, into each of the plain
    lines that write t, when no single line writes it whole (`_inline` does that): a Winograd
    convolution's four rows of outputs, or a write-back from a blocked accumulator, each becomes
    `z[i] = f(e)`. A convolution's Relu, bias or residual is then applied as its results are
    written, where a loop nest after the product would read them all back. Only when no writer
    reads t or z, and nothing from the first writer to the reader writes what f reads or touches
    z. Whether it did."""
    found = _reader(kernel, temporary)
    if found is None:
        return False
    lines, parts, target = found.lines, found.parts, found.target
    read = {m.group(1) for part in parts[::2] for m in ACCESS.finditer(part)}
    if any(lines[w]["assign"] != "=" or _reads(lines[w]["expression"], temporary.name)
           or _reads(lines[w]["expression"], target.name) for w in found.writers) or found.touched_before(read):
        return False
    written = {}
    for w in found.writers:
        line, indices = lines[w], _indices(lines[w]["indices"])
        value = line["expression"] if " " not in line["expression"] else f"({line['expression']})"
        expression = "".join(value if k % 2 else
                             re.sub(r"\{(\d+)\}", lambda d, i=indices: _operand(i[int(d.group(1))]), part)
                             for k, part in enumerate(parts))
        if len(expression) > _MAX_EXPRESSION:
            return False
        written[w] = f"{line['sizes']}{target.name}[{line['indices']}] = {expression}"
    for w, text in written.items():
        kernel.lines[w] = text
    del kernel.lines[found.reader]
    kernel.temporaries.remove(temporary)
    return True


def _into_padding(kernel: Kernel, temporary: Array) -> bool:
    """Write `temporary` t straight into the padded array z that the one line reading it copies it
    into, `z[i + o] = t[i]` (a Relu's output into its MaxPool's padded input): each plain line that
    writes t writes z at the offsets o, the copy goes, and z's fills between (its border) move to
    the kernel's start. Where `_inline` cannot write t's expression into the copy, t being written
    in parts (a convolution's write-back from blocks of channels): ResNet-50's stem with its
    channels as lanes, 1076 -> 892 us on an AVX-512 Xeon, a pass over 3.2 MB less. Only when
    nothing before the copy but those fills touches z, and no writer of t reads t. Whether it did."""
    uses = _written_then_read_once(kernel, temporary)
    if uses is None:
        return False
    lines, writers, r = uses
    padded = next((a for a in kernel.temporaries if a.name == lines[r]["array"]), None)
    offsets = _copy_offsets(lines[r], temporary, padded)
    if offsets is None or any(lines[w]["assign"] != "=" for w in writers):
        return False
    fills = [i for i in range(r) if lines[i]["array"] == padded.name]
    if any(i < writers[0] or ACCESS.search(lines[i]["expression"]) for i in fills) \
            or any(_reads(lines[i]["expression"], padded.name) for i in range(r)):
        return False
    for w in writers:
        line = lines[w]
        indices = [f"{index}+{offset}" if offset else index for index, offset in zip(
            _indices(line["indices"]), offsets, strict=True)]
        kernel.lines[w] = f"{line['sizes']}{padded.name}[{','.join(indices)}] = {line['expression']}"
    kernel.lines[:] = [kernel.lines[i] for i in fills] + [text for i, text in enumerate(kernel.lines)
                                                          if i != r and i not in fills]
    kernel.temporaries.remove(temporary)
    return True


def _copy_offsets(line: re.Match, temporary: Array, padded: Array | None) -> list[int] | None:
    """The constant offsets o of a plain line `z[i + o] = t[i]` that copies `temporary` t whole into
    the temporary `padded` z of its rank and dtype; None when the line is not one."""
    if padded is None or line["assign"] != "=" or len(padded.shape) != len(temporary.shape) \
            or padded.dtype != temporary.dtype:
        return None
    nest = Nest()  # the line's loops, as Kernel.loop writes one over t's shape
    read = nest.all(temporary.shape)
    if line["expression"] != f"{temporary.name}[{','.join(read)}]" or list(_sizes(line)) != nest.sizes:
        return None
    body = fast_line(line.string, 1, "body")
    if body is None or not isinstance(body.op.value, Access):
        return None
    offsets = []
    for source, target in zip(body.op.value.index, body.op.target.index, strict=True):
        try:
            shift = affine(target) - affine(source)
        except NotAffine:
            return None
        if shift.terms:
            return None
        offsets.append(shift.const)
    return offsets


def _reads(expression: str, array: str) -> bool:
    return any(m.group(1) == array for m in ACCESS.finditer(expression))


def _sizes(line: re.Match) -> tuple[int, ...]:
    return tuple(int(size) for size in line["sizes"].split())


def _indices(text: str) -> list[str]:
    return [index.strip() for index in text.split(",")] if text.strip() else []


def _operand(index: str) -> str:
    return index if re.fullmatch(r"\{\d+\}|\d+", index) else f"({index})"


def _fused_name(names: Sequence[str]) -> str:
    distinct = list(dict.fromkeys(name.rstrip("_") for name in names))  # `sqrt_`: a keyword made a name
    name = distinct[0]
    for part in distinct[1:]:
        if len(name) + len(part) + 1 > _NAME_LENGTH:
            return f"{name}_etc"
        name = f"{name}_{part}"
    return name
