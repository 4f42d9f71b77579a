"""Text to tree: the `.dojo` parser.

A file is read line by line. Each line loses its `#` comment, is classified
(kernel line, declaration, body line) and is parsed with the lark grammar in
`grammar.lark`; a line that does not parse is reported and skipped, so every
bad line is reported at once. The body lines are then assembled into the scope
tree by resolving each `|` to the scope it continues.

The parser checks syntax and structure only; whether names, sizes, dtypes and
indices make sense is the checker's business (`checker.py`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from .errors import Diagnostic, DojoError
from .tree import Access, Binary, Buffer, Call, Dim, Name, Node, Num, Op, Program, Ref, Scope, Span, Unary

CONTROL_FLOW = frozenset(("if", "else", "while", "for", "do", "break", "continue", "return", "goto", "switch"))

_REF = re.compile(r"\{([0-9]+)\}")
_context = threading.local()  # the line number of the line being parsed


def _span(token: Token) -> Span:
    return Span(_context.line, token.column, _context.line, token.end_column)


def _cover(first: Span | None, last: Span | None) -> Span | None:
    return first.join(last) if first else last


def _names(tokens) -> tuple[tuple[str, Span], ...]:
    return tuple((t.value, _span(t)) for t in tokens or () if t.type == "NAME")


@dataclass(frozen=True)
class KernelLine:
    name: str
    inputs: tuple[tuple[str, Span], ...]
    outputs: tuple[tuple[str, Span], ...]
    span: Span


@dataclass(frozen=True)
class ScopeToken:
    kind: str  # "size", "bar", "symbolic" or "range"
    span: Span
    size: int = 0
    suffix: str = ""
    text: str = ""


@dataclass(frozen=True)
class BodyLine:
    tokens: tuple[ScopeToken, ...]
    op: Op


class _Build(Transformer):
    """Builds tree nodes straight from the LALR parser's reductions."""

    @v_args(inline=True)
    def kernel(self, kw, name, _lpar, inputs, rpar, arrow, outputs):
        last = outputs[-1] if outputs else (arrow or rpar)
        return KernelLine(name.value, _names(inputs), _names(outputs), _span(kw).join(_span(last)))

    def names(self, tokens):
        return tokens

    def decl(self, c):
        name, dtype = c[0], c[1]
        rsqb = next(i for i, x in enumerate(c) if isinstance(x, Token) and x.type == "RSQB")
        dims = tuple(x for x in c[3:rsqb] if isinstance(x, Dim))
        location, arrays = c[rsqb + 1], c[rsqb + 3]
        span = _span(name).join(_span(arrays[-1] if arrays else location))
        arrays = tuple(a for a, _ in _names(arrays))
        return Buffer(name.value, dtype.value, dims, location.value, arrays, span=span,
                      dtype_span=_span(dtype), location_span=_span(location))

    @v_args(inline=True)
    def dim(self, size, _colon, stored):
        span = _span(size).join(_span(stored) if stored else None)
        return Dim(int(size.value), int(stored.value) if stored else None, span)

    def body(self, c):
        return BodyLine(tuple(c[:-1]), c[-1])

    @v_args(inline=True)
    def size(self, size, _colon, suffix):
        return ScopeToken("size", _span(size).join(_span(suffix) if suffix else None), int(size.value), suffix.value if suffix else "")

    @v_args(inline=True)
    def bar(self, token):
        return ScopeToken("bar", _span(token))

    @v_args(inline=True)
    def symbolic_size(self, token):
        return ScopeToken("symbolic", _span(token), text=token.value)

    @v_args(inline=True)
    def data_range(self, access):
        return ScopeToken("range", access.span, text=access.array)

    @v_args(inline=True)
    def op(self, target, assign, value):
        return Op(target, assign.value, value, span=_cover(target.span, value.span))

    def access(self, c):
        index = tuple(x for x in c[2:-1] if x is not None and not isinstance(x, Token))
        return Access(c[0].value, index, _span(c[0]).join(_span(c[-1])))

    @v_args(inline=True)
    def ref_access(self, token):
        line, start = _context.line, token.column
        name = token.value[: token.value.index("[")]
        index = tuple(
            Ref(int(m.group(1)), Span(line, start + m.start(), line, start + m.end()))
            for m in _REF.finditer(token.value)
        )
        return Access(name, index, _span(token))

    @v_args(inline=True)
    def binary(self, left, op, right):
        return Binary(op.value, left, right, _cover(left.span, right.span))

    @v_args(inline=True)
    def neg(self, minus, operand):
        return Unary("-", operand, _span(minus).join(operand.span))

    @v_args(inline=True)
    def number(self, token):
        return Num(token.value, _span(token))

    @v_args(inline=True)
    def ref(self, token):
        return Ref(int(token.value[1:-1]), _span(token))

    @v_args(inline=True)
    def bare_name(self, token):
        return Name(token.value, _span(token))

    def call(self, c):
        args = tuple(x for x in c[2:-1] if x is not None and not isinstance(x, Token))
        return Call(c[0].value, args, _span(c[0]).join(_span(c[-1])))

    @v_args(inline=True)
    def paren(self, lpar, expr, rpar):
        return replace(expr, span=_span(lpar).join(_span(rpar)))


