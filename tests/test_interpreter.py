"""The reference interpreter against answers computed independently: by hand,
with numpy, and by a naive scalar interpreter written here from FORMAT.md."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dojo_ir.affine import Affine
from dojo_ir.errors import DojoError
from dojo_ir.interpreter import interpret, random_inputs
from dojo_ir.library import KERNELS
from dojo_ir.parser import parse
from dojo_ir.tree import (
    DTYPES,
    Access,
    Binary,
    Buffer,
    Call,
    Dim,
    Expr,
    Node,
    Num,
    Op,
    Program,
    Ref,
    Scope,
    Unary,
    walk_expr,
    walk_ops,
)

NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def run(text: str, keep_temporaries: bool = False, **inputs) -> dict[str, np.ndarray]:
    return interpret(parse(text), inputs, keep_temporaries=keep_temporaries)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- the scalar oracle: every iteration one by one, straight from FORMAT.md -----


def _wrap(value: int, dtype: type) -> np.generic:
    bits = np.iinfo(dtype).bits
    return dtype((value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1))


def _index_value(expr: Expr, env: list[int]) -> int:
    if isinstance(expr, Num):
        return int(expr.text)
    if isinstance(expr, Ref):
        return env[expr.depth]
    if isinstance(expr, Unary):
        return -_index_value(expr.operand, env)
    left, right = _index_value(expr.left, env), _index_value(expr.right, env)
    return {"+": left + right, "-": left - right, "*": left * right}[expr.op]


COMBINE = {"=": lambda old, new: new, "+=": np.add, "*=": np.multiply, "max=": np.maximum, "min=": np.minimum}


class ScalarOracle:
    """One storage array per buffer, one element at a time, scopes as plain loops."""

    def __init__(self, program: Program, inputs: dict[str, np.ndarray]):
        self.program = program
        self.storage = {}
        for b in program.buffers:
            dtype = NUMPY[b.dtype]
            poison = np.nan if b.dtype in ("f32", "f64") else np.iinfo(dtype).min
            self.storage[b.name] = np.full(b.storage_shape, poison, dtype)
        for name, value in inputs.items():
            self.storage[program.buffer_of[name].name][...] = value

    def element(self, access: Access, env: list[int]) -> tuple[np.ndarray, tuple[int, ...]]:
        buffer = self.program.buffer_of[access.array]
        where = tuple(_index_value(i, env) % d.storage for i, d in zip(access.index, buffer.dims, strict=True))
        return self.storage[buffer.name], where

    def value(self, expr: Expr, env: list[int], dtype: type) -> np.generic:
        if isinstance(expr, Num):
            return dtype(int(expr.text) if expr.text.isdigit() else float(expr.text))
        if isinstance(expr, Ref):
            return dtype(env[expr.depth])
        if isinstance(expr, Access):
            array, where = self.element(expr, env)
            return array[where].astype(dtype)
        if isinstance(expr, Unary):
            return -self.value(expr.operand, env, dtype)
        if isinstance(expr, Call):
            args = [self.value(a, env, dtype) for a in expr.args]
            if expr.func == "erf":
                return dtype(math.erf(float(args[0])))
            return getattr(np, {"max": "maximum", "min": "minimum"}.get(expr.func, expr.func))(*args)
        a, b = self.value(expr.left, env, dtype), self.value(expr.right, env, dtype)
        if expr.op == "+":
            return a + b
        if expr.op == "-":
            return a - b
        if expr.op == "*":
            return a * b
        if np.issubdtype(dtype, np.floating):
            return a / b
        q = abs(int(a)) // abs(int(b))
        return _wrap(q if (a < 0) == (b < 0) else -q, dtype)

    def run(self, nodes: tuple[Node, ...], env: list[int]) -> None:
        for node in nodes:
            if isinstance(node, Scope):
                for i in range(node.size):
                    self.run(node.body, env + [i])
                continue
            array, where = self.element(node.target, env)
            array[where] = COMBINE[node.assign](array[where], self.value(node.value, env, array.dtype.type))

    def logical(self, name: str) -> np.ndarray:
        buffer = self.program.buffer_of[name]
        stored = self.storage[buffer.name]
        out = np.empty(buffer.shape, stored.dtype)
        for where in np.ndindex(*buffer.shape):
            out[where] = stored[tuple(i % d.storage for i, d in zip(where, buffer.dims, strict=True))]
        return out


def oracle(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    machine = ScalarOracle(program, inputs)
    with np.errstate(all="ignore"):
        machine.run(program.body, [])
    return {name: machine.logical(name) for name in program.outputs + program.temporaries}


# -- elementwise, broadcast, reductions ---------------------------------------------


def test_elementwise() -> None:
    x, y = rand(3, 5), rand(3, 5, seed=1)
    out = run(
        "kernel k(x, y) -> z\nx f32 [3, 5] heap\ny f32 [3, 5] heap\nz f32 [3, 5] heap\n"
        "3 5 z[{0},{1}] = x[{0},{1}] + y[{0},{1}] * 2\n",
        x=x,
        y=y,
    )
    assert out["z"].dtype == np.float32
    np.testing.assert_array_equal(out["z"], x + y * np.float32(2))


def test_broadcast_of_a_row() -> None:
    x, b = rand(3, 5), rand(5, seed=1)
    out = run(
        "kernel k(x, b) -> z\nx f32 [3, 5] heap\nb f32 [5] heap\nz f32 [3, 5] heap\n"
        "3 5 z[{0},{1}] = x[{0},{1}] * b[{1}]\n",
        x=x,
        b=b,
    )
    np.testing.assert_array_equal(out["z"], x * b)


REDUCTIONS = [("+=", "0", np.add), ("*=", "1", np.multiply), ("max=", "-inf", np.maximum), ("min=", "inf", np.minimum)]


@pytest.mark.parametrize(("assign", "start", "ufunc"), REDUCTIONS)
def test_reduction_of_rows_in_sequential_order(assign: str, start: str, ufunc: np.ufunc) -> None:
    # 1000 terms: numpy's own sum would add pairwise and round differently
    x = rand(3, 1000) if assign != "*=" else (1 + rand(3, 1000) / 100).astype(np.float32)
    out = run(
        f"kernel k(x) -> s\nx f32 [3, 1000] heap\ns f32 [3] heap\n"
        f"3 s[{{0}}] = {start}\n3 1000 s[{{0}}] {assign} x[{{0}},{{1}}]\n",
        x=x,
    )
    expected = [functools.reduce(ufunc, row, np.float32(float(start))) for row in x]
    np.testing.assert_array_equal(out["s"], np.array(expected, np.float32))


@pytest.mark.parametrize(("assign", "start", "ufunc"), REDUCTIONS)
def test_reduction_into_a_scalar(assign: str, start: str, ufunc: np.ufunc) -> None:
    x = rand(40, 25) if assign != "*=" else (1 + rand(40, 25) / 10).astype(np.float32)
    out = run(
        f"kernel k(x) -> s\nx f32 [40, 25] heap\ns f32 [] heap\ns[] = {start}\n40 25 s[] {assign} x[{{0}},{{1}}]\n", x=x
    )
    assert out["s"].shape == ()
    assert out["s"] == functools.reduce(ufunc, x.ravel(), np.float32(float(start)))


def test_index_as_value() -> None:
    out = run(
        "kernel k() -> z, w\nz f32 [3, 4] heap\nw i32 [3, 4] heap\n"
        "3 4 z[{0},{1}] = {0} * 10 + {1} / 2\n3 4 w[{0},{1}] = {0} * 10 + {1} / 2\n"
    )
    i, j = np.indices((3, 4))
    np.testing.assert_array_equal(out["z"], (i * 10 + j / 2).astype(np.float32))
    np.testing.assert_array_equal(out["w"], i * 10 + j // 2)
    assert out["w"].dtype == np.int32


def test_expression_as_location() -> None:
    x = rand(3, 4)
    out = run("kernel k(x) -> z\nx f32 [3, 4] heap\nz f32 [12] heap\n3 4 z[{0}*4+{1}] = x[{0},{1}]\n", x=x)
    np.testing.assert_array_equal(out["z"], x.ravel())


def test_transposed_and_reversed_indices() -> None:
    x = rand(3, 4)
    out = run("kernel k(x) -> z\nx f32 [3, 4] heap\nz f32 [4, 3] heap\n3 4 z[3-{1},{0}] = x[2-{0},{1}]\n", x=x)
    np.testing.assert_array_equal(out["z"], x[::-1].T[::-1])


def test_fused_softmax_of_the_format_page() -> None:
    x = rand(3, 5)
    out = run(
        "kernel softmax(x) -> y\nx f32 [3, 5] heap\ny f32 [3, 5] heap\nm f32 [3] heap\n"
        "e f32 [3, 5:1] heap\ns f32 [3] heap\n"
        "3 m[{0}] = -inf\n"
        "| 5 m[{0}] max= x[{0},{1}]\n"
        "| s[{0}] = 0\n"
        "| 5 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])\n"
        "| | s[{0}] += e[{0},{1}]\n"
        "| 5 y[{0},{1}] = exp(x[{0},{1}] - m[{0}]) / s[{0}]\n",
        x=x,
    )
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["y"], e / e.sum(axis=1, keepdims=True), rtol=1e-6)


# -- storage: D:K and several arrays in one buffer ------------------------------------

FUSED = """kernel k(x) -> y
x f32 [4, 5] heap
y f32 [4, 5] heap
t f32 [4, 5{fold}] heap
4 5 t[{{0}},{{1}}] = x[{{0}},{{1}}] * 2
| | y[{{0}},{{1}}] = t[{{0}},{{1}}] + 1
"""
UNFUSED = """kernel k(x) -> y
x f32 [4, 5] heap
y f32 [4, 5] heap
t f32 [4, 5{fold}] heap
4 5 t[{{0}},{{1}}] = x[{{0}},{{1}}] * 2
4 5 y[{{0}},{{1}}] = t[{{0}},{{1}}] + 1
"""


def test_fused_producer_and_consumer_may_keep_one_element() -> None:
    x = rand(4, 5)
    expected = x * np.float32(2) + np.float32(1)
    np.testing.assert_array_equal(run(FUSED.format(fold=":1"), x=x)["y"], expected)
    np.testing.assert_array_equal(run(FUSED.format(fold=""), x=x)["y"], expected)


def test_reuse_across_scopes_keeps_only_the_last_element() -> None:
    x = rand(4, 5)
    whole = run(UNFUSED.format(fold=""), x=x)["y"]
    folded = run(UNFUSED.format(fold=":1"), x=x, keep_temporaries=True)
    np.testing.assert_array_equal(whole, x * np.float32(2) + np.float32(1))
    # every read of row i finds what the last iteration of row i stored
    np.testing.assert_array_equal(folded["y"], np.repeat(x[:, 4:] * np.float32(2) + np.float32(1), 5, axis=1))
    assert not np.array_equal(folded["y"], whole)
    # a temporary comes back at its declared shape, element i being stored element i mod K
    np.testing.assert_array_equal(folded["t"], np.repeat(x[:, 4:] * np.float32(2), 5, axis=1))


def test_fold_by_two_is_a_rolling_window() -> None:
    x = rand(6)
    out = run(
        "kernel k(x) -> y\nx f32 [6] heap\ny f32 [5] heap\nt f32 [6:2] heap\n"
        "t[0] = x[0]\n5 t[{0}+1] = x[{0}+1]\n| y[{0}] = t[{0}] + t[{0}+1]\n",
        x=x,
        keep_temporaries=True,
    )
    np.testing.assert_array_equal(out["y"], x[:-1] + x[1:])
    np.testing.assert_array_equal(out["t"], np.tile(x[4:], 3))


@pytest.mark.parametrize(("assign", "expected"), [("=", [16, 32]), ("+=", [1 + 4 + 16, 2 + 8 + 32])])
def test_writes_to_folded_storage_land_on_element_i_mod_k(assign: str, expected: list[int]) -> None:
    out = run(
        "kernel k(x) -> y\nx f32 [6] heap\ny f32 [2] heap\nt f32 [6:2] heap\n"
        f"2 t[{{0}}] = 0\n6 t[{{0}}] {assign} x[{{0}}]\n2 y[{{0}}] = t[{{0}}]\n",
        x=np.array([1, 2, 4, 8, 16, 32], np.float32),
    )
    np.testing.assert_array_equal(out["y"], expected)


def test_arrays_of_one_buffer_share_storage() -> None:
    x = rand(5)
    out = run(
        "kernel k(x) -> y\nx f32 [5] heap\ny f32 [5] heap\nbuf f32 [5] heap -> a, b\n"
        "5 a[{0}] = x[{0}] + 1\n5 b[{0}] = a[{0}] * 2\n5 y[{0}] = a[{0}]\n",
        x=x,
        keep_temporaries=True,
    )
    expected = (x + np.float32(1)) * np.float32(2)
    for name in ("y", "a", "b"):
        np.testing.assert_array_equal(out[name], expected)


def test_read_before_write_shows_as_nan_or_least_integer() -> None:
    out = run(
        "kernel k() -> y, n\ny f32 [4] heap\nn i64 [4] heap\nt f32 [4] heap\nu i64 [4] heap\n"
        "2 t[{0}] = 1\n2 u[{0}] = 1\n4 y[{0}] = t[{0}]\n4 n[{0}] = u[{0}]\n"
    )
    np.testing.assert_array_equal(out["y"], [1, 1, np.nan, np.nan])
    np.testing.assert_array_equal(out["n"], [1, 1, np.iinfo(np.int64).min, np.iinfo(np.int64).min])


# -- arithmetic ---------------------------------------------------------------------------


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 0, -8, 9, 2**31 - 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 3, -9, 2], np.int32)
    text = "kernel k(a, b) -> q\na i32 [8] heap\nb i32 [8] heap\nq i32 [8] heap\n8 q[{0}] = a[{0}] / b[{0}]\n"
    np.testing.assert_array_equal(run(text, a=a, b=b)["q"], [3, -3, -3, 3, 0, -2, -1, 2**30 - 1])
    # exact in 64 bits, where a division through floats would lose the low bits
    big = "kernel k(a) -> q\na i64 [2] heap\nq i64 [2] heap\n2 q[{0}] = a[{0}] / -3\n"
    third = (2**62 + 1) // 3
    np.testing.assert_array_equal(run(big, a=np.array([-(2**62) - 1, 2**62 + 1]))["q"], [third, -third])


def test_integer_division_by_zero_is_an_error_at_the_operation() -> None:
    text = "kernel k(a) -> q\n\na i32 [3] heap\nq i32 [3] heap\n\n3 q[{0}] = 6 / a[{0}]\n"
    with pytest.raises(DojoError, match="division by zero") as caught:
        run(text, a=np.array([1, 0, 2], np.int32))
    assert caught.value.diagnostics[0].span.line == 6


def test_arithmetic_is_in_the_dtype_of_the_written_array() -> None:
    out = run(
        "kernel k(x, n) -> s, d, w, m\nx f32 [] heap\nn i32 [] heap\n"
        "s f32 [] heap\nd f64 [] heap\nw i32 [] heap\nm i64 [] heap\n"
        "s[] = x[] + 1e-12\nd[] = x[] + 1e-12\nw[] = n[] * n[]\nm[] = n[] * n[]\n",
        x=np.float32(1),
        n=np.int32(100000),
    )
    assert out["s"] == np.float32(1) and out["s"].dtype == np.float32
    assert out["d"] == 1 + 1e-12 and out["d"].dtype == np.float64
    assert out["w"] == np.int32(1410065408)  # 10**10 wrapped to 32 bits
    assert out["m"] == 10**10 and out["m"].dtype == np.int64


def test_inf_literals() -> None:
    out = run("kernel k() -> y\ny f64 [2] heap\ny[0] = inf\ny[1] = -inf\n")
    np.testing.assert_array_equal(out["y"], [np.inf, -np.inf])


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("func", ["exp", "log", "sqrt", "abs", "tanh"])
def test_float_functions(dtype: str, func: str) -> None:
    x = np.array([-2.5, -1, 0, 0.5, 1, 3, 100, np.inf], NUMPY[dtype])
    text = f"kernel k(x) -> y\nx {dtype} [8] heap\ny {dtype} [8] heap\n8 y[{{0}}] = {func}(x[{{0}}])\n"
    with np.errstate(all="ignore"):
        expected = getattr(np, func)(x)
    out = run(text, x=x)["y"]
    assert out.dtype == NUMPY[dtype]
    np.testing.assert_array_equal(out, expected)


ERF_POINTS = [0.0, -0.0, 1e-45, -1e-40, 1e-30, 0.25, -0.5, 0.921875, 1, -1.5, 2, 3.5, 3.8325, -3.9, 4, 10, np.inf,
              -np.inf, np.nan]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_erf_is_cs_erf_in_float64_rounded_once_to_the_dtype(dtype: str) -> None:
    """numpy has no erf: the interpreter's is libm's in float64, so f32 results are correctly
    rounded whenever libm's erf is within half an ulp of float32, i.e. always in practice."""
    x = np.array(ERF_POINTS, NUMPY[dtype])
    n = len(x)
    text = f"kernel k(x) -> y\nx {dtype} [{n}] heap\ny {dtype} [{n}] heap\n{n} y[{{0}}] = erf(x[{{0}}])\n"
    out = run(text, x=x)["y"]
    assert out.dtype == NUMPY[dtype]
    expected = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(NUMPY[dtype])
    np.testing.assert_array_equal(out, expected)
    assert np.signbit(out[1]) and out[0] == 0 and list(out[-3:-1]) == [1, -1] and np.isnan(out[-1])
    assert out[2] > 0 and (dtype == "f64" or out[2] == np.float32(1e-45))  # erf(x) = 1.128 x, rounded in the subnormals


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_abs_in_every_dtype(dtype: str) -> None:
    x = np.array([-3, 5, 0, 7], NUMPY[dtype])
    y = np.array([2, -4, 0, 7], NUMPY[dtype])
    out = run(
        f"kernel k(x, y) -> a, b, c\nx {dtype} [4] heap\ny {dtype} [4] heap\n"
        f"a {dtype} [4] heap\nb {dtype} [4] heap\nc {dtype} [4] heap\n"
        "4 a[{0}] = max(x[{0}], y[{0}])\n4 b[{0}] = min(x[{0}], y[{0}])\n4 c[{0}] = abs(x[{0}] - y[{0}])\n",
        x=x,
        y=y,
    )
    np.testing.assert_array_equal(out["a"], np.maximum(x, y))
    np.testing.assert_array_equal(out["b"], np.minimum(x, y))
    np.testing.assert_array_equal(out["c"], np.abs(x - y))


