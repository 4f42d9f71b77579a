"""A `:v` scope in C: its one operation computed on GCC/Clang vector types.

    4 8:v y[{0}*8+{1}] = exp(x[{0}*8+{1}]) * c[]
      ->  *(vf32x8u *)&b_y[i0*8] = dojo_exp_f32x8(*(const vf32x8u *)&b_x[i0*8]) * dojo_splat_f32x8(b_c[0]);

The vector has one lane per iteration, whatever the target's register width:
the compiler splits a wider vector into registers, so one code path serves
every target. A scope whose size is not a power of two (a convolution's 54
output columns), or wider than 64 bytes, is computed in pieces (`pieces`): as
many 64-byte vectors as fit, then one each of half that, a quarter, ... down
to 16 bytes, and scalars for what is left (GCC keeps 8-byte vectors in
general-purpose registers, shuffling them in and out of vector ones), each
piece the same statement with the lane variable at the piece's first lane.
Pieces no wider than a 512-bit register let the compiler keep a tile of
accumulators in registers, which it does not do for the halves of a wider
vector. A scope whose pieces would end in scalars (a conv row's tail of 6
lanes: 4 and 2 scalars) instead ends in one vector of the next power of two
(`widened_tail`: 8; a row of 27 is 16 lanes, then 11 as a vector of 16):
a read whose row holds all 8 lanes at every iteration is a whole load (the extra lanes are garbage that no
stored lane depends on), and a store into a temporary's row padded past every
index any access reaches (`pad_dim`; `last_index_reach`) is a whole store;
other reads and stores move the 6 lanes alone (`dojo_loadn`, `dojo_storen`). A
tile of such accumulators then stays in registers.
Accesses whose last index uses the lane variable with
coefficient 1 (and no other index uses it) are vector loads and stores,
through `aligned(element)` types unless the address is provably a multiple of
the vector's size (buffers are 64-byte aligned); a read with a larger
coefficient there (a stride-2 pool) is gathered from contiguous loads by
shuffles (`dojo_gather2_f32x16`); accesses without the lane
variable are broadcast, and so is a subexpression with no such access, computed
once as a scalar. A reduction whose target has no lane variable (a
horizontal reduction) combines the lanes as a tree (`dojo_hadd_f32x16`, ...)
into the scalar; when the `:v` scope is the only child of a sequential scope
and its target does not move with that scope, `vector_accumulation` keeps up
to four vector accumulators across that scope's iterations and reduces them
once after it. Both reassociate the reduction, which the moves treat as
reorderable: results agree with the interpreter within the verification
tolerance, not to the bit. Functions are elementwise helpers. The vector
types and the helpers that the statements name (`dojo_splat_*`, `dojo_hadd_*`,
`dojo_exp_*`, ...) are C text of their own, in codegen/vector_helpers.py.

Streaming stores (`streamable`; `dojo_stream_*` in vector_helpers.py): a `:v` store of 16-64
aligned bytes may be written with x86's non-temporal stores, which skip the
read of the line that an ordinary store's write-allocate costs; c.py decides
which outputs (`streamed`) and fences them (`dojo_sfence`).

A scope that does not meet these conditions (a hand-written file can mark
any scope `:v`) is not vectorized; `vector_statement` returns None and the
caller emits a sequential loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from dojo_ir.affine import Affine, affine
from dojo_ir.refs import used_as_value
from dojo_ir.tree import (
    DTYPE_BYTES,
    Access,
    Binary,
    Call,
    Expr,
    Op,
    Program,
    Scope,
    Unary,
    accesses,
    walk_op_paths,
)

from .cexpr import (
    REDUCTION_FUNCTIONS,
    REDUCTION_OPERATORS,
    Env,
    Offset,
    Printer,
    bind,
    combine,
    offset,
    statement,
)
from .vector_helpers import HORIZONTAL_OF, WIDEST_REGISTER_BYTES, vector_type

_BASE_ALIGNMENT = 64  # every buffer the generated code allocates or declares is aligned so
# Vector types have a power-of-two size; beyond 64 lanes a scope is computed in pieces.
_LANES = (2, 4, 8, 16, 32, 64)


PIECE_BYTES = WIDEST_REGISTER_BYTES  # a piece no wider than one register of the widest target


def pieces(size: int, dtype_bytes: int = 4) -> list[tuple[int, int]]:
    """(first lane, lanes) of the vectors that cover `size` lanes of `dtype_bytes`, widest (64
    bytes) first, then down to 16 bytes; pieces of one lane are scalars."""
    found, first = [], 0
    for lanes in (*reversed(_LANES), 1):
        if lanes * dtype_bytes > PIECE_BYTES or (lanes > 1 and lanes * dtype_bytes < 16):
            continue
        while size - first >= lanes:
            found.append((first, lanes))
            first += lanes
    return found


def lane_use(access: Access, lane: int) -> str | None:
    """"contiguous", "invariant", "strided" (a constant step of more than 1 in the last index
    alone), or None (any other use)."""
    coefs = [affine(i).coef(lane) for i in access.index]
    if not any(coefs):
        return "invariant"
    if coefs[-1] < 1 or any(coefs[:-1]):
        return None
    return "contiguous" if coefs[-1] == 1 else "strided"


def vectorizable(scope: Scope, lane: int, program: Program) -> bool:
    """Whether the `:v` scope at depth `lane` meets the module's conditions."""
    if scope.size < 2 or len(scope.body) != 1 or not isinstance(scope.body[0], Op):
        return False
    op = scope.body[0]
    for access in (op.target, *op.reads):
        use = lane_use(access, lane)
        if use is None or (use == "strided" and access is op.target) or (
                use != "invariant" and program.buffer_of[access.array].dims[-1].stored is not None):
            return False
    if lane_use(op.target, lane) == "invariant" and op.reduction is None:
        return False
    return not used_as_value(op.value, lane)


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
        use = lane_use(access, self.lane)
        if use == "invariant":
            return self.splat(super().access(access, dtype), dtype)
        if use == "strided":
            stride = affine(access.index[-1]).coef(self.lane)
            return self.converted(f"dojo_gather{stride}_{self.dtype_of(access)}x{self.lanes}(&{self.element(access)})",
                                  access, dtype)
        return self.converted(f"*{self.pointer(access, const=True)}", access, dtype)

    def converted(self, loaded: str, access: Access, dtype: str) -> str:
        """The vector `loaded` of `access`'s dtype, in `dtype`."""
        if self.dtype_of(access) == dtype:
            return loaded
        return f"__builtin_convertvector({loaded}, {vector_type(dtype, self.lanes)})"

    def number(self, text: str, dtype: str) -> str:
        return self.splat(super().number(text, dtype), dtype)

    def ref(self, depth: int, dtype: str) -> str:
        return self.splat(super().ref(depth, dtype), dtype)

    def call(self, func: str, args: list[str], dtype: str) -> str:
        return f"dojo_{func}_{dtype}x{self.lanes}({', '.join(args)})"

    def value(self, expr: Expr, dtype: str) -> str:
        # What the lanes share is computed once, as a scalar, and broadcast: a layer norm's
        # `sqrt(var[{0}] + 1e-5)` is one square root per row, not one per vector.
        if isinstance(expr, (Unary, Binary, Call)) and all(lane_use(a, self.lane) == "invariant"
                                                           for a in accesses(expr)):
            return self.splat(Printer(self.program, self.env).value(expr, dtype), dtype)
        return super().value(expr, dtype)


