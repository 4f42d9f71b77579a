"""`fuse_graph`: which nodes join into one kernel, and that a joined kernel computes what its
members did, one after another."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytest

from dojo_ir import interpret, load
from libgen.onnx.catalogue import kernel_for
from libgen.onnx.fuse import fuse_graph, join
from libgen.onnx.nodes import Kernel, Node, Value, broadcast, loops
from libgen.onnx.ops.linear import embedded
from tests.onnx.single_node import normal

# -- kernels written here, so that the fusion is tested on its own -------------------------------

BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
UNARY = {"Exp": "exp({})", "Tanh": "tanh({})", "Relu": "max({}, 0)", "Abs": "abs({})", "Sqrt": "sqrt({})"}
REDUCE = {"ReduceMean": "+=", "ReduceMax": "max="}


def elementwise(node: Node) -> Kernel:
    kernel = Kernel(node.op.lower())
    (y,), index = node.outputs, loops(node.outputs[0].rank)
    operands = [kernel.input(v, name).at(broadcast(v.shape, index)) for v, name in zip(node.inputs, "ab", strict=False)]
    expression = f"{operands[0]} {BINARY[node.op]} {operands[1]}" if node.op in BINARY else \
        UNARY[node.op].format(operands[0])
    kernel.loop(y.shape, kernel.output(y).at(index), "=", expression)
    return kernel


def reduce_last(node: Node) -> Kernel:
    """ReduceMean / ReduceMax over the last axis, keeping it."""
    kernel = Kernel(node.op.lower())
    (x,), (y,) = node.inputs, node.outputs
    xs, ys = kernel.input(x), kernel.output(y)
    rows, index = x.shape[:-1], loops(x.rank)
    target = ys.at([*index[:-1], 0])
    kernel.loop(rows, ys.at([*loops(len(rows)), 0]), "=", "0" if node.op == "ReduceMean" else "-inf")
    kernel.loop(x.shape, target, REDUCE[node.op], xs.at(index))
    if node.op == "ReduceMean":
        kernel.loop(rows, ys.at([*loops(len(rows)), 0]), "=", f"{ys.at([*loops(len(rows)), 0])} / {x.shape[-1]}")
    return kernel


def softmax(node: Node) -> Kernel:
    kernel = Kernel("softmax")
    (x,), (y,) = node.inputs, node.outputs
    xs, ys = kernel.input(x), kernel.output(y)
    rows, index = x.shape[:-1], loops(x.rank)
    row = loops(len(rows))
    m, s = kernel.temporary("m", x.dtype, rows), kernel.temporary("s", x.dtype, rows)
    kernel.loop(rows, m.at(row), "=", "-inf")
    kernel.loop(x.shape, m.at(row), "max=", xs.at(index))
    kernel.loop(rows, s.at(row), "=", "0")
    kernel.loop(x.shape, s.at(row), "+=", f"exp({xs.at(index)} - {m.at(row)})")
    kernel.loop(x.shape, ys.at(index), "=", f"exp({xs.at(index)} - {m.at(row)}) / {s.at(row)}")
    return kernel


def matmul(node: Node) -> Kernel:
    kernel = Kernel("matmul")
    (a, b), (y,) = node.inputs, node.outputs
    As, bs, ys = kernel.input(a, "a"), kernel.input(b, "b"), kernel.output(y)
    kernel.loop(y.shape, ys.at(loops(2)), "=", "0")
    kernel.loop([*y.shape, a.shape[1]], ys.at(loops(2)), "+=", f"{As.at(['{0}', '{2}'])} * {bs.at(['{2}', '{1}'])}")
    return kernel


BUILDERS: dict[str, Callable[[Node], Kernel]] = {
    **dict.fromkeys([*BINARY, *UNARY], elementwise), **dict.fromkeys(REDUCE, reduce_last), "Softmax": softmax,
    "MatMul": matmul}
NUMPY: dict[str, Callable[..., np.ndarray]] = {"Neg": np.negative}  # "unsupported": no kernel, numpy runs them


# -- running a graph: node by node, and as fused -------------------------------------------------

def run_kernel(kernel: Kernel, values: dict[str, np.ndarray]) -> None:
    feed = {a.name: values[kernel.sources[a.name]] for a in kernel.inputs}
    got = interpret(load(kernel.render()), feed)
    values.update({kernel.sources[a.name]: got[a.name] for a in kernel.outputs})


def run_unfused(graph: Sequence[tuple[Node, Kernel | None]], feeds: Mapping[str, np.ndarray]) -> dict:
    values = dict(feeds)
    for node, kernel in graph:
        if kernel is None:
            values[node.outputs[0].name] = NUMPY[node.op](*(values[v.name] for v in node.inputs))
        else:
            run_kernel(kernel, values)
    return values


def run_fused(graph: Sequence[tuple[Node, Kernel | None]], feeds: Mapping[str, np.ndarray],
              fused: Sequence[tuple[tuple[Node, ...], Kernel]]) -> dict:
    """Runs the kernels in the order given, the nodes without a kernel as soon as they can run;
    fails when a kernel's input is not there yet."""
    values, pending = dict(feeds), [node for node, kernel in graph if kernel is None]

    def run_pending() -> None:
        while ready := [n for n in pending if all(v.name in values for v in n.inputs)]:
            for node in ready:
                values[node.outputs[0].name] = NUMPY[node.op](*(values[v.name] for v in node.inputs))
                pending.remove(node)

    for _, kernel in fused:
        run_pending()
        missing = [s for a, s in kernel.sources.items() if a in {i.name for i in kernel.inputs} and s not in values]
        assert not missing, f"{kernel.name} runs before {missing} exist"
        run_kernel(kernel, values)
    run_pending()
    return values


