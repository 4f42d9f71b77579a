"""Text to tree: the `.dojo` parser.

A file is read line by line. Each line loses its `#` comment, is classified
(kernel line, declaration, body line) and is parsed: the common lines by the
lark-free reader in `fastparse.py`, every other line with the lark grammar in
`grammar.lark`. A line that does not parse is reported and skipped, so every
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
from .fastparse import fast_line
from .lines import (
    INDEX_REF,
    MAX_EXPRESSION_DEPTH,
    MAX_SCOPE_DEPTH,
    BodyLine,
    KernelLine,
    MoveLine,
    ScopeToken,
    SpecLine,
)
from .tree import (
    MAX_INTEGER,
    Access,
    Binary,
    Buffer,
    Call,
    Derivation,
    Dim,
    Expr,
    Name,
    Node,
    Num,
    Op,
    Program,
    Ref,
    Scope,
    Span,
    Unary,
    children,
)

CONTROL_FLOW = frozenset(("if", "else", "while", "for", "do", "break", "continue", "return", "goto", "switch"))

_context = threading.local()  # the line number of the line being parsed


def _span(token: Token) -> Span:
    return Span(_context.line, token.column, _context.line, token.end_column)


def _cover(first: Span | None, last: Span | None) -> Span | None:
    return first.join(last) if first else last


def _integer(digits: str, span: Span, what: str) -> int:
    """The value of an integer literal; one beyond 64 bits is an error here,
    before Python's digit limit for int() can make it a ValueError."""
    if len(digits) < 19:  # the common case, and always below 2**63
        return int(digits)
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(MAX_INTEGER)) or int(digits) > MAX_INTEGER:
        shown = digits if len(digits) <= 24 else f"{digits[:12]}...{digits[-6:]} ({len(digits)} digits)"
        raise DojoError.at(span, f"{what} {shown} is too large; at most 2**63 - 1 ({MAX_INTEGER})", "too-large")
    return int(digits)


def _names(tokens) -> tuple[tuple[str, Span], ...]:
    return tuple((t.value, _span(t)) for t in tokens or () if t.type == "NAME")


class _Build(Transformer):
    """Builds tree nodes straight from the LALR parser's reductions."""

    @v_args(inline=True)
    def kernel(self, kw, name, _lpar, inputs, rpar, arrow, outputs):
        last = outputs[-1] if outputs else (arrow or rpar)
        return KernelLine(name.value, _names(inputs), _names(outputs), _span(kw).join(_span(last)))

    def names(self, tokens):
        return tokens

    @v_args(inline=True)
    def spec(self, kw, path):
        return SpecLine(path.value[1:-1], _span(kw).join(_span(path)))

    def move(self, c):
        args = ", ".join(x for x in c[3:-1] if isinstance(x, str) and not isinstance(x, Token))
        return MoveLine(f"{c[1].value}({args})", _span(c[0]).join(_span(c[-1])))

    @v_args(inline=True)
    def move_arg(self, key, assign, value):
        if assign.value != "=":
            raise DojoError.at(_span(assign), f"unexpected `{assign.value}`; expected `=`", "syntax")
        return f"{key.value}={value.value}"

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
        return Dim(_integer(size.value, _span(size), "dimension"),
                   _integer(stored.value, _span(stored), "stored extent") if stored else None, span)

    def body(self, c):
        return BodyLine(tuple(c[:-1]), c[-1])

    @v_args(inline=True)
    def size(self, size, _colon, suffix):
        span = _span(size).join(_span(suffix) if suffix else None)
        return ScopeToken("size", span, _integer(size.value, _span(size), "scope size"), suffix.value if suffix else "")

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
        line, start, text = _context.line, token.column, token.value
        index = []
        for m in INDEX_REF.finditer(text):
            span = Span(line, start + m.start(), line, start + m.end())
            index.append(Ref(_integer(m.group(1), span, "scope reference"), span))
        return Access(text[: text.index("[")], tuple(index), Span(line, start, line, token.end_column))

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
        return Ref(_integer(token.value[1:-1], _span(token), "scope reference"), _span(token))

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
_LARK = Lark(_GRAMMAR, parser="lalr", start=["kernel", "spec", "move", "decl", "body"], transformer=_Build(),
             maybe_placeholders=True)