def _aligned(off: Offset, env: Env, lanes: int, elem: int) -> bool:
    """Whether the first lane's offset is a multiple of `lanes` for every value
    of the loop variables, so the vector is aligned to its size."""
    if lanes * elem > _BASE_ALIGNMENT:
        return False
    linear = bind(off.linear, env)
    return (linear.const % lanes == 0 and all(c % lanes == 0 for _, c in linear.terms)
            and all(stride % lanes == 0 for _, _, stride in off.folded))


def widened_tail(size: int, dtype_bytes: int) -> tuple[int, int] | None:
    """The last piece of a `:v` scope of `size` lanes whose pieces would end in scalars, widened to
    one vector, as (first lane, lanes): after as many of the widest pieces as fit, the lanes left
    as one vector of the next power of two (a conv row's tail of 6, 4 lanes and 2 scalars: (0, 8);
    a Winograd row of 27 f32, 16, 8 and 3 scalars: (16, 16)); None when the pieces are all vectors
    or that vector would be narrower than 16 bytes."""
    if not any(lanes == 1 for _, lanes in pieces(size, dtype_bytes)):
        return None
    widest = PIECE_BYTES // dtype_bytes
    first = size // widest * widest
    wide = 1 << (size - first).bit_length()
    return (first, wide) if 16 <= wide * dtype_bytes <= PIECE_BYTES else None


def vector_pieces(size: int, dtype_bytes: int) -> list[tuple[int, int]]:
    """(first lane, lanes) of the vectors that compute a `:v` scope of `size` lanes where the
    statement's arrays allow a widened vector (`vector_statement`)."""
    tail = widened_tail(size, dtype_bytes)
    return pieces(size, dtype_bytes) if tail is None else [*pieces(tail[0], dtype_bytes), tail]


