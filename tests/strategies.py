"""Hypothesis strategies that build valid `.dojo` programs straight from the
tree dataclasses, without going through any text.

`programs()` draws a Program that the checker accepts: every name declared
once, every index affine and in bounds, integer operations free of float
literals and float-only functions, `shared` buffers touched only inside a
`:b` scope, and no dependent iteration. Other test files reuse it:

    from strategies import programs
"""

from __future__ import annotations

import string

from hypothesis import strategies as st

from dojo_ir.tree import (
    DTYPES,
    FLOAT_DTYPES,
    FLOAT_ONLY_FUNCTIONS,
    FUNCTIONS,
    KEYWORDS,
    REDUCTIONS,
    SCOPE_KINDS,
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
)

# Words that FORMAT.md allows as names but that the parser takes for control
# flow at the start of a body line; test_parser.py covers them separately so
# that this strategy stays about round trips.
CONTROL_WORDS = frozenset(("if", "else", "while", "for", "do", "break", "continue", "return", "goto", "switch"))

INTEGER_LITERALS = ("0", "1", "2", "7", "10", "0003", "123456789")
FLOAT_LITERALS = ("0.5", "1.", "1e-5", "2.5E+3", ".25", "3e2", "inf")

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True).filter(
    lambda n: n not in KEYWORDS and n not in CONTROL_WORDS
)

# A comment is the text after `#`; the parser keeps it with its trailing
# whitespace removed, so a drawn comment never ends in whitespace.
comment_texts = st.text(alphabet=string.ascii_letters + string.digits + " #-*/[]{}|=:.,()", max_size=12).map(
    lambda s: s.rstrip()
)
comment_blocks = st.lists(comment_texts, max_size=2).map(tuple)


class _Array:
    """What the generator knows about one array while building the body."""

    def __init__(self, name: str, buffer: str, dtype: str, shape: tuple[int, ...], location: str, role: str):
        self.name = name
        self.buffer = buffer
        self.dtype = dtype
        self.shape = shape
        self.location = location
        self.role = role  # "input", "output" or "temporary"


# -- index expressions ------------------------------------------------------------


def _ref_term(draw, depth: int, coef: int) -> tuple[Expr, int]:
    """An expression for `coef * {depth}`, returned with the sign it must be
    combined with (+1 or -1) so that negative coefficients can read as `- {d}`."""
    magnitude = abs(coef)
    ref: Expr = Ref(depth)
    if magnitude != 1:
        literal = Num(str(magnitude))
        ref = Binary("*", ref, literal) if draw(st.booleans()) else Binary("*", literal, ref)
    if coef < 0 and draw(st.booleans()):
        return Unary("-", ref), 1
    return ref, (1 if coef > 0 else -1)


def _affine_index(draw, extent: int, chain: tuple[int, ...]) -> Expr:
    """An affine index over the chain's scope references whose every value
    lies in `0 .. extent - 1`."""
    terms: list[tuple[int, int]] = []
    width = 0
    for depth in draw(st.permutations(range(len(chain)))):
        coef = draw(st.sampled_from((0, 0, 1, 1, -1, 2, 3)))
        span = abs(coef) * (chain[depth] - 1)
        if coef and width + span <= extent - 1:
            terms.append((depth, coef))
            width += span
    negative = sum(c * (chain[d] - 1) for d, c in terms if c < 0)
    positive = sum(c * (chain[d] - 1) for d, c in terms if c > 0)
    const = draw(st.integers(-negative, extent - 1 - positive))
    expr: Expr | None = None
    for depth, coef in terms:
        term, sign = _ref_term(draw, depth, coef)
        if expr is None:
            expr = term if sign > 0 else Unary("-", term)
        else:
            expr = Binary("+" if sign > 0 else "-", expr, term)
    if expr is None:
        return Num(str(const)) if const >= 0 else Unary("-", Num(str(-const)))
    if const or draw(st.integers(0, 4)) == 0:
        literal = Num(str(abs(const)))
        if const >= 0 and draw(st.booleans()):
            expr = Binary("+", literal, expr)
        else:
            expr = Binary("-" if const < 0 else "+", expr, literal)
    return expr


