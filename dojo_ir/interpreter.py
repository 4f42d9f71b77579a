"""The reference interpreter: the exact sequential meaning of a `.dojo` program.

It is the oracle that moves and code generators are tested against, so its
speed-ups use only criteria that are simple and plainly correct, and never the
moves' dependence analysis. A scope runs in one of three ways:

1. disjoint: every buffer written inside the scope is accessed, by every access
   inside it, with one and the same affine function of the scope's variable
   alone in one whole (not `D:K`) dimension. Different iterations then touch
   disjoint storage, so all iterations run at once, child by child.
2. perfect nest: the scope holds a chain of scopes down to one operation that
   reads no array of the buffer it writes. The whole nest runs at once; writes
   are applied in sequential order (C order of the iteration axes).
3. otherwise the iterations run one by one in Python.

Scopes that run at once become numpy axes ("vector axes"), outermost first;
`{d}` is then an index array that varies along its axis, and everything an
operation computes broadcasts to the box of all current vector axes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import erf, prod

import numpy as np

from .affine import Affine, affine
from .errors import NOWHERE, DojoError
from .tree import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    Access,
    Binary,
    Buffer,
    Call,
    Expr,
    Node,
    Num,
    Op,
    Program,
    Ref,
    Scope,
    Span,
    Unary,
    walk_ops,
)

__all__ = ["MAX_BYTES", "interpret", "memory_bytes", "random_inputs"]

_NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
_REDUCE = {"+=": np.add, "*=": np.multiply, "max=": np.maximum, "min=": np.minimum}


def _erf(x: Value) -> Value:
    """The error function, in `x`'s dtype: C's `erf` of each element as a float64, rounded once to
    float32 for f32. numpy has no erf and scipy is not a dependency; libm's (through `math`) is
    the one the generated scalar code calls for f64."""
    x = np.asarray(x)
    wide = np.fromiter(map(erf, x.astype(np.float64).ravel().tolist()), np.float64, x.size)
    return wide.reshape(x.shape).astype(x.dtype)


_FUNCTIONS = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "abs": np.abs,
    "tanh": np.tanh,
    "erf": _erf,
    "max": np.maximum,
    "min": np.minimum,
}
_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply}
# Running a scope at once is skipped (the scope is looped instead) when the box
# of vector axes would exceed this many points; it bounds memory, not meaning.
_MAX_POINTS = 1 << 22
# The most memory the arrays of one run may take (inputs, every buffer, the
# outputs returned); a program needing more is refused before anything is
# allocated, rather than failing inside numpy or exhausting the machine.
MAX_BYTES = 4 << 30

Value = np.ndarray | np.generic
Index = int | np.ndarray
Env = dict[int, Index]  # scope depth -> its variable: an int, or an index array along a vector axis
Axes = tuple[tuple[int, int], ...]  # the vector axes as (depth, size), outermost first
Storage = dict[str, np.ndarray]  # buffer name -> its stored elements
Evaluator = Callable[[Storage, Env], Value]


# -- the plan: the program with its decisions made once ----------------------


@dataclass(frozen=True)
class _Location:
    """Where an access points: the buffer, and per dimension the affine index
    and the stored extent K of a `D:K` dimension (None when stored whole)."""

    buffer: str
    dims: tuple[tuple[Affine, int | None], ...]


@dataclass(frozen=True)
class _OpPlan:
    target: _Location
    value: Evaluator
    reduce: np.ufunc | None
    reads_own_buffer: bool  # reads an array of the buffer it writes


@dataclass(frozen=True)
class _ScopePlan:
    depth: int
    size: int
    body: tuple[_ScopePlan | _OpPlan, ...]
    disjoint: bool
    # set when the scope is a perfect nest that may run at once: its scopes as
    # (depth, size), outermost first, and its one operation
    nest: Axes | None
    nest_op: _OpPlan | None


def _locate(access: Access, program: Program) -> _Location:
    buffer = program.buffer_of[access.array]
    return _Location(buffer.name, tuple((affine(i), d.stored) for i, d in zip(access.index, buffer.dims, strict=True)))


def _is_disjoint(scope: Scope, depth: int, program: Program) -> bool:
    """Rule 1 of the module docstring, for `scope` at position `depth`."""
    ops = [op for op, _ in walk_ops(scope.body)]
    for buffer in {program.buffer_of[op.target.array] for op in ops}:
        found = [a for op in ops for a in (op.target, *op.reads) if program.buffer_of[a.array] == buffer]
        if not any(_separates(found, k, depth) for k, d in enumerate(buffer.dims) if d.stored is None):
            return False
    return True


def _separates(found: list[Access], dim: int, depth: int) -> bool:
    """Whether every access indexes `dim` by the same `a*{depth}+b`, a != 0."""
    forms = {affine(a.index[dim]) for a in found}
    if len(forms) != 1:
        return False
    (form,) = forms
    return len(form.terms) == 1 and form.terms[0][0] == depth


def _plan_op(op: Op, program: Program) -> _OpPlan:
    buffer = program.buffer_of[op.target.array]
    return _OpPlan(
        _locate(op.target, program),
        _compile(op.value, _NUMPY_DTYPES[buffer.dtype], program, op),
        _REDUCE.get(op.assign),
        any(program.buffer_of[a.array] == buffer for a in op.reads),
    )


def _plan_scope(scope: Scope, depth: int, program: Program) -> _ScopePlan:
    body = _plan_nodes(scope.body, depth + 1, program)
    nest, nest_op = None, None
    if len(body) == 1:
        (child,) = body
        # gathering every read before any write is only right when the nest
        # cannot read what it writes
        if isinstance(child, _OpPlan) and not child.reads_own_buffer:
            nest, nest_op = ((depth, scope.size),), child
        elif isinstance(child, _ScopePlan) and child.nest is not None:
            nest, nest_op = ((depth, scope.size), *child.nest), child.nest_op
    return _ScopePlan(depth, scope.size, body, _is_disjoint(scope, depth, program), nest, nest_op)


def _plan_nodes(nodes: tuple[Node, ...], depth: int, program: Program) -> tuple[_ScopePlan | _OpPlan, ...]:
    return tuple(_plan_op(n, program) if isinstance(n, Op) else _plan_scope(n, depth, program) for n in nodes)


# -- expressions ----------------------------------------------------------------


def _compile(expr: Expr, dtype: type, program: Program, op: Op) -> Evaluator:
    """A function computing `expr` in `dtype` for the iterations in `env`."""
    if isinstance(expr, Num):
        try:
            number = dtype(int(expr.text) if expr.is_integer else float(expr.text))
        except (OverflowError, ValueError):
            message = f"the literal `{expr.text[:24]}` does not fit in {np.dtype(dtype).name}"
            raise DojoError.at(expr.span or op.span or NOWHERE, message, "interpret") from None
        return lambda storage, env: number
    if isinstance(expr, Ref):
        depth = expr.depth
        return lambda storage, env: np.asarray(env[depth], dtype)
    if isinstance(expr, Access):
        where = _locate(expr, program)
        return lambda storage, env: np.asarray(storage[where.buffer][_index(where, env)], dtype)
    if isinstance(expr, Unary):
        operand = _compile(expr.operand, dtype, program, op)
        return lambda storage, env: np.negative(operand(storage, env))
    if isinstance(expr, Binary):
        left = _compile(expr.left, dtype, program, op)
        right = _compile(expr.right, dtype, program, op)
        if expr.op in _BINARY:
            ufunc = _BINARY[expr.op]
            return lambda storage, env: ufunc(left(storage, env), right(storage, env))
        if np.issubdtype(dtype, np.floating):
            return lambda storage, env: np.divide(left(storage, env), right(storage, env))
        span = op.span or expr.span or NOWHERE
        return lambda storage, env: _truncating_divide(left(storage, env), right(storage, env), span)
    if isinstance(expr, Call):
        func = _FUNCTIONS[expr.func]
        args = [_compile(a, dtype, program, op) for a in expr.args]
        return lambda storage, env: func(*(a(storage, env) for a in args))
    raise DojoError.at(expr.span or op.span or NOWHERE, f"cannot evaluate {type(expr).__name__.lower()}", "interpret")


def _truncating_divide(a: Value, b: Value, span: Span) -> Value:
    if np.any(b == 0):
        raise DojoError.at(span, "integer division by zero", "interpret")
    # a - fmod(a, b) is an exact multiple of b, so flooring it truncates
    return (a - np.fmod(a, b)) // b


def _index(where: _Location, env: Env) -> tuple[Index, ...]:
    index = []
    for form, stored in where.dims:
        i = form.const
        for depth, coef in form.terms:
            i = i + coef * env[depth]
        index.append(i if stored is None else i % stored)
    return tuple(index)


# -- running --------------------------------------------------------------------


def _run_nodes(plans: tuple[_ScopePlan | _OpPlan, ...], storage: Storage, env: Env, axes: Axes) -> None:
    for plan in plans:
        if isinstance(plan, _OpPlan):
            _run_op(plan, storage, env, axes)
        else:
            _run_scope(plan, storage, env, axes)


def _run_scope(plan: _ScopePlan, storage: Storage, env: Env, axes: Axes) -> None:
    points = prod(n for _, n in axes)
    if plan.size > 1 and plan.disjoint and points * plan.size <= _MAX_POINTS:
        env, axes = _add_axis(env, axes, plan.depth, plan.size)
        _run_nodes(plan.body, storage, env, axes)
    elif plan.nest is not None and points * prod(n for _, n in plan.nest) <= _MAX_POINTS:
        for depth, size in plan.nest:
            env, axes = _add_axis(env, axes, depth, size)
        _run_op(plan.nest_op, storage, env, axes)
    else:
        for i in range(plan.size):
            _run_nodes(plan.body, storage, {**env, plan.depth: i}, axes)


def _add_axis(env: Env, axes: Axes, depth: int, size: int) -> tuple[Env, Axes]:
    """A new innermost vector axis for `{depth}`; the index arrays of the
    outer axes gain a trailing length-1 dimension so they still broadcast."""
    grown: Env = {d: v[..., np.newaxis] if isinstance(v, np.ndarray) else v for d, v in env.items()}
    grown[depth] = np.arange(size).reshape((1,) * len(axes) + (size,))
    return grown, axes + ((depth, size),)


def _run_op(plan: _OpPlan, storage: Storage, env: Env, axes: Axes) -> None:
    value = plan.value(storage, env)
    index = _index(plan.target, env)
    store = storage[plan.target.buffer]
    if not axes:
        store[index] = value if plan.reduce is None else plan.reduce(store[index], value)
        return
    shape = tuple(n for _, n in axes)
    flat = _flat_index(index, store.shape, shape)
    values = np.broadcast_to(value, shape)
    cells = store.reshape(-1)
    if _injective(plan.target, store.shape, axes):
        cells[flat] = values if plan.reduce is None else plan.reduce(cells[flat], values)
        return
    # Several points write one element: apply them in C order of the axes,
    # which is the sequential order.
    flat, values = flat.ravel(), values.ravel()
    if plan.reduce is None:
        last = _last_occurrences(flat)
        cells[flat[last]] = values[last]
    else:
        plan.reduce.at(cells, flat, values)


def _strides(shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-ordered array of `shape`."""
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def _injective(target: _Location, storage_shape: tuple[int, ...], axes: Axes) -> bool:
    """Whether a write provably hits a different stored element at every point
    of the box of vector axes. Its flat storage index is affine in the axes'
    variables; it is injective when the coefficients, sorted by size, each
    exceed the greatest reach of all the smaller ones (a mixed radix)."""
    coef = {d: 0 for d, _ in axes}
    for (form, stored), stride in zip(target.dims, _strides(storage_shape), strict=True):
        if stored == 1:
            continue  # always stored element 0
        for depth, c in form.terms:
            if depth in coef:
                if stored is not None:
                    return False  # i mod K wraps: not affine
                coef[depth] += c * stride
    reach = 0
    for c, n in sorted((abs(coef[d]), n) for d, n in axes if n > 1):
        if c <= reach:
            return False
        reach += c * (n - 1)
    return True