def with_kernels(nodes: Sequence[Node]) -> list[tuple[Node, Kernel | None]]:
    return [(n, None if n.op in NUMPY else BUILDERS[n.op](n)) for n in nodes]


def assert_fusion_keeps_results(nodes: Sequence[Node], feeds: Mapping[str, np.ndarray], keep: Sequence[str],
                                rtol: float = 0) -> list[tuple[tuple[Node, ...], Kernel]]:
    """The fused kernels give the unfused ones' results: exactly, or within `rtol` where a product
    accumulates onto what was added to it after (the same sum, another order)."""
    graph = with_kernels(nodes)
    fused = fuse_graph(graph, keep)
    for _, kernel in fused:
        load(kernel.render())  # a kernel of the format
    covered = [n.name for group, _ in fused for n in group]
    assert sorted(covered) == sorted(n.name for n, k in graph if k is not None)
    expected, got = run_unfused(graph, feeds), run_fused(graph, feeds, fused)
    for name in keep:
        np.testing.assert_allclose(got[name], expected[name], rtol=rtol, atol=rtol, err_msg=name)
    return fused


def value(name: str, *shape: int) -> Value:
    return Value(name, "f32", shape)


def node(op: str, inputs: Sequence[Value], output: Value) -> Node:
    return Node(f"{op}_{output.name}", op, tuple(inputs), (output,))


# -- specifications ------------------------------------------------------------------------------

