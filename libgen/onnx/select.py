"""Booleans that only select: a Where, or a Cast of a boolean to a number, with the comparisons and
logic that make its condition computed in the same kernel, so that no boolean crosses a kernel
boundary (the format has no boolean dtype, no comparison and no select).

    node, kernel, inside = select_kernel(where, "/attn/Where", opset, graph)
    # c i64 [1, 1, 1, 128] = abs(max(min(m[...], 1), -1))       the condition, 0 or 1
    # y f32 [1, 1, 128, 128] = log(c[...])                       0 where c, -inf elsewhere

The condition is an expression over integer values, written in integer arithmetic into a
temporary `c` of 0s and 1s at the broadcast shape of the values it reads. Each form is exact for
every integer, as the format's integers wrap (-fwrapv), so a difference is 0 exactly when its
operands are equal:

    nonzero(x)   = abs(max(min(x, 1), -1))         Cast(x, to=BOOL); no abs of INT_MIN
    equal(a, b)  = 1 - nonzero(a - b)
    a <= b       = equal(min(a, b), a)             no subtraction that could overflow
    a < b        = 1 - (b <= a)
    not c = 1 - c,  c and d = c * d,  c or d = max(c, d),  c xor d = abs(c - d)

Expand and Identity of booleans pass through (broadcasting is elementwise); constant booleans
(folded at import) are literals when uniform, else a derived constant of 0s and 1s. The select
is the sum of one part per value, its value where chosen and 0 elsewhere (chosen = c for a,
1 - c for b):

    chosen * v                              a finite constant v (integers: any value)
    log(1 - chosen), -log(1 - chosen)       a constant -inf, +inf: log(0) = -inf, log(1) = 0
    min(max(v, log(1 - chosen)), -log(1 - chosen))   a float tensor v: clamped to [0, 0] where
                                            not chosen, so that an infinity there adds 0

That is exact for every value but a NaN in the value not selected, which shows through (every
function of the format propagates NaN); the kernel's header says so when a value is a tensor.
One guard is recognised whole: Where(IsNaN(s), 0, s) of a Softmax s, which torch's
scaled_dot_product_attention writes to zero the rows a mask empties, is a softmax kernel that
makes those rows 0 (ops/reduce.py's softmax_empty_rows_zero). Refused, with the reason:
comparing floats (the format's arithmetic propagates NaN and makes inf - inf NaN, so no exact
comparison exists), other IsNaN and IsInf of floats and Cast of floats to BOOL (no function of
the format tells a NaN apart), and booleans made by other operators (a Gather of booleans runs on
ONNX Runtime; its result cannot enter a kernel). `casts_late` moves a Cast to BOOL after the
Gathers and Reshapes of torch.onnx's mask, so that the Gathers move integers instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .nodes import Derived, Kernel, Node, Unsupported, Value, broadcast, broadcast_shape, fresh_name, loops, number
from .ops.reduce import softmax_empty_rows_zero
from .reads import used_names

BOOL = onnx.TensorProto.BOOL
INTEGERS = ("i32", "i64")
CONDITION = "i64"  # the dtype the condition is computed in: i32 values convert to it exactly
COMPARISONS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
LOGIC = {"Not": 1, "And": 2, "Or": 2, "Xor": 2}
PASSING = {"Identity", "Expand"}  # a boolean read elementwise, broadcast at most
# operators that copy elements of their first input whatever its dtype: a Cast to BOOL before them
# may go after them (not those of PASSING, which a select's kernel reads through)
MOVERS = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Gather", "GatherND", "GatherElements", "Slice",
          "Tile"}
COMPARING_FLOATS = "the format's arithmetic propagates NaN and makes inf - inf NaN, so only integers are compared " \
    "exactly"
TELLING_NAN = "every function of the format propagates NaN, so no expression tells a NaN apart from a number"


@dataclass(frozen=True)
class Graph:
    """What the select reads of the graph around it: each value's maker (an ONNX node and its
    name), whether a value is boolean, its contents when constant, and a value as the catalogue
    sees it (raising Unsupported for an unknown shape or a dtype the format lacks)."""

    makers: Mapping[str, tuple[onnx.NodeProto, str]]
    is_boolean: Callable[[str], bool]
    constant: Callable[[str], np.ndarray | None]
    value: Callable[[str], Value]


def selects(node: onnx.NodeProto, graph: Graph) -> bool:
    """Whether `node` selects by a boolean: a Where, or a Cast of a boolean to a number."""
    if node.op_type == "Where":
        return True
    return node.op_type == "Cast" and bool(node.input) and graph.is_boolean(node.input[0]) \
        and not graph.is_boolean(node.output[0])


class _Writer:
    """The condition's text in integer arithmetic, its kernel's inputs declared as it goes."""

    def __init__(self, kernel: Kernel, graph: Graph):
        self.kernel, self.graph = kernel, graph
        self.reads: list[tuple[Value, Callable[[list[str]], str]]] = []  # each input and how to index it
        self.inside: set[str] = set()  # the boolean nodes the condition computes

    def boolean(self, name: str) -> Callable[[list[str]], str]:
        """The boolean `name` as 0 or 1, a function of the indices of the condition's shape."""
        array = self.graph.constant(name)
        if array is not None:
            return self._constant_boolean(name, np.asarray(array))
        if name not in self.graph.makers:
            raise Unsupported("dtype", f"the boolean `{name}` is an input of the model")
        node, node_name = self.graph.makers[name]
        op = node.op_type
        if op in PASSING or (op == "Cast" and self.graph.is_boolean(node.input[0])):
            inner = self.boolean(node.input[0])
        elif op in LOGIC:
            inner = self._logic(op, [self.boolean(n) for n in node.input])
        elif op in COMPARISONS:
            inner = self._comparison(node, node_name)
        elif op == "Cast":
            x = self.integer(node.input[0], f"Cast of `{node.input[0]}` to BOOL", TELLING_NAN)
            inner = lambda i: _nonzero(x(i))  # noqa: E731
        elif op in ("IsNaN", "IsInf"):
            self.integer(node.input[0], f"{op} of `{node.input[0]}`", TELLING_NAN)  # only floats are refused
            inner = lambda i: "0"  # noqa: E731 - an integer is never NaN nor infinite
        else:
            raise Unsupported("dtype", f"the boolean `{name}` is made by {op} (node {node_name}), which no kernel "
                              "computes")
        self.inside.add(node_name)
        return inner

    def integer(self, name: str, what: str, why: str = COMPARING_FLOATS) -> Callable[[list[str]], str]:
        """An integer operand of a comparison or a Cast; Unsupported for floats, saying `why`."""
        value = self.graph.value(name)
        if value.dtype not in INTEGERS:
            raise Unsupported("control flow", f"{what} ({value.dtype}): {why}")
        if value.constant is not None and value.constant.size == 1:
            literal = number(value.constant.item(), CONDITION)
            return lambda i: literal
        array = self.kernel.input(value, "m")
        self.reads.append((value, lambda i: array.at(broadcast(value.shape, i))))
        return self.reads[-1][1]

    def _constant_boolean(self, name: str, array: np.ndarray) -> Callable[[list[str]], str]:
        if np.all(array == array.flat[0]):
            bit = str(int(bool(array.flat[0])))
            return lambda i: bit
        value = Value(f"{name}.{CONDITION}", CONDITION, tuple(array.shape))
        derived = Derived(array.astype(np.int64), (name,),
                          f"`{name}`, a boolean constant, as 0 and 1")
        kernel_array = self.kernel.derived_input(value, derived, "k")
        self.reads.append((value, lambda i: kernel_array.at(broadcast(value.shape, i))))
        return self.reads[-1][1]

    def _comparison(self, node: onnx.NodeProto, node_name: str) -> Callable[[list[str]], str]:
        op = node.op_type
        if all(self.graph.is_boolean(n) for n in node.input) and op == "Equal":
            c, d = (self.boolean(n) for n in node.input)
            return lambda i: f"(1 - abs({c(i)} - {d(i)}))"
        a, b = (self.integer(n, f"{op} of `{n}`") for n in node.input)
        if op in ("Greater", "GreaterOrEqual"):
            a, b = b, a
        if op == "Equal":
            return lambda i: f"(1 - {_nonzero(f'{a(i)} - {b(i)}')})"
        at_most = (lambda i: f"(1 - {_nonzero(f'min({a(i)}, {b(i)}) - {a(i)}')})") if op.endswith("OrEqual") else \
            (lambda i: f"{_nonzero(f'min({b(i)}, {a(i)}) - {b(i)}')}")  # a < b: not (b <= a)
        return at_most

    @staticmethod
    def _logic(op: str, operands: list[Callable[[list[str]], str]]) -> Callable[[list[str]], str]:
        if op == "Not":
            return lambda i: f"(1 - {operands[0](i)})"
        c, d = operands
        if op == "And":
            return lambda i: _both(c(i), d(i))
        return lambda i: f"max({c(i)}, {d(i)})" if op == "Or" else f"abs({c(i)} - {d(i)})"