def _flat_index(index: tuple[Index, ...], storage_shape: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    flat: Index = 0
    for i, stride in zip(index, _strides(storage_shape), strict=True):
        flat = flat + i * stride
    return np.broadcast_to(np.asarray(flat, np.intp), shape)


def _last_occurrences(flat: np.ndarray) -> np.ndarray:
    """Positions in `flat` of the last occurrence of each distinct value."""
    # np.unique's return_index gives first occurrences (it sorts stably), so
    # look at the reversed array
    _, first = np.unique(flat[::-1], return_index=True)
    return flat.size - 1 - first


# -- the public API -------------------------------------------------------------


def _poison(dtype: type) -> np.generic:
    """What an element holds before it is written: NaN, or for integers the
    least value, so that a read before a write shows."""
    return dtype(np.nan) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _input_error(span: Span | None, message: str) -> DojoError:
    return DojoError.at(span or NOWHERE, message, "interpret-inputs")


def _input_span(program: Program, name: str) -> Span | None:
    """Where the kernel line names input `name`, else the kernel line."""
    return program.io_spans[program.inputs.index(name)] if program.io_spans else program.span


def memory_bytes(program: Program) -> int:
    """What running `program` allocates for arrays: every buffer's storage, and
    the inputs given and outputs returned at their logical shapes."""
    io = [program.buffer_of[name] for name in program.inputs + program.outputs]
    return (sum(b.storage_bytes for b in program.buffers)
            + sum(prod(b.shape) * DTYPE_BYTES[b.dtype] for b in io))


def _require_memory(program: Program, max_bytes: int) -> None:
    """Refuse, before allocating, a program whose arrays would take more than `max_bytes`."""
    total = memory_bytes(program)
    if total > max_bytes:
        largest = max(program.buffers, key=lambda b: b.storage_bytes)
        message = (f"the arrays of {program.name} take {total} bytes (`{largest.name}` the most); "
                   f"the interpreter allocates at most {max_bytes}")
        raise DojoError.at(largest.span or program.span or NOWHERE, message, "interpret-memory")


def _initial_storage(program: Program, inputs: Mapping[str, np.ndarray]) -> Storage:
    missing = [name for name in program.inputs if name not in inputs]
    if missing:
        message = f"missing input {', '.join(missing)}; kernel {program.name} takes {', '.join(program.inputs)}"
        raise _input_error(_input_span(program, missing[0]), message)
    extra = [name for name in inputs if name not in program.inputs]
    if extra:
        expected = ", ".join(program.inputs) or "no inputs"
        raise _input_error(program.span, f"unexpected input {', '.join(extra)}; kernel {program.name} takes {expected}")
    storage: Storage = {}
    for buffer in program.buffers:
        dtype = _NUMPY_DTYPES[buffer.dtype]
        storage[buffer.name] = np.full(buffer.storage_shape, _poison(dtype), dtype)
    for name in program.inputs:
        buffer = program.buffer_of[name]
        given = np.asarray(inputs[name])
        if given.shape != buffer.shape:
            message = f"input {name} has shape {list(given.shape)}, but it is declared {list(buffer.shape)}"
            raise _input_error(buffer.span or program.span, message)
        storage[buffer.name][...] = given.astype(_NUMPY_DTYPES[buffer.dtype])
    return storage


def _logical(stored: np.ndarray, buffer: Buffer) -> np.ndarray:
    """An array at its declared shape: element i of a `D:K` dimension is stored element i mod K."""
    if not buffer.dims:
        return stored.copy()
    return stored[np.ix_(*(np.arange(d.size) % d.storage for d in buffer.dims))]


def interpret(
    program: Program, inputs: Mapping[str, np.ndarray], *, keep_temporaries: bool = False, max_bytes: int = MAX_BYTES
) -> dict[str, np.ndarray]:
    """Run `program` on `inputs` (one array per kernel input, at its declared
    shape; cast to its dtype) and return the outputs by name, and also the
    temporaries if `keep_temporaries`. Every array comes at its declared
    logical shape. Elements never written are NaN, or the least integer.
    A program whose arrays take more than `max_bytes` is refused (DojoError)."""
    _require_memory(program, max_bytes)
    storage = _initial_storage(program, inputs)
    plans = _plan_nodes(program.body, 0, program)
    with np.errstate(all="ignore"):  # NaN and inf are values here, not accidents
        _run_nodes(plans, storage, {}, ())
    names = program.outputs + (program.temporaries if keep_temporaries else ())
    return {name: _logical(storage[program.buffer_of[name].name], program.buffer_of[name]) for name in names}


def random_inputs(program: Program, seed: int, max_bytes: int = MAX_BYTES) -> dict[str, np.ndarray]:
    """Inputs for `program`, the same for the same seed: floats standard
    normal, integers uniform in [-8, 8]. Refused like `interpret` when the
    program's arrays would take more than `max_bytes`."""
    _require_memory(program, max_bytes)
    rng = np.random.default_rng(seed)
    inputs = {}
    for name in program.inputs:
        buffer = program.buffer_of[name]
        dtype = _NUMPY_DTYPES[buffer.dtype]
        if buffer.dtype in FLOAT_DTYPES:
            inputs[name] = np.asarray(rng.standard_normal(buffer.shape, dtype=dtype))
        else:
            inputs[name] = rng.integers(-8, 9, size=buffer.shape, dtype=dtype)
    return inputs