def random_graph(seed: int) -> tuple[list[Node], dict[str, np.ndarray], list[str]]:
    """A graph of 3 to 12 nodes on [rows, 5] and [rows, 1] values, some of them matrix products and
    nodes without a kernel, and some values kept as outputs."""
    rng = np.random.default_rng(seed)
    rows = int(rng.choice([3, 4, 7]))
    values = [value("x", rows, 5), value("w", 5, 5), value("c", 5)]
    feeds = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in values}
    nodes = []
    for i in range(int(rng.integers(3, 13))):
        op = str(rng.choice([*BINARY, "Exp", "Tanh", "Relu", "Abs", *REDUCE, "Softmax", "MatMul", "Neg"]))
        shaped = [v for v in values if len(v.shape) == 2 and v.name != "w"]
        first = shaped[int(rng.integers(len(shaped)))]
        if op == "MatMul":
            first = next((v for v in reversed(shaped) if v.shape[1] == 5), values[0])
            inputs, shape = [first, values[1]], first.shape
        elif op in BINARY:
            second = values[int(rng.integers(len(values)))] if rng.random() < 0.3 else \
                shaped[int(rng.integers(len(shaped)))]
            second = values[0] if second.name == "w" else second
            inputs, shape = [first, second], (rows, max(first.shape[-1], second.shape[-1]))
        elif op in REDUCE:
            inputs, shape = [first], (rows, 1)
        else:
            inputs, shape = [first], first.shape
        out = value(f"v{i}", *shape)
        nodes.append(node(op, inputs, out))
        values.append(out)
    made = [n.outputs[0].name for n in nodes]
    keep = sorted({made[-1], *rng.choice(made, size=min(2, len(made)), replace=False)})
    return nodes, feeds, keep


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_compute_the_same_fused(seed: int) -> None:
    nodes, feeds, keep = random_graph(seed)
    assert_fusion_keeps_results(nodes, feeds, keep)


def test_random_graphs_do_fuse() -> None:
    joined = [len(group) for seed in range(40) for group, _ in fuse_graph(with_kernels(random_graph(seed)[0]),
                                                                         random_graph(seed)[2])]
    assert max(joined) >= 4 and sum(n > 1 for n in joined) >= 20


def test_an_elementwise_chain_is_one_kernel_of_one_line() -> None:
    x, b, y = value("x", 3, 5), value("b", 5), value("y", 3, 5)
    s, r, e = value("s", 3, 5), value("r", 3, 5), value("e", 3, 5)
    nodes = [node("Add", [x, b], s), node("Relu", [s], r), node("Mul", [r, x], e), node("Tanh", [e], y)]
    [(covered, kernel)] = assert_fusion_keeps_results(nodes, {"x": np.ones((3, 5), np.float32) * -0.5,
                                                              "b": np.arange(5, dtype=np.float32)}, ["y"])
    assert [n.name for n in covered] == [n.name for n in nodes]
    assert [kernel.sources[a.name] for a in kernel.inputs] == ["x", "b"]  # x, read twice, is one input
    assert [kernel.sources[a.name] for a in kernel.outputs] == ["y"]
    assert kernel.temporaries == [] and kernel.lines == ["3 5 y[{0},{1}] = tanh(((max((a[{0},{1}] + b[{1}]), 0)) * "
                                                         "a[{0},{1}]))"]


def test_a_value_used_outside_the_group_or_kept_stays_an_output() -> None:
    x, w = value("x", 3, 5), value("w", 5, 5)
    r, e, p = value("r", 3, 5), value("e", 3, 5), value("p", 3, 5)
    nodes = [node("Relu", [x], r), node("Exp", [r], e), node("MatMul", [r, w], p)]
    feeds = {"x": np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), "w": np.eye(5, dtype=np.float32)}
    fused = assert_fusion_keeps_results(nodes, feeds, ["e", "p"])
    [kernel] = [k for group, k in fused if len(group) == 2]
    assert [kernel.sources[a.name] for a in kernel.outputs] == ["r", "e"]
    fused = assert_fusion_keeps_results(nodes[:2], feeds, ["r", "e"])
    assert [kernel.sources[a.name] for a in fused[0][1].outputs] == ["r", "e"]


def test_a_group_never_has_a_path_that_leaves_it_and_comes_back() -> None:
    x, w, r, p, y = value("x", 3, 5), value("w", 5, 5), value("r", 3, 5), value("p", 3, 5), value("y", 3, 5)
    nodes = [node("Relu", [x], r), node("MatMul", [r, w], p), node("Add", [r, p], y)]
    feeds = {"x": np.ones((3, 5), np.float32), "w": np.eye(5, dtype=np.float32)}
    fused = assert_fusion_keeps_results(nodes, feeds, ["y"])
    # Relu and Add would enclose the MatMul; the Add ends the MatMul instead
    assert [[n.op for n in group] for group, _ in fused] == [["Relu"], ["MatMul", "Add"]]
    unsupported = [node("Relu", [x], r), node("Neg", [r], p), node("Add", [r, p], y)]  # Neg: no kernel
    fused = assert_fusion_keeps_results(unsupported, feeds, ["y"])
    assert [[n.op for n in group] for group, _ in fused] == [["Relu"], ["Add"]]