def test_max_and_min_propagate_nan() -> None:
    out = run(
        "kernel k(x) -> a, b, s\nx f32 [2] heap\na f32 [2] heap\nb f32 [2] heap\ns f32 [] heap\nt f32 [2] heap\n"
        "2 a[{0}] = max(t[{0}], x[{0}])\n2 b[{0}] = min(x[{0}], t[{0}])\ns[] = 0\n2 s[] max= t[{0}]\n",
        x=np.array([1, 2], np.float32),
    )
    assert np.isnan(out["a"]).all() and np.isnan(out["b"]).all() and np.isnan(out["s"])


# -- order of writes ----------------------------------------------------------------------


def test_repeated_writes_keep_the_last_iteration() -> None:
    x = rand(4, 3)
    out = run("kernel k(x) -> z\nx f32 [4, 3] heap\nz f32 [4] heap\n4 3 z[{0}] = x[{0},{1}]\n", x=x)
    np.testing.assert_array_equal(out["z"], x[:, 2])


def test_repeated_writes_along_a_diagonal_keep_the_last_iteration() -> None:
    x = rand(3, 4)
    out = run("kernel k(x) -> z\nx f32 [3, 4] heap\nz f32 [6] heap\n3 4 z[{0}+{1}] = x[{0},{1}]\n", x=x)
    expected = np.empty(6, np.float32)
    for i in range(3):
        for j in range(4):
            expected[i + j] = x[i, j]
    np.testing.assert_array_equal(out["z"], expected)