def last_index_reach(program: Program) -> dict[str, int]:
    """For each buffer with dimensions, the largest index of its last dimension that any access
    reaches: the elements beyond it (a padded row's end) are never read nor written."""
    reach: dict[str, int] = {}
    for _, op, chain in walk_op_paths(program.body):
        for access in (op.target, *op.reads):
            if access.index:
                name = program.buffer_of[access.array].name
                reach[name] = max(reach.get(name, -1), largest_value(affine(access.index[-1]), chain))
    return reach


def largest_value(form: Affine, chain: tuple[Scope, ...], skip: int | None = None) -> int:
    """The largest value of `form` over the iterations of `chain`, the scope at `skip` held at 0."""
    return form.const + sum(c * (chain[d].size - 1) for d, c in form.terms if c > 0 and d != skip)


def vector_statement(scope: Scope, lane: int, program: Program, env: Env, stream: bool = False,
                     chain: tuple[Scope, ...] | None = None, reach: dict[str, int] | None = None
                     ) -> list[str] | None:
    """The C lines computing the `:v` scope at depth `lane`, or None if it is
    not vectorizable. `env` holds the enclosing scopes. `stream`: store with
    a streaming store (the caller checked `streamable`). With the scopes around
    it (`chain`, the scope itself last) and `last_index_reach`, a scope whose
    pieces would end in scalars ends in one widened vector (`_widened_piece`)."""
    if not vectorizable(scope, lane, program):
        return None
    op = scope.body[0]
    assert isinstance(op, Op)
    dtype_bytes = max(DTYPE_BYTES[program.buffer_of[a.array].dtype] for a in (op.target, *op.reads))
    if scope.size in _LANES and scope.size * dtype_bytes <= PIECE_BYTES:
        return _piece(op, lane, 0, scope.size, program, env, stream)
    parts = pieces(scope.size, dtype_bytes)
    if lane_use(op.target, lane) == "invariant":
        return _horizontal_pieces(op, lane, parts, program, env)
    tail = widened_tail(scope.size, dtype_bytes)
    if tail and chain is not None and reach is not None and all(lane_use(a, lane) != "strided" for a in op.reads):
        first, wide = tail
        padded = _padded_target(op, lane, first, wide, scope.size - first, program, reach)
        # after whole pieces, a reduction whose target's rows are not padded keeps its pieces: its
        # last 8 lanes and scalars stay in registers, where a vector of 16 would be loaded and
        # stored lane by lane at every step (a stored program from before row padding)
        if first == 0 or op.reduction is None or padded:
            whole = vector_pieces(scope.size, dtype_bytes)[:-1]
            return [line for start, lanes in whole for line in _piece(op, lane, start, lanes, program, env)] \
                + _widened_piece(op, lane, first, wide, scope.size - first, program, env, chain, padded)
    return [line for first, lanes in parts for line in _piece(op, lane, first, lanes, program, env)]


def _horizontal_pieces(op: Op, lane: int, parts: list[tuple[int, int]], program: Program, env: Env) -> list[str]:
    """A horizontal reduction in pieces: the pieces of each width combined lane by lane first, so
    that only one tree of each width reduces into the scalar (a reassociation, as every
    horizontal reduction is)."""
    lines: list[str] = []
    by_width: dict[int, list[int]] = {}
    for first, lanes in parts:
        by_width.setdefault(lanes, []).append(first)
    for lanes, firsts in by_width.items():
        if lanes == 1:
            lines += [line for first in firsts for line in _piece(op, lane, first, 1, program, env)]
            continue
        printers = [VectorPrinter(program, {**env, lane: first}, lane, lanes) for first in firsts]
        dtype = printers[0].dtype_of(op.target)
        total = printers[0].value(op.value, dtype)
        for printer in printers[1:]:
            total = _vector_combine(op.assign, total, printer.value(op.value, dtype), dtype, lanes)
        element = printers[0].element(op.target)
        reduced = f"dojo_{HORIZONTAL_OF[op.assign]}_{dtype}x{lanes}({total})"
        if op.assign in REDUCTION_OPERATORS:
            lines.append(f"{element} {REDUCTION_OPERATORS[op.assign]}= {reduced};")
        else:
            lines.append(f"{element} = {combine(op.assign, element, reduced, dtype)};")
    return lines


