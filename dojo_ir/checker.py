"""The checker: every rule of FORMAT.md that the grammar cannot express.

`check(program)` returns every error it finds, each with a span and a message
that says what was expected, so that an editor can show them all at once.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from math import prod

from .affine import NotAffine, affine
from .dependence import carried_flows
from .errors import NOWHERE, Diagnostic
from .printer import access_text, expr_text
from .tree import (
    DTYPE_BYTES,
    DTYPES,
    FLOAT_DTYPES,
    FLOAT_ONLY_FUNCTIONS,
    FUNCTIONS,
    KEYWORDS,
    LOCATIONS,
    MAX_INTEGER,
    SCOPE_KINDS,
    Access,
    Call,
    Expr,
    Name,
    Num,
    Op,
    Program,
    Ref,
    Scope,
    Span,
    walk_expr,
    walk_ops,
    walk_scopes,
)

_SCOPE_KINDS = "u (unroll), p (parallel), v (vectorize), g (GPU grid), b (GPU block) or w (GPU warp)"
MAX_NAME = 255  # characters in a name: names become C identifiers and keys of .npz archives
_INTEGER_MAX = {"i32": (1 << 31) - 1, "i64": MAX_INTEGER}


def _one_of(choices) -> str:
    choices = list(choices)
    return ", ".join(choices[:-1]) + " or " + choices[-1]


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""


class _Checker:
    def __init__(self, program: Program):
        self.program = program
        self.found: list[Diagnostic] = []
        self.arrays = program.buffer_of

    def error(self, span: Span | None, message: str, rule: str) -> None:
        self.found.append(Diagnostic(span or self.program.span or NOWHERE, message, rule))

    # -- kernel line and declarations -----------------------------------------

    def kernel(self) -> None:
        p = self.program
        spans = p.io_spans or ()
        named = list(zip(p.inputs + p.outputs, spans or [p.span] * len(p.inputs + p.outputs), strict=False))
        if p.name in KEYWORDS:
            self.error(p.span, f"`{p.name}` is a keyword and cannot name the kernel", "keyword-name")
        self.name_length(p.name, p.span)
        if not p.outputs:
            self.error(p.span, "a kernel has at least one output: write `-> NAME` after the inputs", "no-output")
        seen: set[str] = set()
        for position, (name, span) in enumerate(named):
            role = "input" if position < len(p.inputs) else "output"
            if name in seen:
                both = name in p.inputs and name in p.outputs
                message = (f"`{name}` is both an input and an output; inputs are read-only, so write the result "
                           "to another array" if both else f"`{name}` is named twice on the kernel line")
                self.error(span, message, "kernel-line")
            seen.add(name)
            if name not in self.arrays:
                self.error(span, f"{role} `{name}` is not declared; declare it as `{name} f32 [DIMS] heap`"
                           + _suggest(name, self.arrays), "unknown-array")

    def buffers(self) -> None:
        p = self.program
        io = set(p.inputs) | set(p.outputs)
        owners: dict[str, str] = {}
        names: set[str] = set()
        for b in p.buffers:
            if b.name in names:
                self.error(b.span, f"buffer `{b.name}` is declared twice", "duplicate")
            names.add(b.name)
            for name in dict.fromkeys((b.name, *b.array_names)):
                self.name_length(name, b.span)
                if name in KEYWORDS:
                    self.error(b.span, f"`{name}` is a keyword and cannot name a buffer or an array", "keyword-name")
            for array in b.array_names:
                if array in owners and owners[array] != b.name:
                    self.error(b.span, f"array `{array}` already lives in buffer `{owners[array]}`", "duplicate")
                owners.setdefault(array, b.name)
            if len(set(b.array_names)) < len(b.array_names):
                self.error(b.span, f"buffer `{b.name}` lists an array twice", "duplicate")
            if b.dtype not in DTYPES:
                self.error(b.dtype_span, f"unknown dtype `{b.dtype}`; expected {_one_of(DTYPES)}", "unknown-dtype")
            if b.location not in LOCATIONS:
                self.error(b.location_span, f"unknown location `{b.location}`; expected {_one_of(LOCATIONS)}",
                           "unknown-location")
            for d in b.dims:
                if max(d.size, d.stored or 0) > MAX_INTEGER:
                    self.error(d.span, f"dimension `{d}` of `{b.name}` is beyond 2**63 - 1", "too-large")
                elif d.size < 1:
                    self.error(d.span, f"dimension `{d}` of `{b.name}` must be at least 1", "dimension")
                elif d.stored is not None and not 1 <= d.stored < d.size:
                    self.error(d.span, f"`{d}`: the stored extent K of `D:K` must satisfy 1 <= K < {d.size}",
                               "dimension")
            if b.dtype in DTYPES and all(1 <= d.size <= MAX_INTEGER for d in b.dims):
                size = prod(b.shape) * DTYPE_BYTES[b.dtype]
                if size > MAX_INTEGER:
                    self.error(b.span, f"buffer `{b.name}` would take {size} bytes, more than 2**63 - 1", "too-large")
            held = [a for a in b.array_names if a in io]
            folded = [d for d in b.dims if d.stored is not None]
            if held and folded:
                self.error(folded[0].span or b.span, f"`{held[0]}` is a kernel input or output and is always stored "
                           f"whole: `{folded[0]}` (`D:K`) is not allowed on its buffer", "folded-io")
            inputs = [a for a in b.array_names if a in p.inputs]
            if inputs and len(b.array_names) > 1:
                self.error(b.span, f"buffer `{b.name}` holds the input `{inputs[0]}`, so it holds only that input",
                           "shared-input")

    def name_length(self, name: str, span: Span | None) -> None:
        if len(name) > MAX_NAME:
            self.error(span, f"the name `{name[:16]}...` has {len(name)} characters; a name has at most {MAX_NAME}",
                       "name-length")

    # -- the body ---------------------------------------------------------------

    def scopes(self) -> None:
        for scope, _ in walk_scopes(self.program.body):
            if scope.size > MAX_INTEGER:
                self.error(scope.span, f"scope size {scope.size} is beyond 2**63 - 1", "too-large")
            if scope.size < 1:
                self.error(scope.span, f"scope size {scope.size}: a scope runs at least one iteration", "scope-size")
            if scope.kind and scope.kind not in SCOPE_KINDS:
                self.error(scope.span, f"unknown scope suffix `:{scope.kind}`; expected {_SCOPE_KINDS}",
                           "scope-suffix")

    def ops(self) -> None:
        for op, chain in walk_ops(self.program.body):
            self.op(op, chain)

    def op(self, op: Op, chain: tuple[Scope, ...]) -> None:
        target = op.target
        buffer = self.arrays.get(target.array)
        if buffer is not None and target.array in self.program.inputs:
            self.error(target.span, f"`{target.array}` is an input of the kernel and is read-only; "
                       "write to an output or a temporary", "write-to-input")
        dtype = buffer.dtype if buffer is not None else None
        self.access(target, chain)
        self.expr(op.value, chain, dtype)
        if dtype in DTYPES and dtype not in FLOAT_DTYPES:
            self.integer_op(op, dtype)

    def access(self, access: Access, chain: tuple[Scope, ...]) -> None:
        buffer = self.arrays.get(access.array)
        if buffer is None:
            self.error(access.span, f"unknown array `{access.array}`; declare it before the body"
                       + _suggest(access.array, self.arrays), "unknown-array")
        elif len(access.index) != len(buffer.dims):
            want = len(buffer.dims)
            self.error(access.span, f"`{access.array}` has {want} dimension{'s' * (want != 1)}, so it takes "
                       f"{want} ind{'ices' if want != 1 else 'ex'}, not {len(access.index)}", "index-count")
        if buffer is not None and buffer.location == "shared" and not any(s.kind == "b" for s in chain):
            self.error(access.span, f"`{access.array}` is in `shared` memory, so every access to it lies inside a "
                       "`:b` (GPU block) scope", "shared-outside-block")
        for position, index in enumerate(access.index):
            self.index(access, position, index, chain, buffer)

    def index(self, access: Access, position: int, index: Expr, chain, buffer) -> None:
        for node in walk_expr(index):
            if isinstance(node, Access):
                self.error(node.span, f"indirection `{access_text(node)}` inside an index is not supported "
                           "(Table 2): indices are affine in scope references", "indirection")
                self.access(node, chain)
                return
        if not self.refs(index, chain):
            return
        try:
            form = affine(index)
        except NotAffine as error:
            self.error(error.node.span or index.span, f"index `{expr_text(index, compact=True)}` is not affine: "
                       f"{self._reason(error)}; expected integer literals, `{{d}}`, `+`, `-` and `*` by a literal",
                       "non-affine")
            return
        if buffer is None or len(access.index) != len(buffer.dims) or any(s.size < 1 for s in chain):
            return
        extent = buffer.dims[position].size
        low, high = form.bounds([s.size for s in chain])
        if low < 0 or high >= extent:
            reach = low if low < 0 else high
            self.error(index.span, f"index `{expr_text(index, compact=True)}` of `{access.array}` can reach {reach}, "
                       f"outside dimension {position} of extent {extent} (0 to {extent - 1})", "out-of-bounds")

    @staticmethod
    def _reason(error: NotAffine) -> str:
        if isinstance(error.node, Call):
            return f"the function `{error.node.func}` is not allowed in an index"
        if isinstance(error.node, Name):
            return f"`{error.node.name}` is a name, not an integer"
        return error.reason

    def refs(self, expr: Expr, chain: tuple[Scope, ...]) -> bool:
        ok = True
        for node in walk_expr(expr):
            if isinstance(node, Ref) and node.depth >= len(chain):
                have = ("no scopes" if not chain else "scope position 0 only" if len(chain) == 1
                        else f"scope positions 0-{len(chain) - 1} only")
                self.error(node.span, f"{{{node.depth}}} refers to scope position {node.depth}, but this line has "
                           f"{have}", "scope-ref")
                ok = False
        return ok

    def expr(self, expr: Expr, chain: tuple[Scope, ...], dtype: str | None) -> None:
        if isinstance(expr, Access):
            self.access(expr, chain)
            return
        if isinstance(expr, Ref):
            self.refs(expr, chain)
        elif isinstance(expr, Name):
            hint = f"write `{expr.name}[...]`" if expr.name in self.arrays else "write an access such as `s[]`"
            self.error(expr.span, f"`{expr.name}` is not a value: {hint}", "bare-name")
        elif isinstance(expr, Call):
            arity = FUNCTIONS.get(expr.func)
            if arity is None:
                self.error(expr.span, f"unknown function `{expr.func}`; expected {_one_of(FUNCTIONS)}"
                           + _suggest(expr.func, FUNCTIONS), "unknown-function")
            elif len(expr.args) != arity:
                self.error(expr.span, f"`{expr.func}` takes {arity} argument{'s' * (arity > 1)}, not "
                           f"{len(expr.args)}", "arity")
        for child in _children(expr):
            self.expr(child, chain, dtype)

    def integer_op(self, op: Op, dtype: str) -> None:
        for node in walk_expr(op.value):
            if isinstance(node, Num) and not node.is_integer:
                self.error(node.span, f"`{node.text}` is not an integer, and this operation computes in `{dtype}` "
                           f"(the dtype of `{op.target.array}`)", "integer-op")
            elif isinstance(node, Num) and _beyond(node.text, _INTEGER_MAX[dtype]):
                shown = node.text if len(node.text) <= 24 else f"{node.text[:12]}... ({len(node.text)} digits)"
                self.error(node.span, f"`{shown}` does not fit in `{dtype}` (at most {_INTEGER_MAX[dtype]}), the dtype "
                           f"of `{op.target.array}`", "integer-op")
            elif isinstance(node, Call) and node.func in FLOAT_ONLY_FUNCTIONS:
                self.error(node.span, f"`{node.func}` needs a floating-point operation, and this one computes in "
                           f"`{dtype}` (the dtype of `{op.target.array}`)", "integer-op")

    def dependent_iteration(self) -> None:
        reported: set[tuple[int, Span | None]] = set()
        for flow in carried_flows(self.program):
            if flow.reduction_carried or (id(flow.scope), flow.read.span) in reported:
                continue
            reported.add((id(flow.scope), flow.read.span))
            writer = _line(flow.write_op.span)
            self.error(flow.read.span, f"dependent iteration (Table 2): `{access_text(flow.read)}` reads an element "
                       f"that an earlier iteration of the scope on line {_line(flow.scope.span)}"
                       f" wrote (`{access_text(flow.write)}` on line {writer}), and this iteration does not write it "
                       "first; only a reduction's accumulator (`+=`, `*=`, `max=`, `min=`) may carry values from one "
                       "iteration to the next",
                       "dependent-iteration")


def _beyond(digits: str, limit: int) -> bool:
    digits = digits.lstrip("0")
    return len(digits) > len(str(limit)) or int(digits or "0") > limit


def _line(span: Span | None) -> int | str:
    return span.line if span else "?"


def _children(expr: Expr) -> Iterator[Expr]:
    if isinstance(expr, Call):
        yield from expr.args
    elif hasattr(expr, "operand"):
        yield expr.operand
    elif hasattr(expr, "left"):
        yield expr.left
        yield expr.right


def check(program: Program) -> list[Diagnostic]:
    """Every error of FORMAT.md in `program`, in source order."""
    checker = _Checker(program)
    checker.kernel()
    checker.buffers()
    checker.scopes()
    checker.ops()
    if not checker.found:
        # Dependences are only meaningful on an otherwise valid program.
        checker.dependent_iteration()
    return sorted(checker.found, key=lambda d: (d.span.line, d.span.col))