def test_an_iteration_reading_an_earlier_one_runs_in_order() -> None:
    # a prefix sum: what a dependence checker rejects still has a sequential meaning
    x = rand(50)
    out = run("kernel k(x) -> z\nx f32 [50] heap\nz f32 [51] heap\nz[0] = 0\n50 z[{0}+1] = z[{0}] + x[{0}]\n", x=x)
    expected = [np.float32(0)]
    for v in x:
        expected.append(expected[-1] + v)
    np.testing.assert_array_equal(out["z"], expected)


def test_an_iteration_reading_a_later_one_sees_the_old_value() -> None:
    out = run("kernel k() -> z\nz i32 [5] heap\n5 z[{0}] = {0}\n4 z[{0}] = z[{0}+1] * 10 + z[{0}]\n")
    np.testing.assert_array_equal(out["z"], [10, 21, 32, 43, 4])


# -- inputs -------------------------------------------------------------------------------

ADD_ONE = "kernel k(x) -> y\nx f32 [2, 3] heap\ny f32 [2, 3] heap\n2 3 y[{0},{1}] = x[{0},{1}] + 1\n"


def test_inputs_are_cast_to_the_declared_dtype() -> None:
    out = run(ADD_ONE, x=[[1, 2, 3], [4, 5, 6]])
    assert out["y"].dtype == np.float32
    np.testing.assert_array_equal(out["y"], [[2, 3, 4], [5, 6, 7]])