def _access(draw, array: _Array, chain: tuple[int, ...]) -> Access:
    return Access(array.name, tuple(_affine_index(draw, extent, chain) for extent in array.shape))


# -- value expressions ----------------------------------------------------------


def _value(draw, readable: list[_Array], chain: tuple[int, ...], integer: bool, depth: int) -> Expr:
    """A random expression: literals, `{d}` as a value, accesses to
    `readable`, unary minus, the four operators and every function. An
    integer operation gets no float literal and no float-only function."""
    leaf_kinds = ["int", "access", "access"]
    if not integer:
        leaf_kinds.append("float")
    if chain:
        leaf_kinds.append("ref")
    kinds = leaf_kinds + (["unary", "binary", "binary", "call"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "access" and not readable:
        kind = "int"
    if kind == "int":
        return Num(draw(st.sampled_from(INTEGER_LITERALS)))
    if kind == "float":
        return Num(draw(st.sampled_from(FLOAT_LITERALS)))
    if kind == "ref":
        return Ref(draw(st.integers(0, len(chain) - 1)))
    if kind == "access":
        return _access(draw, draw(st.sampled_from(readable)), chain)
    if kind == "unary":
        return Unary("-", _value(draw, readable, chain, integer, depth - 1))
    if kind == "binary":
        op = draw(st.sampled_from(("+", "-", "*", "/")))
        left = _value(draw, readable, chain, integer, depth - 1)
        return Binary(op, left, _value(draw, readable, chain, integer, depth - 1))
    functions = [f for f in FUNCTIONS if not (integer and f in FLOAT_ONLY_FUNCTIONS)]
    func = draw(st.sampled_from(functions))
    return Call(func, tuple(_value(draw, readable, chain, integer, depth - 1) for _ in range(FUNCTIONS[func])))


# -- the body -------------------------------------------------------------------


class _Nest:
    """The state of one top-level node while its subtree is drawn: which
    arrays it may write, with one assignment per buffer (`=` or a single
    reduction operator, so that reductions carry values legally), and which
    arrays it may read (never one whose buffer it writes)."""

    def __init__(self, draw, writable: list[_Array], readable: list[_Array]):
        self.targets = draw(st.lists(st.sampled_from(writable), min_size=1, max_size=2, unique_by=lambda a: a.name))
        if all(a.location == "shared" for a in self.targets):
            # an operation outside every `:b` scope needs a target it may touch
            self.targets.append(draw(st.sampled_from([a for a in writable if a.role == "output"])))
        written = {a.buffer for a in self.targets}
        self.readable = [a for a in readable if a.buffer not in written]
        self.reduction = {a.buffer: draw(st.sampled_from(REDUCTIONS)) for a in self.targets}


def _op(draw, nest: _Nest, kinds: tuple[str, ...], chain: tuple[int, ...]) -> Op:
    in_block = "b" in kinds
    target = draw(st.sampled_from([a for a in nest.targets if in_block or a.location != "shared"]))
    readable = [a for a in nest.readable if in_block or a.location != "shared"]
    integer = target.dtype not in FLOAT_DTYPES
    assign = draw(st.sampled_from(("=", nest.reduction.get(target.buffer, "="))))
    value = _value(draw, readable, chain, integer, depth=draw(st.integers(0, 3)))
    return Op(_access(draw, target, chain), assign, value, draw(comment_blocks))


def _nodes(draw, nest: _Nest, kinds: tuple[str, ...], chain: tuple[int, ...], depth: int) -> tuple[Node, ...]:
    count = draw(st.integers(1, 3))
    found: list[Node] = []
    for _ in range(count):
        if depth < 3 and draw(st.booleans()):
            size = draw(st.integers(1, 5))
            kind = draw(st.sampled_from(("",) * 4 + SCOPE_KINDS))
            body = _nodes(draw, nest, kinds + (kind,), chain + (size,), depth + 1)
            found.append(Scope(size, kind, body))
        else:
            found.append(_op(draw, nest, kinds, chain))
    return tuple(found)


# -- whole programs -------------------------------------------------------------


@st.composite
def programs(draw) -> Program:
    """A random valid Program: 0-2 inputs, 1-2 outputs, 1-3 temporary
    buffers (some holding two arrays, some with `D:K` dimensions, some
    `shared`), and a body of 1-4 top-level nodes with scopes nested up to
    three deep."""
    n_inputs, n_outputs = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    n_temp_buffers = draw(st.integers(1, 3))
    temp_arrays = [draw(st.integers(1, 2)) for _ in range(n_temp_buffers)]
    needed = 1 + 2 * (n_inputs + n_outputs) + n_temp_buffers + sum(temp_arrays)
    pool = draw(st.lists(names, min_size=needed, max_size=needed, unique=True))
    kernel_name, pool = pool[0], pool[1:]

    def dims(can_fold: bool) -> tuple[Dim, ...]:
        found = []
        for size in draw(st.lists(st.integers(1, 5), max_size=3)):
            stored = None
            if can_fold and size > 1 and draw(st.integers(0, 3)) == 0:
                stored = draw(st.integers(1, size - 1))
            found.append(Dim(size, stored))
        return tuple(found)

    buffers: list[Buffer] = []
    arrays: list[_Array] = []
    inputs, outputs = [], []
    for role, count in (("input", n_inputs), ("output", n_outputs)):
        for _ in range(count):
            array, buffer_name = pool.pop(), pool.pop()
            own = draw(st.booleans())
            buffer_name = array if own else buffer_name
            dtype = draw(st.sampled_from(DTYPES))
            location = draw(st.sampled_from(("heap", "stack")))
            shape = dims(can_fold=False)
            holds = () if own and draw(st.booleans()) else (array,)
            buffers.append(Buffer(buffer_name, dtype, shape, location, holds, draw(comment_blocks)))
            arrays.append(_Array(array, buffer_name, dtype, tuple(d.size for d in shape), location, role))
            (inputs if role == "input" else outputs).append(array)
    for held in temp_arrays:
        buffer_name = pool.pop()
        names_held = [pool.pop() for _ in range(held)]
        dtype = draw(st.sampled_from(DTYPES))
        location = draw(st.sampled_from(("heap", "stack", "shared")))
        shape = dims(can_fold=True)
        holds: tuple[str, ...]
        if held == 1 and draw(st.booleans()):
            holds, names_held = (), [buffer_name]
        else:
            holds = tuple(names_held)
        buffers.append(Buffer(buffer_name, dtype, shape, location, holds, draw(comment_blocks)))
        arrays.extend(_Array(a, buffer_name, dtype, tuple(d.size for d in shape), location, "temporary")
                      for a in names_held)
    buffers = draw(st.permutations(buffers))

    writable = [a for a in arrays if a.role != "input"]
    done: list[_Array] = [a for a in arrays if a.role == "input"]
    body: list[Node] = []
    for _ in range(draw(st.integers(1, 4))):
        nest = _Nest(draw, writable, done)
        if draw(st.integers(0, 3)) == 0:
            body.append(_op(draw, nest, (), ()))
        else:
            size = draw(st.integers(1, 5))
            kind = draw(st.sampled_from(("",) * 4 + SCOPE_KINDS))
            body.append(Scope(size, kind, _nodes(draw, nest, (kind,), (size,), depth=1)))
        done.extend(a for a in nest.targets if a not in done)

    return Program(
        kernel_name,
        tuple(inputs),
        tuple(outputs),
        tuple(buffers),
        tuple(body),
        comments=draw(comment_blocks),
        trailing=draw(comment_blocks),
    )