def layer_norm_nodes(rows: int, width: int) -> list[Node]:
    """LayerNorm as exporters decompose it: mean, centre, square, mean, sqrt, divide, scale, shift
    (Pow(d, 2) written as Mul(d, d), and the epsilon as a constant input)."""
    x, eps, g, b = value("x", rows, width), value("eps", 1), value("g", width), value("b", width)
    mean, d, sq, var = value("mean", rows, 1), value("d", rows, width), value("sq", rows, width), value("var", rows, 1)
    ve, sd, n, s, y = (value("ve", rows, 1), value("sd", rows, 1), value("n", rows, width), value("s", rows, width),
                       value("y", rows, width))
    return [node("ReduceMean", [x], mean), node("Sub", [x, mean], d), node("Mul", [d, d], sq),
            node("ReduceMean", [sq], var), node("Add", [var, eps], ve), node("Sqrt", [ve], sd),
            node("Div", [d, sd], n), node("Mul", [n, g], s), node("Add", [s, b], y)]


@pytest.mark.parametrize("rows, width", [(3, 7), (4, 16)])
def test_a_decomposed_layer_norm_is_one_kernel(rows: int, width: int) -> None:
    rng = np.random.default_rng(rows)
    feeds = {"x": rng.standard_normal((rows, width)).astype(np.float32), "eps": np.array([1e-5], np.float32),
             "g": rng.standard_normal(width).astype(np.float32), "b": rng.standard_normal(width).astype(np.float32)}
    nodes = layer_norm_nodes(rows, width)
    [(covered, kernel)] = assert_fusion_keeps_results(nodes, feeds, ["y"])
    assert len(covered) == 9 and [kernel.sources[a.name] for a in kernel.outputs] == ["y"]
    # the mean, written by three lines, and x - mean, read by two, stay arrays; the rest is in the lines reading it
    assert [a.name for a in kernel.temporaries] == ["reducemean_y", "sub_y", "reducemean_y2"]
    x = feeds["x"]
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * feeds["g"] + feeds["b"]
    np.testing.assert_allclose(run_fused(with_kernels(nodes), feeds, [(covered, kernel)])["y"], want, rtol=1e-4,
                               atol=1e-5)


def test_softmax_then_mul_is_one_kernel() -> None:
    x, scale, p, y = value("x", 5, 13), value("scale", 5, 1), value("p", 5, 13), value("y", 5, 13)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((5, 13)).astype(np.float32),
             "scale": rng.standard_normal((5, 1)).astype(np.float32)}
    [(covered, kernel)] = assert_fusion_keeps_results([node("Softmax", [x], p), node("Mul", [p, scale], y)], feeds,
                                                      ["y"])
    assert [n.op for n in covered] == ["Softmax", "Mul"]
    assert {a.name for a in kernel.temporaries} == {"softmax_m", "softmax_s"}
    assert kernel.lines[-1] == "5 13 y[{0},{1}] = (exp(x[{0},{1}] - softmax_m[{0}]) / softmax_s[{0}]) * b[{0},0]"