@pytest.mark.parametrize(
    ("inputs", "message", "line"),
    [
        ({}, "missing input x", 1),
        ({"x": np.zeros((2, 3)), "w": np.zeros(2)}, "unexpected input w", 1),
        ({"x": np.zeros((3, 2))}, r"input x has shape \[3, 2\], but it is declared \[2, 3\]", 2),
    ],
)
def test_bad_inputs_are_errors(inputs: dict, message: str, line: int) -> None:
    with pytest.raises(DojoError, match=message) as caught:
        interpret(parse(ADD_ONE), inputs)
    assert caught.value.diagnostics[0].span.line == line


def test_random_inputs_are_deterministic_and_typed() -> None:
    program = parse("kernel k(a, n) -> y\na f64 [3, 4] heap\nn i32 [100] heap\ny f64 [] heap\ny[] = 0\n")
    first, again, other = random_inputs(program, 7), random_inputs(program, 7), random_inputs(program, 8)
    assert set(first) == {"a", "n"}
    assert first["a"].dtype == np.float64 and first["a"].shape == (3, 4)
    assert first["n"].dtype == np.int32 and -8 <= first["n"].min() and first["n"].max() <= 8
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["a"], other["a"])


# -- random programs against the scalar oracle ----------------------------------------------

EXTENT = 6  # of every dimension: small, so that different accesses often meet
MAX_DEPTH = 3