def _piece(op: Op, lane: int, first: int, lanes: int, program: Program, env: Env, stream: bool = False
           ) -> list[str]:
    """The statement computing `lanes` lanes of `op` from lane `first` on."""
    if lanes == 1:
        return [statement(Printer(program, {**env, lane: first}), op.target, op.assign, op.value)]
    printer = VectorPrinter(program, {**env, lane: first}, lane, lanes)
    dtype = printer.dtype_of(op.target)
    value = printer.value(op.value, dtype)
    if lane_use(op.target, lane) == "contiguous":
        target = f"*{printer.pointer(op.target, const=False)}"
        if op.reduction is None:
            if stream:
                return [f"dojo_stream_{dtype}x{lanes}(&{printer.element(op.target)}, {value});"]
            return [f"{target} = {value};"]
        if op.assign in REDUCTION_OPERATORS:
            return [f"{target} {REDUCTION_OPERATORS[op.assign]}= {value};"]
        func = f"dojo_{REDUCTION_FUNCTIONS[op.assign]}_{dtype}x{lanes}"
        return [f"{target} = {func}({target}, {value});"]
    # A horizontal reduction: the lanes combined as a tree, then into the scalar.
    element = printer.element(op.target)
    total = f"dojo_{HORIZONTAL_OF[op.assign]}_{dtype}x{lanes}({value})"
    if op.assign in REDUCTION_OPERATORS:
        return [f"{element} {REDUCTION_OPERATORS[op.assign]}= {total};"]
    return [f"{element} = {combine(op.assign, element, total, dtype)};"]


@dataclass(frozen=True)
class _WidePrinter(VectorPrinter):
    """Prints the `used` lanes of a statement as a vector of `lanes` (more) lanes: a read whose
    row holds the extra lanes for every iteration of `chain` is a plain vector load (the extra
    lanes are garbage that no stored lane depends on), any other is a load of `used` lanes."""

    used: int = 1
    first: int = 0  # the piece's first lane
    chain: tuple[Scope, ...] = ()

    def whole_rows(self, access: Access) -> bool:
        last = self.program.buffer_of[access.array].storage_shape[-1]
        return largest_value(affine(access.index[-1]), self.chain, skip=self.lane) + self.first + self.lanes <= last

    def access(self, access: Access, dtype: str) -> str:
        if lane_use(access, self.lane) == "invariant" or self.whole_rows(access):
            return super().access(access, dtype)
        return self.converted(f"dojo_loadn_{self.dtype_of(access)}x{self.lanes}(&{self.element(access)}, {self.used})",
                              access, dtype)


def _padded_target(op: Op, lane: int, first: int, lanes: int, used: int, program: Program,
                   reach: dict[str, int]) -> bool:
    """Whether the `lanes` lanes from `first` on of `op`'s target, of which `used` are computed,
    fall into a temporary's row whose padding no access reaches (`pad_dim` makes it,
    `last_index_reach` proves it): then they are stored whole."""
    buffer = program.buffer_of[op.target.array]
    form = affine(op.target.index[-1])
    return (not set(buffer.array_names) & {*program.inputs, *program.outputs} and form.terms == ((lane, 1),)
            and form.const + first + lanes <= buffer.storage_shape[-1]
            and reach[buffer.name] < form.const + first + used)


def _widened_piece(op: Op, lane: int, first: int, lanes: int, used: int, program: Program, env: Env,
                   chain: tuple[Scope, ...], padded: bool) -> list[str]:
    """The `used` lanes of a `:v` scope from lane `first` on computed as one vector of `lanes`,
    so that a register tile of it (a conv row's tail of 6) stays a tile of vectors. It stores the
    extra lanes too when they fall into the padding of a temporary's rows that no access reaches
    (`padded`: `_padded_target`), else it stores `used` lanes."""
    printer = _WidePrinter(program, {**env, lane: first}, lane, lanes, used, first, chain)
    dtype = printer.dtype_of(op.target)
    value = printer.value(op.value, dtype)
    if padded:
        target = f"*{printer.pointer(op.target, const=False)}"
        if op.reduction is None:
            return [f"{target} = {value};"]
        return [f"{target} = {_vector_combine(op.assign, target, value, dtype, lanes)};"]
    element = f"&{printer.element(op.target)}"
    if op.reduction is not None:
        old = f"dojo_loadn_{dtype}x{lanes}({element}, {used})"
        value = _vector_combine(op.assign, old, value, dtype, lanes)
    return [f"dojo_storen_{dtype}x{lanes}({element}, {value}, {used});"]


