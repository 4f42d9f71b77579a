"""A `:v` scope in C: its one operation computed on GCC/Clang vector types.

    4 8:v y[{0}*8+{1}] = exp(x[{0}*8+{1}]) * c[]
      ->  *(vf32x8u *)&b_y[i0*8] = dojo_exp_f32x8(*(const vf32x8u *)&b_x[i0*8]) * dojo_splat_f32x8(b_c[0]);

The vector has one lane per iteration, whatever the target's register width:
the compiler splits a wider vector into registers, so one code path serves
every target. Accesses whose last index uses the lane variable with
coefficient 1 (and no other index uses it) are vector loads and stores,
through `aligned(element)` types unless the address is provably a multiple of
the vector's size (buffers are 64-byte aligned); accesses without the lane
variable are broadcast. A reduction whose target has no lane variable (a
horizontal reduction) adds the lanes into the scalar one by one in lane
order, which is the sequential order, so the result is the interpreter's to
the bit. Functions are elementwise helpers; `max` and `min` select with
masks so that NaN propagates.

A scope that does not meet these conditions (a hand-written file can mark
any scope `:v`) is not vectorized; `vector_statement` returns None and the
caller emits a sequential loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dojo_ir.affine import affine
from dojo_ir.moves.vectorize_scope import lane_as_value
from dojo_ir.tree import DTYPE_BYTES, FLOAT_DTYPES, Access, Op, Program, Scope

from .cexpr import (
    REDUCTION_FUNCTIONS,
    REDUCTION_OPERATORS,
    Env,
    Offset,
    Printer,
    bind,
    c_type,
    combine,
    function_name,
    offset,
)

_BASE_ALIGNMENT = 64  # every buffer the generated code allocates or declares is aligned so
# Vector types have a power-of-two size; beyond 64 lanes a loop is better code.
_LANES = (2, 4, 8, 16, 32, 64)


def vector_type(dtype: str, lanes: int, aligned: bool = True) -> str:
    """`vf32x8`, or `vf32x8u` for the type whose alignment is one element's."""
    return f"v{dtype}x{lanes}{'' if aligned else 'u'}"


def _mask_dtype(dtype: str) -> str:
    """The integer dtype of the lanes that a comparison of `dtype` vectors gives."""
    return f"i{dtype[1:]}"


def _lane_use(access: Access, lane: int) -> str | None:
    """"contiguous", "invariant", or None (strided, or along a folded dim)."""
    coefs = [affine(i).coef(lane) for i in access.index]
    if not any(coefs):
        return "invariant"
    if coefs[-1] == 1 and not any(coefs[:-1]):
        return "contiguous"
    return None


def vectorizable(scope: Scope, lane: int, program: Program) -> bool:
    """Whether the `:v` scope at depth `lane` meets the module's conditions."""
    if scope.size not in _LANES or len(scope.body) != 1 or not isinstance(scope.body[0], Op):
        return False
    op = scope.body[0]
    for access in (op.target, *op.reads):
        use = _lane_use(access, lane)
        if use is None or (use == "contiguous" and program.buffer_of[access.array].dims[-1].stored is not None):
            return False
    if _lane_use(op.target, lane) == "invariant" and op.reduction is None:
        return False
    return not lane_as_value(op.value, lane)


@dataclass(frozen=True)
class VectorPrinter(Printer):
    """Prints an expression as a vector of `lanes` lanes; `env` maps the lane
    depth to 0, so an address is that of the first lane."""

    lane: int = 0
    lanes: int = 1

    def pointer(self, access: Access, const: bool) -> str:
        """`(const vf32x8u *)&b_x[...]`: the vector at the access's first lane."""
        buffer = self.program.buffer_of[access.array]
        aligned = _aligned(offset(access, buffer), self.env, self.lanes, DTYPE_BYTES[buffer.dtype])
        qualifier = "const " if const else ""
        return f"({qualifier}{vector_type(buffer.dtype, self.lanes, aligned)} *)&{self.element(access)}"

    def splat(self, scalar: str, dtype: str) -> str:
        return f"dojo_splat_{dtype}x{self.lanes}({scalar})"

    def access(self, access: Access, dtype: str) -> str:
        if _lane_use(access, self.lane) == "invariant":
            return self.splat(super().access(access, dtype), dtype)
        loaded = f"*{self.pointer(access, const=True)}"
        if self.dtype_of(access) == dtype:
            return loaded
        return f"__builtin_convertvector({loaded}, {vector_type(dtype, self.lanes)})"

    def number(self, text: str, dtype: str) -> str:
        return self.splat(super().number(text, dtype), dtype)

    def ref(self, depth: int, dtype: str) -> str:
        return self.splat(super().ref(depth, dtype), dtype)

    def call(self, func: str, args: list[str], dtype: str) -> str:
        return f"dojo_{func}_{dtype}x{self.lanes}({', '.join(args)})"