@st.composite
def _dims(draw, foldable: bool) -> tuple[Dim, ...]:
    count = draw(st.integers(0, 2))
    folds = st.sampled_from([None, 1, 2, 2, 3]) if foldable else st.just(None)
    return tuple(Dim(EXTENT, draw(folds)) for _ in range(count))


def _index(draw, sizes: tuple[int, ...], dim: int) -> Expr:
    """Mostly `{dim}`, as a loop nest over an array is usually written, so that
    scopes often touch disjoint parts of what they write; else an affine index
    that stays inside EXTENT, or failing that a constant."""
    if dim < len(sizes) and draw(st.integers(0, 2)):
        return Ref(dim)
    depths = draw(st.lists(st.integers(0, len(sizes) - 1), max_size=2, unique=True)) if sizes else []
    form = Affine.of({d: draw(st.sampled_from([1, 1, 1, 2, -1, -2])) for d in depths})
    lo, hi = form.bounds(sizes)
    if hi - lo >= EXTENT:
        form, lo, hi = Affine(0), 0, 0
    return (form + Affine(draw(st.integers(-lo, EXTENT - 1 - hi)))).to_expr()


def _access(draw, program: dict, sizes: tuple[int, ...], names: list[str]) -> Access:
    name = draw(st.sampled_from(names))
    return Access(name, tuple(_index(draw, sizes, k) for k in range(len(program["dims"][name]))))


