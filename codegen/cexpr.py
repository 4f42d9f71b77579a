"""C expressions, shared by the C backend and the CUDA/HIP backend.

Everything here prints a piece of a `.dojo` program as C text whose meaning is
exactly the reference interpreter's (dojo_ir/interpreter.py):

- arithmetic is done in the dtype of the array being written: every operand
  of another dtype is cast to it, literals become `((float)1e-5)` (a double
  literal rounded once to float, as numpy's `float32(1e-5)` does) and scope
  references used as values become `((float)i0)`;
- `max` and `min` propagate NaN (`dojo_max_f32`, ...), `abs` of an integer
  wraps like numpy's (the backends compile with `-fwrapv`);
- integer `/` is C's, which truncates toward zero;
- an access reads the flattened storage of its buffer: the STORAGE shape in C
  order, where a `D:K` dimension indexes `(i % K)` (just 0 for K = 1), and
  arrays in one buffer use one pointer, so they share its storage.

Names are deterministic, so one program always prints one text:
`loop_var(d)` is `i{d}`, `buffer_var(name)` is `b_{name}` (the prefix keeps
array names clear of C keywords and of the generator's own names) and helper
functions are `dojo_*`.

Usage (a scalar statement):

    env = {0: "i0", 1: 3}             # depth -> loop variable, or its value when unrolled
    printer = Printer(program, env)
    lhs = printer.element(op.target)  # "b_y[i0*4 + 3]"
    rhs = printer.value(op.value, dtype)
    body = f"{lhs} = {rhs};"
    helpers = helper_source(used_helpers(body), "static inline")

`Printer` is a frozen dataclass whose leaf methods (`access`, `number`,
`ref`, `call`) a backend may override, e.g. to load vectors or to read a GPU
thread index; `value` handles the operators and precedence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import prod

from dojo_ir.affine import Affine, affine
from dojo_ir.printer import PRECEDENCE, UNARY, precedence
from dojo_ir.tree import FLOAT_DTYPES, Access, Binary, Buffer, Call, Expr, Num, Program, Ref, Unary

C_TYPES = {"f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t"}
# What an element holds before it is written (the interpreter's poison).
POISON = {"f32": "NAN", "f64": "NAN", "i32": "INT32_MIN", "i64": "INT64_MIN"}
# The C operator of each reduction that has one; max= and min= use helpers.
REDUCTION_OPERATORS = {"+=": "+", "*=": "*"}
REDUCTION_FUNCTIONS = {"max=": "max", "min=": "min"}

Env = Mapping[int, str | int]  # scope depth -> its loop variable's name, or its value in an unrolled copy


def c_type(dtype: str) -> str:
    return C_TYPES[dtype]


def loop_var(depth: int) -> str:
    return f"i{depth}"


def buffer_var(buffer: str) -> str:
    return f"b_{buffer}"


def storage_size(buffer: Buffer) -> int:
    """Stored elements of `buffer` (a scalar stores one)."""
    return prod(buffer.storage_shape)


# -- storage offsets ---------------------------------------------------------------


@dataclass(frozen=True)
class Offset:
    """A flattened storage offset: `linear + sum((form % k) * stride)`. The
    whole dimensions fold into one affine form; each `D:K` dimension with
    K > 1 keeps its own term (K = 1 always stores element 0)."""

    linear: Affine
    folded: tuple[tuple[Affine, int, int], ...] = ()  # (index form, K, stride)


def offset(access: Access, buffer: Buffer) -> Offset:
    """Where `access` points in the flattened storage of `buffer`."""
    linear = Affine(0)
    folded = []
    stride = 1
    for index, dim in reversed(list(zip(access.index, buffer.dims, strict=True))):
        form = affine(index)
        if dim.stored is None:
            linear = linear + form.scale(stride)
        elif dim.stored > 1:
            folded.append((form, dim.stored, stride))
        stride *= dim.storage
    return Offset(linear, tuple(reversed(folded)))


def bind(form: Affine, env: Env) -> Affine:
    """`form` with the depths that `env` gives a value substituted."""
    for depth, value in env.items():
        if isinstance(value, int):
            form = form.substitute(depth, Affine(value))
    return form


def affine_text(form: Affine, env: Env) -> str:
    """`i0*512 + i1 + 3`: the form over the loop variables of `env`."""
    form = bind(form, env)
    parts = []
    for depth, coef in form.terms:
        name = env[depth]
        term = str(name) if abs(coef) == 1 else f"{name}*{abs(coef)}"
        if not parts:
            parts.append(f"-{term}" if coef < 0 else term)
        else:
            parts.append(f"- {term}" if coef < 0 else f"+ {term}")
    if not parts:
        return str(form.const)
    if form.const:
        parts.append(f"- {-form.const}" if form.const < 0 else f"+ {form.const}")
    return " ".join(parts)


def offset_text(off: Offset, env: Env) -> str:
    """The C text of an offset. Constant folded terms are folded; indices are
    never negative (they lie within their logical extent), so C's `%` is the
    interpreter's `mod`."""
    linear = bind(off.linear, env)
    parts = []
    for form, k, stride in off.folded:
        form = bind(form, env)
        if not form.terms:
            linear = linear + Affine(form.const % k * stride)
            continue
        index = affine_text(form, env)
        term = f"({index} % {k})" if " " not in index else f"(({index}) % {k})"
        parts.append(term if stride == 1 else f"{term}*{stride}")
    # folded dimensions are usually the outer ones (reuse_dims folds loops
    # that a tile does not need), so they read best first
    if linear.terms or linear.const or not parts:
        parts.append(affine_text(linear, env))
    return " + ".join(parts)