# The value that leaves a reduction's accumulator unchanged, per dtype.
_IDENTITY = {
    "+=": {"f32": "0.0f", "f64": "0.0", "i32": "0", "i64": "0"},
    "*=": {"f32": "1.0f", "f64": "1.0", "i32": "1", "i64": "1"},
    "max=": {"f32": "-INFINITY", "f64": "-INFINITY", "i32": "INT32_MIN", "i64": "INT64_MIN"},
    "min=": {"f32": "INFINITY", "f64": "INFINITY", "i32": "INT32_MAX", "i64": "INT64_MAX"},
}
_MAX_ACCUMULATORS = 4  # independent chains, so that the combine's latency does not limit the loop


def vector_accumulation(scope: Scope, depth: int, program: Program, env: Env) -> list[str] | None:
    """A sequential scope whose one child is a `:v` horizontal reduction into
    an element that no iteration of the scope moves (`32 16:v m[] max= x[...]`)
    as vector accumulators kept across its iterations, combined into the
    element once after the loop (a reassociation of the reduction, which the
    moves treat as reorderable), or None when the scope is not of that shape.
    Up to four accumulators take the iterations in turn."""
    if scope.kind in ("p", "u", "v") or len(scope.body) != 1 or not isinstance(scope.body[0], Scope):
        return None
    inner = scope.body[0]
    lane = depth + 1
    if inner.kind != "v" or inner.size not in _LANES or not vectorizable(inner, lane, program):
        return None
    op = inner.body[0]
    assert isinstance(op, Op)
    if lane_use(op.target, lane) != "invariant" or any(affine(i).coef(depth) for i in op.target.index):
        return None
    target = program.buffer_of[op.target.array]
    if any(program.buffer_of[a.array] is target for a in op.reads):
        return None  # the value reads the accumulator's storage
    count = next(k for k in range(min(_MAX_ACCUMULATORS, scope.size), 0, -1) if scope.size % k == 0)
    dtype = target.dtype
    v = vector_type(dtype, inner.size)
    var = f"i{depth}"
    names = [f"acc{depth}_{k}" for k in range(count)]
    identity = f"dojo_splat_{dtype}x{inner.size}({_IDENTITY[op.assign][dtype]})"
    lines = ["{", f"    {v} {', '.join(f'{n} = {identity}' for n in names)};",
             f"    for (long {var} = 0; {var} < {scope.size}; {var} += {count}) {{"]
    for k, name in enumerate(names):
        printer = VectorPrinter(program, {**env, depth: var if k == 0 else f"({var} + {k})", lane: 0}, lane, inner.size)
        value = printer.value(op.value, dtype)
        lines.append(f"        {name} = {_vector_combine(op.assign, name, value, dtype, inner.size)};")
    lines.append("    }")
    while len(names) > 1:  # pairwise, as a tree
        pairs = [(names[k], names[k + 1]) for k in range(0, len(names) - 1, 2)]
        for a, b in pairs:
            lines.append(f"    {a} = {_vector_combine(op.assign, a, b, dtype, inner.size)};")
        names = [a for a, _ in pairs] + ([names[-1]] if len(names) % 2 else [])
    element = VectorPrinter(program, {**env, lane: 0}, lane, inner.size).element(op.target)
    total = f"dojo_{HORIZONTAL_OF[op.assign]}_{dtype}x{inner.size}({names[0]})"
    if op.assign in REDUCTION_OPERATORS:
        lines.append(f"    {element} {REDUCTION_OPERATORS[op.assign]}= {total};")
    else:
        lines.append(f"    {element} = {combine(op.assign, element, total, dtype)};")
    return [*lines, "}"]


def _vector_combine(assign: str, old: str, new: str, dtype: str, lanes: int) -> str:
    if assign in REDUCTION_OPERATORS:
        return f"{old} {REDUCTION_OPERATORS[assign]} ({new})"
    return f"dojo_{REDUCTION_FUNCTIONS[assign]}_{dtype}x{lanes}({old}, {new})"


def streamable(scope: Scope, lane: int, program: Program, env: Env) -> bool:
    """Whether the `:v` scope's store can be a streaming store: a plain `=`
    of a contiguous vector of 16 to 64 bytes that is provably aligned to its
    size (the x86 streaming stores need 16-byte alignment at least)."""
    if scope.size not in _LANES or not vectorizable(scope, lane, program):
        return False
    op = scope.body[0]
    assert isinstance(op, Op)
    if op.reduction is not None or lane_use(op.target, lane) != "contiguous":
        return False
    buffer = program.buffer_of[op.target.array]
    size = scope.size * DTYPE_BYTES[buffer.dtype]
    return 16 <= size <= 64 and _aligned(offset(op.target, buffer), {**env, lane: 0}, scope.size,
                                          DTYPE_BYTES[buffer.dtype])