def _aligned(off: Offset, env: Env, lanes: int, elem: int) -> bool:
    """Whether the first lane's offset is a multiple of `lanes` for every value
    of the loop variables, so the vector is aligned to its size."""
    if lanes * elem > _BASE_ALIGNMENT:
        return False
    linear = bind(off.linear, env)
    return (linear.const % lanes == 0 and all(c % lanes == 0 for _, c in linear.terms)
            and all(stride % lanes == 0 for _, _, stride in off.folded))


def vector_statement(scope: Scope, lane: int, program: Program, env: Env) -> list[str] | None:
    """The C lines computing the `:v` scope at depth `lane`, or None if it is
    not vectorizable. `env` holds the enclosing scopes."""
    if not vectorizable(scope, lane, program):
        return None
    op = scope.body[0]
    assert isinstance(op, Op)
    printer = VectorPrinter(program, {**env, lane: 0}, lane, scope.size)
    dtype = printer.dtype_of(op.target)
    value = printer.value(op.value, dtype)
    if _lane_use(op.target, lane) == "contiguous":
        target = f"*{printer.pointer(op.target, const=False)}"
        if op.reduction is None:
            return [f"{target} = {value};"]
        if op.assign in REDUCTION_OPERATORS:
            return [f"{target} {REDUCTION_OPERATORS[op.assign]}= {value};"]
        func = f"dojo_{REDUCTION_FUNCTIONS[op.assign]}_{dtype}x{scope.size}"
        return [f"{target} = {func}({target}, {value});"]
    # A horizontal reduction, lane by lane in order.
    element = printer.element(op.target)
    lines = ["{", f"    const {vector_type(dtype, scope.size)} v = {value};", f"    {c_type(dtype)} a = {element};"]
    lines += [f"    a = {combine(op.assign, 'a', f'v[{k}]', dtype)};" for k in range(scope.size)]
    return [*lines, f"    {element} = a;", "}"]


# -- types and helpers -----------------------------------------------------------

_TYPE = re.compile(r"\bv(f32|f64|i32|i64)x(\d+)(u?)\b")
_HELPER = re.compile(r"\bdojo_(splat|exp|log|sqrt|tanh|abs|max|min)_(f32|f64|i32|i64)x(\d+)\b")


def used_vector_helpers(source: str) -> list[str]:
    return sorted({m.group(0) for m in _HELPER.finditer(source)})


def vector_helper_source(names: list[str]) -> str:
    """Definitions of the named vector helpers, one per line."""
    return "\n".join(_vector_helper(*_HELPER.fullmatch(name).groups()) for name in names)


def _vector_helper(func: str, dtype: str, lanes_text: str) -> str:
    lanes = int(lanes_text)
    v, t = vector_type(dtype, lanes), c_type(dtype)
    name = f"dojo_{func}_{dtype}x{lanes}"
    if func == "splat":
        return f"static inline {v} {name}({t} s) {{ return ({v}){{{', '.join(['s'] * lanes)}}}; }}"
    if func in ("max", "min"):
        m = vector_type(_mask_dtype(dtype), lanes)
        compare = ">" if func == "max" else "<"
        # NaN propagates: a NaN in `a` is chosen, and a NaN in `b` loses every comparison
        mask = f"(a {compare} b) | (a != a)" if dtype in FLOAT_DTYPES else f"a {compare} b"
        select = f"(({m})a & m) | (({m})b & ~m)"
        return f"static inline {v} {name}({v} a, {v} b) {{ {m} m = {mask}; return ({v})({select}); }}"
    scalar = function_name(func, dtype)
    return (f"static inline {v} {name}({v} a) {{ {v} r; for (int k = 0; k < {lanes}; ++k) r[k] = {scalar}(a[k]); "
            "return r; }")


def used_vector_types(source: str) -> list[tuple[str, int, bool]]:
    """(dtype, lanes, aligned) of every vector type `source` names, sorted."""
    return sorted({(m.group(1), int(m.group(2)), not m.group(3)) for m in _TYPE.finditer(source)})


def vector_typedefs(types: list[tuple[str, int, bool]]) -> str:
    lines = []
    for dtype, lanes, aligned in types:
        size = lanes * DTYPE_BYTES[dtype]
        attributes = f"vector_size({size})" + ("" if aligned else f", aligned({DTYPE_BYTES[dtype]})")
        lines.append(f"typedef {c_type(dtype)} {vector_type(dtype, lanes, aligned)} __attribute__(({attributes}));")
    return "\n".join(lines)