def _value(draw, program: dict, sizes: tuple[int, ...], dtype: str, depth: int = 0) -> Expr:
    is_float = dtype in ("f32", "f64")
    readable = [n for n, t in program["dtype"].items() if is_float or t in ("i32", "i64")]
    kinds = ["access", "access", "num"] + (["ref"] if sizes else [])
    if depth < 2:
        kinds += ["unary", "binary", "binary", "call"]
    kind = draw(st.sampled_from(kinds))
    if kind == "access":
        return _access(draw, program, sizes, readable)
    if kind == "num":
        return Num(
            draw(st.sampled_from(["0", "1", "2", "3", "0.5", "1e-3", "inf"] if is_float else ["0", "1", "2", "7"]))
        )
    if kind == "ref":
        return Ref(draw(st.integers(0, len(sizes) - 1)))
    if kind == "unary":
        return Unary("-", _value(draw, program, sizes, dtype, depth + 1))
    if kind == "binary":
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        left = _value(draw, program, sizes, dtype, depth + 1)
        if op == "/" and not is_float:  # an integer division by zero is an error, not a value
            return Binary(op, left, Num(draw(st.sampled_from(["2", "3", "5"]))))
        return Binary(op, left, _value(draw, program, sizes, dtype, depth + 1))
    funcs = ["abs", "max", "min"] + (["sqrt", *program["transcendentals"]] if is_float else [])
    func = draw(st.sampled_from(funcs))
    count = 2 if func in ("max", "min") else 1
    return Call(func, tuple(_value(draw, program, sizes, dtype, depth + 1) for _ in range(count)))