def test_a_value_is_not_written_into_a_line_after_what_it_reads_changed() -> None:
    kernel = Kernel("k")
    xs, us = kernel.input(value("x", 3)), kernel.output(value("u", 3), "u")
    m, t = kernel.temporary("m", "f32", (3,)), kernel.temporary("t", "f32", (3,))
    kernel.loop([3], m.at(["{0}"]), "=", xs.at(["{0}"]))
    kernel.loop([3], t.at(["{0}"]), "=", f"{m.at(['{0}'])} * 2")
    kernel.loop([3], m.at(["{0}"]), "=", f"{m.at(['{0}'])} + 1")  # t keeps the old m
    kernel.loop([3], us.at(["{0}"]), "=", f"{t.at(['{0}'])} + {m.at(['{0}'])}")
    fused = join([(node("K", [value("x", 3)], value("u", 3)), kernel)], ["u"])
    # t is not written into the last line, whose m has changed; it is u itself, read in place
    assert [a.name for a in fused.temporaries] == ["k_m"] and fused.lines[-1] == "3 u[{0}] = u[{0}] + k_m[{0}]"
    got = interpret(load(fused.render()), {"x": np.arange(3, dtype=np.float32)})["u"]
    np.testing.assert_array_equal(got, np.arange(3) * 3 + 1)


def test_a_value_is_not_written_into_a_line_of_another_dtype() -> None:
    kernel = Kernel("k")
    xs, ys = kernel.input(value("x", 4)), kernel.output(Value("y", "i32", (4,)))
    t = kernel.temporary("t", "f32", (4,))
    kernel.loop([4], t.at(["{0}"]), "=", f"{xs.at(['{0}'])} + 0.75")  # rounded after the sum, not before it
    kernel.loop([4], ys.at(["{0}"]), "=", t.at(["{0}"]))
    fused = join([(node("K", [value("x", 4)], Value("y", "i32", (4,))), kernel)], ["y"])
    assert [a.name for a in fused.temporaries] == ["k_t"]
    got = interpret(load(fused.render()), {"x": np.full(4, 0.5, np.float32)})["y"]
    np.testing.assert_array_equal(got, np.ones(4, np.int32))


def test_a_value_read_by_lines_that_become_one_is_written_into_it() -> None:
    x, b, s, q, y = value("x", 3, 5), value("b", 5), value("s", 3, 5), value("q", 3, 5), value("y", 3, 5)
    nodes = [node("Add", [x, b], s), node("Mul", [s, s], q), node("Mul", [q, s], y)]  # s cubed, as Gelu's formula
    feeds = {"x": normal(3, 5), "b": normal(5, seed=1)}
    [(_, kernel)] = assert_fusion_keeps_results(nodes, feeds, ["y"])
    assert kernel.temporaries == [] and len(kernel.lines) == 1


def test_the_exporters_erf_gelu_is_one_kernel_of_one_line() -> None:
    """torch's exporter writes GELU as five nodes, x / sqrt(2), Erf, + 1, times x, times 0.5, with
    constant scalars; with the catalogue's kernels they join into one line."""
    def scalar(name: str, number: float) -> Value:
        return Value(name, "f32", (), np.array(number, np.float32))

    x, d, e, a, m, y = (value(name, 3, 8) for name in ("x", "d", "e", "a", "m", "y"))
    nodes = [node("Div", [x, scalar("root2", 1.4142135)], d), node("Erf", [d], e),
             node("Add", [e, scalar("one", 1)], a), node("Mul", [x, a], m), node("Mul", [m, scalar("half", 0.5)], y)]
    [(covered, kernel)] = fuse_graph([(n, kernel_for(n)) for n in nodes], ["y"])
    assert len(covered) == 5 and kernel.temporaries == [] and len(kernel.lines) == 1 and "erf(" in kernel.lines[0]
    values = {"x": normal(3, 8) * 3}
    run_kernel(kernel, values)
    wide = values["x"].astype(np.float64)
    expected = 0.5 * wide * (1 + np.vectorize(math.erf)(wide / np.float32(1.4142135)))
    np.testing.assert_allclose(values["y"], expected, rtol=1e-6, atol=1e-7)