# -- literals ----------------------------------------------------------------------


def literal(text: str, dtype: str) -> str:
    """A number literal in `dtype`: `((float)1e-5)`, `((float)INFINITY)`."""
    return f"(({c_type(dtype)}){'INFINITY' if text == 'inf' else text})"


def cast(text: str, dtype: str) -> str:
    """`text` converted to `dtype`; a cast binds tighter than any operator."""
    return f"({c_type(dtype)}){text}"


# -- expressions -------------------------------------------------------------------


def function_name(func: str, dtype: str) -> str:
    """The C function computing `func` on scalars of `dtype`."""
    if func in ("max", "min") or (func == "abs" and dtype not in FLOAT_DTYPES):
        return f"dojo_{func}_{dtype}"
    if func == "abs":
        func = "fabs"
    return f"{func}f" if dtype == "f32" else func


@dataclass(frozen=True)
class Printer:
    """Prints the expressions of one operation: `env` says what each scope
    reference stands for."""

    program: Program
    env: Env

    def element(self, access: Access) -> str:
        """The stored element an access names, as an lvalue: `b_x[i0*4 + i1]`."""
        buffer = self.program.buffer_of[access.array]
        return f"{buffer_var(buffer.name)}[{offset_text(offset(access, buffer), self.env)}]"

    def dtype_of(self, access: Access) -> str:
        return self.program.buffer_of[access.array].dtype

    # The leaves; each returns an operand of type `dtype`.

    def access(self, access: Access, dtype: str) -> str:
        text = self.element(access)
        return text if self.dtype_of(access) == dtype else cast(text, dtype)

    def number(self, text: str, dtype: str) -> str:
        return literal(text, dtype)

    def ref(self, depth: int, dtype: str) -> str:
        value = self.env[depth]
        return literal(str(value), dtype) if isinstance(value, int) else f"(({c_type(dtype)}){value})"

    def call(self, func: str, args: list[str], dtype: str) -> str:
        return f"{function_name(func, dtype)}({', '.join(args)})"

    # The operators.

    def value(self, expr: Expr, dtype: str) -> str:
        """`expr` computed in `dtype`, with the fewest parentheses that keep
        its tree (a right operand of equal precedence keeps them: float `+` is
        not associative)."""
        if isinstance(expr, Num):
            return self.number(expr.text, dtype)
        if isinstance(expr, Ref):
            return self.ref(expr.depth, dtype)
        if isinstance(expr, Access):
            return self.access(expr, dtype)
        if isinstance(expr, Call):
            return self.call(expr.func, [self.value(a, dtype) for a in expr.args], dtype)
        if isinstance(expr, Unary):
            return "-" + self._operand(expr.operand, UNARY + 1, dtype)
        if isinstance(expr, Binary):
            precedence = PRECEDENCE[expr.op]
            left = self._operand(expr.left, precedence, dtype)
            right = self._operand(expr.right, precedence + 1, dtype)
            return f"{left} {expr.op} {right}"
        raise ValueError(f"cannot generate code for {type(expr).__name__.lower()}")

    def _operand(self, expr: Expr, needed: int, dtype: str) -> str:
        text = self.value(expr, dtype)
        # `- -x` would read as `--x`; a unary operand of unary minus keeps parentheses
        return f"({text})" if precedence(expr) < needed else text