def _both(c: str, d: str) -> str:
    """c and d: a constant operand (a literal 0 or 1) decides it or leaves the other."""
    if "0" in (c, d):
        return "0"
    return d if c == "1" else c if d == "1" else f"({c} * {d})"


def _nonzero(x: str) -> str:
    return f"abs(max(min({x}, 1), -1))"


def select_kernel(node: onnx.NodeProto, name: str, opset: int, graph: Graph) -> tuple[Node, Kernel, set[str]]:
    """The kernel of a Where (or a Cast of a boolean), its condition computed inside; the
    catalogue's node of what the kernel reads; and the boolean nodes the kernel computes.
    Unsupported when the condition or the values cannot be written exactly."""
    guarded = _guarded_softmax(node, name, opset, graph)
    if guarded is not None:
        return guarded
    kernel = Kernel(node.op_type.lower())
    y = graph.value(node.output[0])
    writer = _Writer(kernel, graph)
    condition = writer.boolean(node.input[0])
    shape = broadcast_shape(*(value.shape for value, _ in writer.reads))
    c = kernel.temporary("c", CONDITION, shape)
    kernel.loop(shape, c.at(loops(len(shape))), "=", condition(loops(len(shape))))
    index = loops(y.rank)
    chosen = c.at(broadcast(shape, index))
    operands = [graph.value(n) for n in node.input[1:]]
    ys = kernel.output(y)
    if node.op_type == "Cast":
        expression = chosen
    else:
        expression = _select(kernel, chosen, operands, y.dtype, index)
        if y.dtype not in INTEGERS and any(v.constant is None for v in operands):
            kernel.notes.append("Exact unless the value not selected is NaN, which shows through: every function of "
                                "the format propagates NaN.")
    kernel.loop(y.shape, ys.at(index), "=", expression)
    inputs = tuple(value for value, _ in writer.reads if value.name in kernel.sources.values()) + tuple(operands)
    return Node(name, node.op_type, inputs, (y,), {}, opset), kernel, writer.inside