def _nodes(draw, program: dict, sizes: tuple[int, ...]) -> tuple[Node, ...]:
    nodes: list[Node] = []
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        if len(sizes) < MAX_DEPTH and draw(st.booleans()):
            size = draw(st.sampled_from([1, 2, 3, 4, 4]))
            nodes.append(Scope(size, draw(st.sampled_from(["", "", "p", "v"])), _nodes(draw, program, sizes + (size,))))
        else:
            target = _access(draw, program, sizes, program["writable"])
            value = _value(draw, program, sizes, program["dtype"][target.array])
            nodes.append(Op(target, draw(st.sampled_from(["=", "=", "+=", "*=", "max=", "min="])), value))
    return tuple(nodes)


@st.composite
def programs(draw) -> Program:
    dtypes = st.sampled_from(DTYPES)
    buffers = [Buffer(name, draw(dtypes), draw(_dims(False)), "heap") for name in ("x0", "x1", "y")]
    buffers.append(Buffer("t", draw(dtypes), draw(_dims(True)), "heap"))
    buffers.append(Buffer("m", draw(dtypes), draw(_dims(True)), "heap", ("a", "b")))
    arrays = {name: b for b in buffers for name in b.array_names}
    info = {
        "dims": {name: b.dims for name, b in arrays.items()},
        "dtype": {name: b.dtype for name, b in arrays.items()},
        "writable": ["y", "t", "a", "b"],
        # half the programs do without, so that they compare bit for bit
        "transcendentals": draw(st.sampled_from([[], ["exp", "log", "tanh", "erf"]])),
    }
    # Mostly write every element first, so that values rather than NaN flow on
    start = [_fill(b) for b in buffers[2:] if draw(st.integers(0, 3))]
    return Program("random", ("x0", "x1"), ("y",), tuple(buffers), (*start, *_nodes(draw, info, ())))