def combine(assign: str, old: str, new: str, dtype: str) -> str:
    """The value a reduction stores: `old + new`, `dojo_max_f32(old, new)`."""
    if assign in REDUCTION_OPERATORS:
        return f"{old} {REDUCTION_OPERATORS[assign]} {new}"
    return f"{function_name(REDUCTION_FUNCTIONS[assign], dtype)}({old}, {new})"


def statement(printer: Printer, target: Access, assign: str, value: Expr) -> str:
    """One scalar operation as a C statement."""
    dtype = printer.dtype_of(target)
    lhs = printer.element(target)
    rhs = printer.value(value, dtype)
    if assign == "=":
        return f"{lhs} = {rhs};"
    if assign in REDUCTION_OPERATORS:
        # C's `a += b + c` is `a = a + (b + c)`, the interpreter's `reduce(old, value)`
        return f"{lhs} {REDUCTION_OPERATORS[assign]}= {rhs};"
    return f"{lhs} = {combine(assign, lhs, rhs, dtype)};"


# -- helper functions --------------------------------------------------------------

_HELPER = re.compile(r"\bdojo_(max|min|abs)_(f32|f64|i32|i64)\b")


def used_helpers(source: str) -> list[str]:
    """The scalar helpers (`dojo_max_f32`, ...) that `source` calls, sorted."""
    return sorted({m.group(0) for m in _HELPER.finditer(source)})


def helper_source(names: Iterable[str], qualifier: str = "static inline") -> str:
    """Definitions of the named scalar helpers, one per line; `qualifier`
    prefixes each (`static inline`, or `static __device__ inline` on a GPU)."""
    lines = []
    for name in names:
        match = _HELPER.fullmatch(name)
        if match is None:
            raise ValueError(f"unknown helper `{name}`")
        func, dtype = match.groups()
        t = c_type(dtype)
        lines.append(f"{qualifier} {t} {name}({t} a, {t} b) {{ return {_helper_body(func, dtype)}; }}"
                     if func != "abs" else f"{qualifier} {t} {name}({t} a) {{ return {_helper_body(func, dtype)}; }}")
    return "\n".join(lines)


def _helper_body(func: str, dtype: str) -> str:
    floating = dtype in FLOAT_DTYPES
    if func == "abs":
        # -fwrapv makes -INT_MIN wrap to INT_MIN, as numpy's abs does
        return "a < 0 ? -a : a"
    compare = ">" if func == "max" else "<"
    if not floating:
        return f"a {compare} b ? a : b"
    # A NaN in either argument is the result, as numpy's maximum and minimum:
    # `(a > b || a != a) ? a : b`, written so that GCC emits maxss and no branch.
    return f"a != a ? a : (a {compare} b ? a : b)"