def _guarded_softmax(node: onnx.NodeProto, name: str, opset: int, graph: Graph
                     ) -> tuple[Node, Kernel, set[str]] | None:
    """Where(IsNaN(s), 0, s) of a float Softmax s, as torch's scaled_dot_product_attention zeroes
    the rows a mask empties: one softmax kernel that makes those rows 0 (reduce.py), computing the
    IsNaN and the Softmax inside. None for any other Where."""
    if node.op_type != "Where" or len(node.input) != 3 or node.input[0] not in graph.makers:
        return None
    test, test_name = graph.makers[node.input[0]]
    zero = graph.constant(node.input[1])
    if test.op_type != "IsNaN" or test.input[0] != node.input[2] or node.input[2] not in graph.makers \
            or zero is None or zero.size != 1 or zero.item() != 0:
        return None
    softmax, softmax_name = graph.makers[node.input[2]]
    if softmax.op_type != "Softmax" or softmax.domain not in ("", "ai.onnx"):
        return None
    x, y = graph.value(softmax.input[0]), graph.value(node.output[0])
    if x.dtype in INTEGERS or x.shape != y.shape:
        return None
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in softmax.attribute}
    inner = Node(name, "Softmax", (x,), (y,), attributes, opset)
    kernel = softmax_empty_rows_zero(inner)
    kernel.notes.append("The Where computes a Softmax y and Where(IsNaN(y), 0, y): a row of -inf only gives 0; a row "
                        "holding a NaN or +inf gives NaN, where the model gives 0.")
    return inner, kernel, {test_name, softmax_name}


def _select(kernel: Kernel, c: str, operands: list[Value], dtype: str, index: list[str]) -> str:
    """c ? a : b for c in {0, 1}: the sum of one part per operand, each its value where it is
    selected and 0 elsewhere (see the module's docstring)."""
    a, b = operands
    if all(v.constant is not None and v.constant.size == 1 for v in operands) \
            and np.asarray(a.constant).item() == np.asarray(b.constant).item():
        return number(np.asarray(a.constant).item(), dtype)
    parts = [_part(kernel, value, name, chosen, other, dtype, index)
             for value, name, chosen, other in ((a, "a", c, f"(1 - {c})"), (b, "b", f"(1 - {c})", c))]
    return " + ".join(part for part in parts if part) or "0"


def _part(kernel: Kernel, value: Value, name: str, chosen: str, other: str, dtype: str, index: list[str]) -> str:
    """`value` where `chosen` is 1, else 0 (`other` is 1 - chosen): an empty text for a 0."""
    if value.constant is not None and value.constant.size == 1:
        number_ = float(np.asarray(value.constant).item())
        if np.isinf(number_):  # log(1 - chosen) is -inf where chosen, 0 elsewhere
            return f"{'' if number_ < 0 else '-'}log({other})"
        return "" if number_ == 0 else chosen if number_ == 1 else f"{chosen} * {number(number_, dtype)}"
    x = kernel.input(value, name).at(broadcast(value.shape, index))
    if dtype in INTEGERS:
        return f"{chosen} * {x}"
    # x clamped to [0, 0] where not chosen, so that an infinity there adds 0, and kept whole where chosen
    return f"min(max({x}, log({other})), -log({other}))"