_EXPECTED = {
    "NAME": "a name",
    "REF_ACCESS": "a name",  # an access, which starts with a name
    "STRING": 'a quoted path such as `"spec.dojo"`',
    "LABEL": "an operation label such as `e#2`",
    "SPEC": "`spec`",
    "MOVE": "`move`",
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


_SPEC_LINE = re.compile(r'\s*spec\s*"')
_MOVE_LINE = re.compile(r"\s*move\s+[a-z_][a-z0-9_]*\s*\(")


def classify(code: str) -> str:
    # `spec` and `move` are not reserved: a line is a derivation line only
    # when it has that shape, so arrays may still be called `spec` or `move`.
    first = _FIRST_WORD.match(code)
    if first and first.group(1) == "kernel":
        return "kernel"
    if _SPEC_LINE.match(code):
        return "spec"
    if _MOVE_LINE.match(code):
        return "move"
    if "=" not in code and _DECL_LINE.match(code):
        return "decl"
    return "body"


def _shown(text: str) -> str:
    """`text` with every character that is not printable (a line or page
    break, a control character) as its code point, so that a message stays
    on one line."""
    return "".join(c if c.isprintable() else f"U+{ord(c):04X}" for c in text)


def _syntax_error(error: UnexpectedInput, code: str, line: int) -> Diagnostic:
    if isinstance(error, UnexpectedCharacters):
        char = code[error.pos_in_stream]
        hint = "; comparisons and control flow are not part of the format (Table 2)" if char in "<>!?&" else ""
        message = f"unexpected character `{_shown(char)}`; expected {_expected(error.allowed)}{hint}"
        return Diagnostic(Span(line, error.column, line, error.column + 1), message, "syntax")
    assert isinstance(error, UnexpectedToken)
    token = error.token
    if token.type == "$END":
        end = len(code.rstrip()) + 1
        message = f"unexpected end of line; expected {_expected(error.expected)}"
        return Diagnostic(Span(line, end, line, end + 1), message, "syntax")
    message = f"unexpected `{_shown(token.value)}`; expected {_expected(error.expected)}"
    return Diagnostic(Span(line, token.column, line, token.end_column), message, "syntax")


_NESTING = re.compile(r"[-+*/(\[]")


def _too_deep(op: Op) -> Expr | None:
    """The first sub-expression of `op` nested deeper than MAX_EXPRESSION_DEPTH, if any."""
    stack: list[tuple[Expr, int]] = [(op.value, 1), (op.target, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            return node
        stack.extend((child, depth + 1) for child in reversed(children(node)))
    return None


def _check_nesting(body: BodyLine, code: str) -> None:
    if len(body.tokens) > MAX_SCOPE_DEPTH:
        raise DojoError.at(body.tokens[MAX_SCOPE_DEPTH].span, f"more than {MAX_SCOPE_DEPTH} scopes around one "
                           "operation; this implementation nests at most that many", "too-deep")
    # every level of nesting takes an operator, a parenthesis or a bracket,
    # so a line with few of them needs no walk
    if len(_NESTING.findall(code)) < MAX_EXPRESSION_DEPTH - 1:
        return
    node = _too_deep(body.op)
    if node is not None:
        raise DojoError.at(node.span or body.op.span, f"expression nested more than {MAX_EXPRESSION_DEPTH} deep "
                           "(operators, calls and accesses); this implementation nests at most that "
                           "many: split it with a temporary", "too-deep")


@lru_cache(maxsize=8192)
def parse_line(code: str, line: int):
    """Parse the code of one line (comment already removed) as the kind of
    line it looks like. Returns a KernelLine, SpecLine, MoveLine, Buffer or
    BodyLine, or raises DojoError. Cached: an editor re-parses a document
    whose lines are mostly unchanged."""
    kind = classify(code)
    parsed = fast_line(code, line, kind)
    if parsed is None:
        parsed = _lark_line(code, line, kind)
    if kind == "body":
        _check_nesting(parsed, code)
    return parsed


def _lark_line(code: str, line: int, kind: str):
    _context.line = line
    try:
        return _LARK.parse(code, start=kind)
    except UnexpectedInput as error:
        first = _FIRST_WORD.match(code)
        if first and first.group(1) in CONTROL_FLOW:
            # `if[{0}] = 1` is a fine access to an array named `if`; only a
            # line that does not parse is read as an attempt at control flow.
            word = first.group(1)
            span = Span(line, first.start(1) + 1, line, first.end(1) + 1)
            message = (f"general control flow (`{word}`) is not supported (Table 2): "
                       "a body line is scope sizes followed by one operation")
            raise DojoError.at(span, message, "control-flow") from None
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
            message = (f"scope sizes are integer literals, not names: `{token.text}` is not a size "
                       "(kernels are tuned per shape)")
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


_LABEL_SAFE_COMMENT = re.compile(r"(?<![A-Za-z0-9_])#")


def _split_comment(raw: str) -> tuple[str, str | None]:
    # In a move line `op=e#2` names the second operation writing `e`; there a
    # comment starts only at a `#` that does not follow a name.
    if _MOVE_LINE.match(raw):
        found = _LABEL_SAFE_COMMENT.search(raw)
        return (raw, None) if found is None else (raw[: found.start()], raw[found.end():].rstrip())
    code, hash_, comment = raw.partition("#")
    return code, comment.rstrip() if hash_ else None


_SECTIONS = ("start", "derivation", "decls", "body")  # the order in which a file's parts come


class _File:
    """Collects the parsed lines of one file in order, checking that the
    kernel line, the derivation, the declarations and the body come in that
    order."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self.kernel: KernelLine | None = None
        self.header: tuple[str, ...] = ()
        self.spec: SpecLine | None = None
        self.moves: list[MoveLine] = []
        self.derivation_comments: tuple[str, ...] = ()
        self.buffers: list[Buffer] = []
        self.assembler = _Assembler(self.diagnostics)
        self.section = "start"

    def error(self, span: Span, message: str) -> None:
        self.diagnostics.append(Diagnostic(span, message, "structure"))

    def enter(self, section: str, span: Span, what: str) -> None:
        if _SECTIONS.index(section) < _SECTIONS.index(self.section):
            self.error(span, f"{what} after the {self.section if self.section != 'decls' else 'declarations'} "
                       "has begun; a file is the kernel line, its derivation, the declarations, then the body")
        else:
            self.section = section

    def add(self, parsed, comments: tuple[str, ...]) -> None:
        if isinstance(parsed, KernelLine):
            if self.kernel is not None:
                self.error(parsed.span, f"a second kernel line; the kernel is already named on line "
                           f"{self.kernel.span.line} and a file holds one kernel")
                return
            if self.section != "start":
                self.error(parsed.span, "the kernel line must come first, before the declarations and the body")
            self.kernel, self.header, self.section = parsed, comments, "derivation"
        elif isinstance(parsed, SpecLine):
            self.enter("derivation", parsed.span, "a spec line")
            if self.spec is not None:
                self.error(parsed.span, f"a second spec line; the spec is already named on line {self.spec.span.line}")
            self.spec = parsed
            self.derivation_comments += comments
        elif isinstance(parsed, MoveLine):
            self.enter("derivation", parsed.span, "a move line")
            if self.spec is None:
                self.error(parsed.span, 'a move line needs a spec line before it: `spec "SPEC.dojo"`')
            self.moves.append(parsed)
            self.derivation_comments += comments
        elif isinstance(parsed, Buffer):
            self.enter("decls", parsed.span, f"the declaration of `{parsed.name}`")
            self.buffers.append(replace(parsed, comments=comments) if comments else parsed)
        else:
            self.section = "body"
            self.assembler.add(parsed, comments)

    def program(self, trailing: tuple[str, ...]) -> Program | None:
        kernel = self.kernel
        if kernel is None:
            return None
        derivation = None
        if self.spec is not None:
            derivation = Derivation(self.spec.path, tuple(m.text for m in self.moves), self.derivation_comments,
                                    self.spec.span, tuple(m.span for m in self.moves))
        return Program(
            kernel.name,
            tuple(n for n, _ in kernel.inputs),
            tuple(n for n, _ in kernel.outputs),
            tuple(self.buffers),
            self.assembler.body(),
            comments=self.header,
            trailing=trailing,
            span=kernel.span,
            io_spans=tuple(s for _, s in kernel.inputs + kernel.outputs),
            derivation=derivation,
        )


_LINE_END = re.compile(r"\r\n|\r|\n")


def source_lines(text: str) -> list[str]:
    """The lines of `text`, ended by `\\n`, `\\r\\n` or `\\r` only, as editors and
    LSP count them (`str.splitlines` also ends lines at form feeds and other
    separators, which would put every later position on the wrong line)."""
    lines = _LINE_END.split(text)
    return lines[:-1] if lines[-1] == "" else lines


def parse_with_diagnostics(text: str) -> tuple[Program | None, list[Diagnostic]]:
    """Parse `text`, collecting every syntax and structure error instead of
    stopping at the first. The program is None only when there is no usable
    kernel line; otherwise it holds everything that did parse."""
    file = _File()
    pending: list[str] = []
    first_line = 0
    for number, raw in enumerate(source_lines(text), start=1):
        code, comment = _split_comment(raw)
        if not code.strip():
            if comment is not None:
                pending.append(comment)
            continue
        first_line = first_line or number
        try:
            parsed = parse_line(code, number)
        except DojoError as error:
            file.diagnostics.extend(error.diagnostics)
            if classify(code) == "body":
                file.assembler.broken(number, code)
            continue
        file.add(parsed, tuple(pending) + (() if comment is None else (comment,)))
        pending = []
    program = file.program(tuple(pending))
    if program is None:
        line = first_line or 1
        width = len(source_lines(text)[line - 1]) if first_line else 0
        where = Span(line, 1, line, max(width, 1) + 1)
        file.diagnostics.insert(0, Diagnostic(where, "expected a kernel line `kernel NAME(INPUTS) -> OUTPUTS` first",
                                              "structure"))
    return program, file.diagnostics


def parse(text: str) -> Program:
    """Parse `text` into a Program, or raise DojoError with every syntax and
    structure error found."""
    program, diagnostics = parse_with_diagnostics(text)
    if diagnostics:
        raise DojoError(diagnostics)
    assert program is not None
    return program
