"""`dojo import --fuse`: elementwise chains and reductions with the elementwise nodes around them,
each joined into one kernel whose loops the tuner can then fuse.

    fused = fuse_graph([(node, kernel_for(node)) for node in nodes], keep={"logits"})
    for covered, kernel in fused:
        write(kernel.render(comment=...))   # one file per group; `kernel.sources` names its ONNX values

A node is fusable when its operator computes each output element from the elements at the same
position (ELEMENTWISE) or reduces and normalises along axes (REDUCTIONS); matrix products,
convolutions and layout operators stay alone. Groups grow in the graph's order: a fusable node
joins the groups of the fusable nodes it reads from when the graph of calls stays acyclic, that is
when no path leaves the joined group and comes back into it. A group's kernels are joined as they
are written: their arrays renamed apart, a value made and read only inside the group becomes a
temporary, every other value it makes stays an output, and a value that several members read is
one input. Then a temporary that one plain line writes whole and one later line reads is written
into that line's expression (`_inline`): an elementwise chain becomes one line, one scope of one
operation, which the heuristic pass vectorises (it leaves scopes of several operations scalar).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from .nodes import Array, Kernel, Node, Value, loops

ELEMENTWISE = frozenset({
    "Abs", "Add", "Cast", "CastLike", "Celu", "Clip", "Div", "Elu", "Exp", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log", "Max", "Mean", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu", "Selu",
    "Shrink", "Sigmoid", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Swish", "Tanh",
})
REDUCTIONS = frozenset({
    "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
    "ReduceSum", "ReduceSumSquare", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization", "MeanVarianceNormalization",
    "RMSNormalization",
})
FUSABLE = ELEMENTWISE | REDUCTIONS
_ACCESS = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\[")
_LINE = re.compile(r"(?P<sizes>(?:\d+ )*)(?P<array>[A-Za-z_]\w*)\[(?P<indices>[^\]]*)\] "
                   r"(?P<assign>=|\+=|\*=|max=|min=) (?P<expression>.*)")  # as Kernel.loop writes a line
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
    group_of = _groups(nodes, kernels, producer, successors)
    members: dict[int, list[int]] = {}
    for i, group in enumerate(group_of):
        members.setdefault(group, []).append(i)
    result = []
    for group in _call_order(members, group_of, successors):
        covered = members[group]
        if kernels[covered[0]] is None:
            continue
        kernel = kernels[covered[0]] if len(covered) == 1 else \
            join([(nodes[i], kernels[i]) for i in covered], _used_outside(covered, nodes, keep))
        result.append((tuple(nodes[i] for i in covered), kernel))
    return result


def _groups(nodes: Sequence[Node], kernels: Sequence[Kernel | None], producer: dict[str, int],
            successors: Sequence[set[int]]) -> list[int]:
    """Each node's group (the index of its first node), grown greedily in the graph's order."""
    group_of = list(range(len(nodes)))
    groups: dict[int, set[int]] = {i: {i} for i in range(len(nodes))}
    fusable = [kernel is not None and node.op in FUSABLE for node, kernel in zip(nodes, kernels, strict=True)]
    for i, node in enumerate(nodes):
        if not fusable[i]:
            continue
        candidates = list(dict.fromkeys(group_of[producer[v.name]] for v in node.inputs
                                        if v is not None and v.name in producer and fusable[producer[v.name]]))
        # all the producers' groups at once, else the first one that keeps the calls acyclic
        for choice in ([candidates] if len(candidates) > 1 else []) + [[c] for c in candidates]:
            joined = set().union(*(groups[c] for c in choice), {i})
            if _convex(joined, successors, group_of, groups):
                target = min(choice)
                for member in joined:
                    group_of[member] = target
                for c in choice:
                    if c != target:
                        del groups[c]
                del groups[i]
                groups[target] = joined
                break
    return group_of


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
        fused.lines.extend(_ACCESS.sub(lambda m, r=renamed: f"{r[m.group(1)]}[", line) for line in kernel.lines)
    while any(_inline(fused, temporary) for temporary in list(fused.temporaries)):
        pass  # again: a value read by several lines that have become one is written into it too
    return fused


def _inline(kernel: Kernel, temporary: Array) -> bool:
    """Write the expression of `temporary` into the line that reads it, instead of the temporary,
    when one plain line writes it whole and one later line reads it, nothing that expression reads
    changes in between, and that line computes in the temporary's dtype. An elementwise chain then
    is one line, one scope the tuner vectorises (it vectorises scopes of one operation) and no array
    between its operations; a value read by several lines stays a temporary, computed once. Whether
    it did."""
    lines = [_LINE.fullmatch(text) for text in kernel.lines]
    if None in lines:
        return False  # a line written otherwise than `Kernel.loop` writes them: left as it is
    writers = [i for i, line in enumerate(lines) if line["array"] == temporary.name]
    readers = [i for i, line in enumerate(lines) if _reads(line["expression"], temporary.name)]
    if len(writers) != 1 or len(readers) != 1 or readers[0] <= writers[0]:
        return False
    (w,), (r,) = writers, readers
    writer, reader = lines[w], lines[r]
    if next(a.dtype for a in kernel.arrays if a.name == reader["array"]) != temporary.dtype:
        return False  # the line computes in its target's dtype: the expression would be computed in another
    rank = len(temporary.shape)
    if writer["assign"] != "=" or _sizes(writer) != temporary.shape or _indices(writer["indices"]) != loops(rank):
        return False
    inputs = {m.group(1) for m in _ACCESS.finditer(writer["expression"])}
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


def _reads(expression: str, array: str) -> bool:
    return any(m.group(1) == array for m in _ACCESS.finditer(expression))


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