def computed_inside(graph: onnx.GraphProto, names: Sequence[str], computes: Mapping[str, set[str]]
                    ) -> dict[str, list[str]]:
    """The boolean nodes that only the selects' kernels read, each with the selects that compute
    it: such a node needs no kernel and no ONNX Runtime. `computes` maps a select that has a
    kernel to the boolean nodes it computes; `names` are the graph's nodes' names in order."""
    readers: dict[str, list[str]] = {o.name: [""] for o in graph.output}  # a graph output is read outside
    for node, name in zip(graph.node, names, strict=True):
        for value in used_names(node):
            readers.setdefault(value, []).append(name)
    by: dict[str, list[str]] = {}
    for select, inside in computes.items():
        for name in inside:
            by.setdefault(name, []).append(select)
    inlined: dict[str, list[str]] = {}
    for node, name in reversed(list(zip(graph.node, names, strict=True))):
        if name in by and all(reader in inlined or name in computes.get(reader, ())
                              for output in node.output if output for reader in readers.get(output, [])):
            inlined[name] = sorted(by[name])
    return inlined


def casts_late(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Cast to BOOL moved after the operators that only move its result around
    (MOVERS, each the only reader of the value before it), as torch.onnx writes an attention
    mask: Cast(mask) -> Flatten -> Gather -> Reshape -> And. The movers then move integers, which
    kernels and ONNX Runtime hold, and the Cast meets the logic that a select computes. Shape and
    Size read only the shape, which the Cast does not change; they read the moved values."""
    graph = model.graph
    readers: dict[str, list[int]] = {}
    for j, node in enumerate(graph.node):
        for value in used_names(node):
            readers.setdefault(value, []).append(j)
    kept = {o.name for o in graph.output}
    chains = {}  # a Cast's position -> the movers after it
    for i, node in enumerate(graph.node):
        is_cast = node.op_type == "Cast" and node.domain in ("", "ai.onnx") and any(
            a.name == "to" and a.i == BOOL for a in node.attribute)
        chain, value = [], node.output[0] if is_cast and node.output else ""
        while value and value not in kept:
            reading = [j for j in readers.get(value, []) if graph.node[j].op_type not in ("Shape", "Size")]
            after = graph.node[reading[0]] if len(reading) == 1 else None
            if after is None or after.op_type not in MOVERS or after.domain not in ("", "ai.onnx") \
                    or list(after.input).count(value) != 1 or after.input[0] != value or len(after.output) != 1:
                break
            chain.append(reading[0])
            value = after.output[0]
        if chain:
            chains[i] = chain
    if not chains:
        return model
    return _moved(model, chains, readers)


def _moved(model: onnx.ModelProto, chains: Mapping[int, list[int]], readers: Mapping[str, list[int]]
           ) -> onnx.ModelProto:
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    nodes = list(moved.graph.node)
    taken = {n for node in nodes for n in (*node.input, *node.output)} | {v.name for v in moved.graph.input}
    gone: set[str] = set()
    placed_after = {chain[-1]: cast for cast, chain in chains.items()}
    for cast, chain in chains.items():
        renamed = {nodes[cast].output[0]: nodes[cast].input[0]}  # the first mover (and Shape) read the source
        for position in chain[:-1]:  # each value the chain made from booleans is now made from the source
            old = nodes[position].output[0]
            renamed[old] = nodes[position].output[0] = fresh_name(f"{old}.uncast", taken)
            taken.add(renamed[old])
        for old, new in renamed.items():
            gone.add(old)
            for j in readers.get(old, []):
                nodes[j].input[:] = [new if n == old else n for n in nodes[j].input]
        last = nodes[chain[-1]]
        end = last.output[0]
        uncast = fresh_name(f"{end}.uncast", taken)
        taken.add(uncast)
        last.output[0] = uncast
        nodes[cast].input[0], nodes[cast].output[0] = uncast, end
    order = [j for j in range(len(nodes)) if j not in chains]
    order = [k for j in order for k in ([j, placed_after[j]] if j in placed_after else [j])]
    del moved.graph.node[:]
    moved.graph.node.extend(nodes[j] for j in order)
    kept_infos = [v for v in moved.graph.value_info if v.name not in gone]
    del moved.graph.value_info[:]
    moved.graph.value_info.extend(kept_infos)
    return moved