def test_a_product_accumulates_onto_its_bias_and_residual() -> None:
    """MatMul, Add a bias, Add the residual: one kernel, the product accumulating onto their sum,
    so no loop nest follows it but that of the Relu after them, which applies itself in place: the
    product accumulates into the Relu's output, and no temporary holds the sum."""
    x, w, c = value("x", 3, 5), value("w", 5, 5), value("c", 5)
    p, q, r, y = value("p", 3, 5), value("q", 3, 5), value("r", 3, 5), value("y", 3, 5)
    nodes = [node("MatMul", [x, w], p), node("Add", [p, c], q), node("Add", [x, q], r), node("Relu", [r], y)]
    rng = np.random.default_rng(2)
    feeds = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in (x, w, c)}
    fused = assert_fusion_keeps_results(nodes, feeds, ["y"], rtol=1e-5)
    assert [[n.op for n in group] for group, _ in fused] == [["MatMul", "Add", "Add", "Relu"]]
    product = fused[0][1]
    assert product.temporaries == [] and [a.name for a in product.outputs] == ["y"]
    arrays = {product.sources[a.name]: a.name for a in product.inputs + product.outputs}
    t, x_, w_ = "y", arrays["x"], arrays["w"]
    assert product.lines == [f"3 5 {t}[{{0}},{{1}}] = {arrays['c']}[{{1}}] + {x_}[{{0}},{{1}}]",
                             f"3 5 5 {t}[{{0}},{{1}}] += {x_}[{{0}},{{2}}] * {w_}[{{2}},{{1}}]",
                             f"3 5 y[{{0}},{{1}}] = max({t}[{{0}},{{1}}], 0)"]


def test_a_product_read_elsewhere_is_not_followed_nor_one_broadcast_by_its_add_folded() -> None:
    """A product's result that two nodes read stays an output of its own kernel; an Add that
    broadcasts it to a larger shape cannot be where its accumulation starts, and follows it as a
    line of its own."""
    x, w, row = value("x", 3, 5), value("w", 5, 5), value("row", 1, 5)
    p, q, e, s = value("p", 3, 5), value("q", 3, 5), value("e", 3, 5), value("s", 3, 5)
    used_twice = [node("MatMul", [x, w], p), node("Add", [p, x], q), node("Exp", [p], e)]
    rng = np.random.default_rng(3)
    feeds = {v.name: rng.standard_normal(v.shape).astype(np.float32) for v in (x, w, row)}
    fused = assert_fusion_keeps_results(used_twice, feeds, ["q", "e"])
    assert [len(group) for group, _ in fused] == [1, 1, 1]
    small = value("small", 1, 5)
    broadcast_result = [node("MatMul", [row, w], small), node("Add", [small, x], s)]  # [1,5] + [3,5]: grows
    fused = assert_fusion_keeps_results(broadcast_result, feeds, ["s"])
    ((_, kernel),) = fused
    assert len(kernel.lines) == 3 and kernel.lines[-1].startswith("3 5 y[") and "matmul_y[0,{1}]" in kernel.lines[-1]


def _rows_then(reader: str, between: Callable[[Kernel, dict], None] | None = None) -> Kernel:
    """`t`'s even and odd elements written by two lines, as a Winograd convolution writes its rows,
    then `u = reader(t, r, m)`, joined."""
    kernel = Kernel("k")
    arrays = {"x": kernel.input(value("x", 4)), "r": kernel.input(value("r", 4)),
              "u": kernel.output(value("u", 4), "u"), "t": kernel.temporary("t", "f32", (4,)),
              "m": kernel.temporary("m", "f32", (4,))}
    x, t = arrays["x"], arrays["t"]
    kernel.loop([4], arrays["m"].at(["{0}"]), "=", f"{x.at(['{0}'])} + 1")
    kernel.loop([2], t.at(["{0}*2"]), "=", f"{x.at(['{0}*2'])} * 3")
    kernel.loop([2], t.at(["{0}*2+1"]), "=", f"{x.at(['{0}*2+1'])} - 1")
    if between:
        between(kernel, arrays)
    kernel.loop([4], arrays["u"].at(["{0}"]), "=", reader.format(**{k: a.at(["{0}"]) for k, a in arrays.items()}))
    return join([(node("K", [value("x", 4), value("r", 4)], value("u", 4)), kernel)], ["u"])