_GRAMMAR = (Path(__file__).parent / "grammar.lark").read_text()
_LARK = Lark(_GRAMMAR, parser="lalr", start=["kernel", "decl", "body"], transformer=_Build(), maybe_placeholders=True)

_EXPECTED = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "INF": "`inf`",
    "REF": "a scope reference such as `{0}`",
    "ASSIGN": "an assignment (`=`, `+=`, `*=`, `max=` or `min=`)",
    "KERNEL": "`kernel`",
    "ARROW": "`->`",
    "BAR": "`|`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "COMMA": "`,`",
    "COLON": "`:`",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "STAR": "`*`",
    "SLASH": "`/`",
    "$END": "the end of the line",
}


def _expected(terminals) -> str:
    names = sorted({_EXPECTED.get(t, t) for t in terminals})
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


_DECL_LINE = re.compile(r"\s*[A-Za-z_]\w*\s+[A-Za-z_]\w*\s*\[")
_FIRST_WORD = re.compile(r"\s*([A-Za-z_]\w*)")


def _classify(code: str) -> str:
    first = _FIRST_WORD.match(code)
    if first and first.group(1) == "kernel":
        return "kernel"
    if "=" not in code and _DECL_LINE.match(code):
        return "decl"
    return "body"


def _syntax_error(error: UnexpectedInput, code: str, line: int) -> Diagnostic:
    if isinstance(error, UnexpectedCharacters):
        char = code[error.pos_in_stream]
        hint = "; comparisons and control flow are not part of the format (Table 2)" if char in "<>!?&" else ""
        message = f"unexpected character `{char}`; expected {_expected(error.allowed)}{hint}"
        return Diagnostic(Span(line, error.column, line, error.column + 1), message, "syntax")
    assert isinstance(error, UnexpectedToken)
    token = error.token
    if token.type == "$END":
        end = len(code.rstrip()) + 1
        message = f"unexpected end of line; expected {_expected(error.expected)}"
        return Diagnostic(Span(line, end, line, end + 1), message, "syntax")
    message = f"unexpected `{token.value}`; expected {_expected(error.expected)}"
    return Diagnostic(Span(line, token.column, line, token.end_column), message, "syntax")


@lru_cache(maxsize=8192)
def parse_line(code: str, line: int):
    """Parse the code of one line (comment already removed) as the kind of
    line it looks like. Returns a KernelLine, a Buffer or a BodyLine, or raises DojoError. Cached: an editor re-parses a document
    whose lines are mostly unchanged."""
    kind = _classify(code)
    first = _FIRST_WORD.match(code)
    if first and first.group(1) in CONTROL_FLOW and kind == "body":
        word = first.group(1)
        span = Span(line, first.start(1) + 1, line, first.end(1) + 1)
        message = (
            f"general control flow (`{word}`) is not supported (Table 2): "
            "a body line is scope sizes followed by one operation"
        )
        raise DojoError.at(span, message, "control-flow")
    _context.line = line
    try:
        return _LARK.parse(code, start=kind)
    except UnexpectedInput as error:
        raise DojoError([_syntax_error(error, code, line)]) from None


@dataclass
class _OpenScope:
    """A scope while its lines are being collected."""

    size: int
    kind: str
    span: Span
    parent: _OpenScope | None
    line: int
    body: list = field(default_factory=list)

    def freeze(self) -> Scope:
        return Scope(self.size, self.kind, _freeze(self.body), self.span)


def _freeze(body: list) -> tuple[Node, ...]:
    return tuple(n.freeze() if isinstance(n, _OpenScope) else n for n in body)


@dataclass(frozen=True)
class _Opened:
    """What the nearest line with a non-`|` token at a position put there."""

    line: int
    scope: _OpenScope | None  # None: that line has its operation there
    broken: bool = False  # that line did not parse; whatever continues it is skipped silently