def _fill(buffer: Buffer) -> Node:
    """`13 13 a[{0},{1}] = {0}*13 + {1}`: a different value in every logical element."""
    rank = len(buffer.dims)
    value = (
        Num("3") if rank == 0 else Ref(0) if rank == 1 else Binary("+", Binary("*", Ref(0), Num(str(EXTENT))), Ref(1))
    )
    node: Node = Op(Access(buffer.array_names[0], tuple(Ref(d) for d in range(rank))), "=", value)
    for dim in reversed(buffer.dims):
        node = Scope(dim.size, "", (node,))
    return node


def _uses_transcendentals(program: Program) -> bool:
    return any(
        isinstance(e, Call) and e.func in ("exp", "log", "tanh", "erf")
        for op, _ in walk_ops(program.body)
        for e in walk_expr(op.value)
    )


def _same(actual: np.ndarray, expected: np.ndarray, exact: bool) -> None:
    """Bit for bit, so that a reduction applied in another order shows; but
    exp, log and tanh may round differently in numpy's vector loops than on a
    single element on some CPUs, so with them, nearly."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if exact or not np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def _check_against_oracle(program: Program, seed: int) -> None:
    inputs = random_inputs(program, seed)
    actual = interpret(program, inputs, keep_temporaries=True)
    expected = oracle(program, inputs)
    assert set(actual) == set(expected)
    for name in expected:
        _same(actual[name], expected[name], exact=not _uses_transcendentals(program))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**16))
def test_random_programs_match_the_scalar_oracle(program: Program, seed: int) -> None:
    _check_against_oracle(program, seed)


@pytest.mark.parametrize("name", KERNELS)
def test_library_kernels_match_the_scalar_oracle(name: str) -> None:
    _check_against_oracle(parse(KERNELS[name].small()), 0)


# -- speed: printed, not asserted -------------------------------------------------------------


def test_a_million_iterations_and_a_matmul_give_numpys_numbers() -> None:
    """The sizes bench/interpreter_speed.py times: the vectorised paths must
    still be exact there."""
    elementwise = parse("kernel k(x) -> y\nx f32 [1000, 1000] heap\ny f32 [1000, 1000] heap\n"
                        "1000 1000 y[{0},{1}] = exp(x[{0},{1}]) * 2 + {1}\n")
    inputs = random_inputs(elementwise, 0)
    expected = np.exp(inputs["x"]) * np.float32(2) + np.arange(1000, dtype=np.float32)
    np.testing.assert_allclose(interpret(elementwise, inputs)["y"], expected, rtol=1e-6)
    matmul = parse("kernel k(a, b) -> c\na f32 [128, 96] heap\nb f32 [96, 64] heap\nc f32 [128, 64] heap\n"
                   "128 64 c[{0},{1}] = 0\n128 64 96 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]\n")
    inputs = random_inputs(matmul, 1)
    reference = inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)
    np.testing.assert_allclose(interpret(matmul, inputs)["c"], reference, rtol=1e-4, atol=1e-4)