def _interpreted(kernel: Kernel) -> np.ndarray:
    x, r = np.array([1, -2, 3, -4], np.float32), np.array([0.5, 1, -7, 2], np.float32)
    return interpret(load(kernel.render()), {"x": x, "x2": r})["u"]


def test_an_elementwise_line_is_written_into_each_line_that_writes_its_operand_in_parts() -> None:
    """A convolution's Relu and residual after a Winograd product, whose rows four lines write: each
    of those lines applies them as it writes, and no loop nest reads the result back."""
    fused = _rows_then("max({t} + {r} * {m}, 0)")
    assert [a.name for a in fused.temporaries] == ["k_m"] and len(fused.lines) == 3
    assert fused.lines[1] == "2 u[{0}*2] = max((x[{0}*2] * 3) + x2[({0}*2)] * k_m[({0}*2)], 0)"
    assert fused.lines[2] == "2 u[{0}*2+1] = max((x[{0}*2+1] - 1) + x2[({0}*2+1)] * k_m[({0}*2+1)], 0)"
    x, r = np.array([1, -2, 3, -4], np.float32), np.array([0.5, 1, -7, 2], np.float32)
    t = np.where(np.arange(4) % 2 == 0, x * 3, x - 1)
    np.testing.assert_array_equal(_interpreted(fused), np.maximum(t + r * (x + 1), 0))


def test_an_elementwise_line_applies_in_place_after_the_writes_when_what_it_reads_changes_between() -> None:
    def overwrite(kernel: Kernel, arrays: dict) -> None:
        kernel.loop([4], arrays["m"].at(["{0}"]), "=", "2")

    fused = _rows_then("{t} * {m}", overwrite)
    assert [a.name for a in fused.temporaries] == ["k_m"] and fused.lines[-1] == "4 u[{0}] = u[{0}] * k_m[{0}]"
    x = np.array([1, -2, 3, -4], np.float32)
    np.testing.assert_array_equal(_interpreted(fused), np.where(np.arange(4) % 2 == 0, x * 3, x - 1) * 2)


def test_a_value_written_in_parts_then_copied_into_a_padded_array_is_written_there() -> None:
    """A convolution's write-back from blocks of channels, then its MaxPool's padded input: the
    lines that write t write p at the copy's offset, the copy goes, and p's border is filled first."""
    kernel = Kernel("k")
    x, u = kernel.input(value("x", 4)), kernel.output(value("u", 4), "u")
    t = kernel.temporary("t", "f32", (4,))
    kernel.loop([2], t.at(["{0}*2"]), "=", f"{x.at(['{0}*2'])} * 3")
    kernel.loop([2], t.at(["{0}*2+1"]), "=", f"{x.at(['{0}*2+1'])} - 1")
    p = embedded(kernel, "p", "f32", (6,), "-inf", (1,), (4,), t.at)
    kernel.loop([4], u.at(["{0}"]), "=", f"max({p.at(['{0}'])}, {p.at(['{0}+2'])})")
    fused = join([(node("K", [value("x", 4)], value("u", 4)), kernel)], ["u"])
    assert [a.name for a in fused.temporaries] == ["k_p"] and len(fused.lines) == 5
    assert all(line.endswith("= -inf") for line in fused.lines[:2])
    assert fused.lines[2:4] == ["2 k_p[{0}*2+1] = x[{0}*2] * 3", "2 k_p[{0}*2+1+1] = x[{0}*2+1] - 1"]
    xs = np.array([1, -2, 3, -4], np.float32)
    padded = np.concatenate([[-np.inf], np.where(np.arange(4) % 2 == 0, xs * 3, xs - 1), [-np.inf]])
    np.testing.assert_array_equal(interpret(load(fused.render()), {"x": xs})["u"],
                                  np.maximum(padded[:4], padded[2:]))