class _Assembler:
    """Turns body lines into the scope tree, resolving each `|`."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.root = _OpenScope(0, "", Span(1, 1, 1, 1), None, 0)
        self.opened: list[_Opened | None] = []
        self.diagnostics = diagnostics

    def _record(self, position: int, opened: _Opened) -> None:
        while len(self.opened) <= position:
            self.opened.append(None)
        self.opened[position] = opened

    def broken(self, line: int, code: str) -> None:
        """A body line that did not parse: remember that it had tokens at its
        leading positions, so that lines continuing it are not reported too."""
        words = code.split()
        for position, word in enumerate(words):
            if "[" in word or "=" in word:
                break
            if word != "|":
                self._record(position, _Opened(line, None, broken=True))

    def add(self, body: BodyLine, comments: tuple[str, ...]) -> None:
        parent = self.root
        line = body.op.span.line
        for position, token in enumerate(body.tokens):
            if token.kind == "bar":
                parent = self._continue(position, token, parent, line)
                if parent is None:
                    return
            elif token.kind == "size":
                scope = _OpenScope(token.size, token.suffix, token.span, parent, line)
                parent.body.append(scope)
                self._record(position, _Opened(line, scope))
                parent = scope
            else:
                self._reject(position, token, body, line)
                return
        self._record(len(body.tokens), _Opened(line, None))
        parent.body.append(replace(body.op, comments=comments) if comments else body.op)

    def _continue(self, position: int, token: ScopeToken, parent: _OpenScope, line: int) -> _OpenScope | None:
        opened = self.opened[position] if position < len(self.opened) else None
        if opened is not None and opened.broken:
            self.broken_from(position, line)
            return None
        if opened is None:
            self._error(token.span, f"`|` at scope position {position} continues nothing: no line above has a scope "
                        "at this position; write the scope's size here", "orphan-bar")
        elif opened.scope is None:
            self._error(token.span, f"`|` at scope position {position} continues line {opened.line}, which has its "
                        "operation there, not a scope; write a scope size here", "orphan-bar")
        elif opened.scope.parent is not parent:
            self._error(token.span, f"`|` at scope position {position} continues the scope opened on line "
                        f"{opened.scope.line}, which is not inside the scope this line has at position "
                        f"{position - 1}", "orphan-bar")
        else:
            return opened.scope
        self.broken_from(position, line)
        return None

    def broken_from(self, position: int, line: int) -> None:
        for p in range(position, len(self.opened)):
            self._record(p, _Opened(line, None, broken=True))

    def _reject(self, position: int, token: ScopeToken, body: BodyLine, line: int) -> None:
        if token.kind == "symbolic":
            message = f"scope sizes are integer literals, not names: `{token.text}` is not a size (kernels are tuned per shape)"
            rule = "symbolic-size"
        else:
            message = (f"data-dependent range `{token.text}[...]` is not supported (Table 2): "
                       "a scope size is an integer literal")
            rule = "data-dependent-range"
        self._error(token.span, message, rule)
        self.broken_from(position, line)

    def _error(self, span: Span, message: str, rule: str) -> None:
        self.diagnostics.append(Diagnostic(span, message, rule))

    def body(self) -> tuple[Node, ...]:
        return _freeze(self.root.body)


def _split_comment(raw: str) -> tuple[str, str | None]:
    code, hash_, comment = raw.partition("#")
    return code, comment.rstrip() if hash_ else None


def parse_with_diagnostics(text: str) -> tuple[Program | None, list[Diagnostic]]:
    """Parse `text`, collecting every syntax and structure error instead of
    stopping at the first. The program is None only when there is no usable
    kernel line; otherwise it holds everything that did parse."""
    diagnostics: list[Diagnostic] = []
    kernel: KernelLine | None = None
    header: tuple[str, ...] = ()
    buffers: list[Buffer] = []
    assembler = _Assembler(diagnostics)
    pending: list[str] = []
    section = "start"  # start -> decls -> body
    last_line = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        code, comment = _split_comment(raw)
        if not code.strip():
            if comment is not None:
                pending.append(comment)
            continue
        last_line = number
        trailing = () if comment is None else (comment,)
        try:
            parsed = parse_line(code, number)
        except DojoError as error:
            diagnostics.extend(error.diagnostics)
            if _classify(code) == "body":
                assembler.broken(number, code)
            continue
        comments = tuple(pending) + trailing
        pending = []
        if isinstance(parsed, KernelLine):
            if kernel is not None:
                diagnostics.append(Diagnostic(parsed.span, f"a second kernel line; the kernel is already named on "
                                              f"line {kernel.span.line} and a file holds one kernel", "structure"))
                continue
            if section != "start":
                diagnostics.append(Diagnostic(parsed.span, "the kernel line must come first, before the "
                                              "declarations and the body", "structure"))
            kernel, header, section = parsed, comments, "decls"
        elif isinstance(parsed, Buffer):
            buffer = parsed
            if section == "body":
                diagnostics.append(Diagnostic(buffer.span, f"declaration of `{buffer.name}` after the body has begun; "
                                              "declarations come before the first body line", "structure"))
            buffers.append(replace(buffer, comments=comments) if comments else buffer)
            section = "body" if section == "body" else "decls"
        else:
            section = "body"
            assembler.add(parsed, comments)
    if kernel is None:
        span = Span(max(last_line, 1), 1, max(last_line, 1), 1)
        diagnostics.insert(0, Diagnostic(Span(1, 1, 1, 1) if not last_line else span,
                                         "expected a kernel line `kernel NAME(INPUTS) -> OUTPUTS` first", "structure"))
        return None, diagnostics
    program = Program(
        kernel.name,
        tuple(n for n, _ in kernel.inputs),
        tuple(n for n, _ in kernel.outputs),
        tuple(buffers),
        assembler.body(),
        comments=header,
        trailing=tuple(pending),
        span=kernel.span,
        io_spans=tuple(s for _, s in kernel.inputs + kernel.outputs),
    )
    return program, diagnostics


def parse(text: str) -> Program:
    """Parse `text` into a Program, or raise DojoError with every syntax and
    structure error found."""
    program, diagnostics = parse_with_diagnostics(text)
    if diagnostics:
        raise DojoError(diagnostics)
    assert program is not None
    return program
