"""The common lines of a `.dojo` file, read without lark.

Most lines of a file are body lines of the plain shape (integer sizes and
`|`, an access, an assignment, an expression) or declarations of the plain
shape (`x f32 [4096, 512:520] heap`). Lark takes most of a cold parse's time,
so these lines are read by the small parser below, which accepts only text
that the grammar accepts, builds the very tree (spans included) that lark and
`_Build` build, and hands everything else to lark: symbolic sizes,
data-dependent ranges, reuse (`-> a, b`), keywords used as names, anything
unexpected, every error. tests/test_parser.py compares the two on the
library and on mutated kernels.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .lines import INDEX_REF, MAX_EXPRESSION_DEPTH, BodyLine, ScopeToken
from .tree import Access, Binary, Buffer, Call, Dim, Expr, Name, Num, Op, Ref, Span, Unary

_FAST_TOKEN = re.compile(r"""[ \t\f\r\v]*(?:
    (?P<REF_ACCESS>[A-Za-z_][A-Za-z0-9_]*\[(?:\{[0-9]+\}(?:,\{[0-9]+\})*)?\])
  | (?P<ASSIGN>max=|min=|\+=|\*=|=)
  | (?P<FLOAT>[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|\.[0-9]+(?:[eE][-+]?[0-9]+)?)
  | (?P<INT>[0-9]+)
  | (?P<REF>\{[0-9]+\})
  | (?P<NAME>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<PUNCT>[-+*/()\[\],:|])
  | (?P<END>\Z))""", re.VERBOSE)  # the grammar's terminals, in lark's order of priority
_FAST_DEPTH = MAX_EXPRESSION_DEPTH  # deeper nesting goes to lark, which needs no stack for it
_LONG = 19  # digits from which an integer may be beyond 64 bits: lark's path reports it
_KEYWORDS = frozenset({"kernel", "spec", "move", "inf"})  # lark's own terminals: how it reads them as names is its own


class _NotFast(Exception):
    """The line is not of the plain shape; lark reads it."""


class _FastLine:
    def __init__(self, code: str, line: int):
        self.line = line
        self.kinds: list[str] = []
        self.texts: list[str] = []
        self.starts: list[int] = []
        position = 0
        while True:
            match = _FAST_TOKEN.match(code, position)
            if match is None:
                raise _NotFast
            kind = match.lastgroup
            if kind == "END":
                break
            self.kinds.append(match.group(kind) if kind == "PUNCT" else kind)
            self.texts.append(match.group(kind))
            self.starts.append(match.start(kind))
            position = match.end()
        self.kinds.append("$END")
        self.texts.append("")
        self.starts.append(len(code))
        self.at = 0
        self.depth = 0

    def _take(self, kind: str | None = None) -> tuple[str, Span]:
        if kind is not None and self.kinds[self.at] != kind:
            raise _NotFast
        text, start = self.texts[self.at], self.starts[self.at]
        self.at += 1
        return text, Span(self.line, start + 1, self.line, start + len(text) + 1)

    def decl(self) -> Buffer:
        name, name_span = self._take("NAME")
        dtype, dtype_span = self._take("NAME")
        self._take("[")
        dims = [self._dim()] if self.kinds[self.at] == "INT" else []
        while dims and self.kinds[self.at] == ",":
            self._take()
            dims.append(self._dim())
        self._take("]")
        location, location_span = self._take("NAME")
        self._take("$END")
        if not _KEYWORDS.isdisjoint((name, dtype, location)):
            raise _NotFast
        return Buffer(name, dtype, tuple(dims), location, (), span=name_span.join(location_span),
                      dtype_span=dtype_span, location_span=location_span)

    def _dim(self) -> Dim:
        size, span = self._take("INT")
        stored = None
        if self.kinds[self.at] == ":":
            self._take()
            stored, stored_span = self._take("INT")
            span = span.join(stored_span)
        if len(size) >= _LONG or stored is not None and len(stored) >= _LONG:
            raise _NotFast
        return Dim(int(size), None if stored is None else int(stored), span)

    def body(self) -> BodyLine:
        tokens = []
        while self.kinds[self.at] in ("INT", "|"):
            if self.kinds[self.at] == "|":
                tokens.append(ScopeToken("bar", self._take()[1]))
                continue
            digits, span = self._take()
            suffix = ""
            if self.kinds[self.at] == ":":
                self._take()
                suffix, suffix_span = self._take("NAME")
                span = span.join(suffix_span)
            if len(digits) >= _LONG:
                raise _NotFast
            tokens.append(ScopeToken("size", span, int(digits), suffix))
        if self.kinds[self.at] not in ("NAME", "REF_ACCESS"):
            raise _NotFast
        target = self._atom(operand=False)
        assign, _ = self._take("ASSIGN")
        value = self._sum()
        self._take("$END")
        return BodyLine(tuple(tokens), Op(target, assign, value, span=target.span.join(value.span)))

    def _sum(self) -> Expr:
        self.depth += 1
        if self.depth > _FAST_DEPTH:
            raise _NotFast
        left = self._product()
        while self.kinds[self.at] in ("+", "-"):
            op, _ = self._take()
            right = self._product()
            left = Binary(op, left, right, left.span.join(right.span))
        self.depth -= 1
        return left

    def _product(self) -> Expr:
        left = self._unary()
        while self.kinds[self.at] in ("*", "/"):
            op, _ = self._take()
            right = self._unary()
            left = Binary(op, left, right, left.span.join(right.span))
        return left

    def _unary(self) -> Expr:
        if self.kinds[self.at] != "-":
            return self._atom()
        _, span = self._take()
        self.depth += 1
        if self.depth > _FAST_DEPTH:
            raise _NotFast
        operand = self._unary()
        self.depth -= 1
        return Unary("-", operand, span.join(operand.span))

    def _atom(self, operand: bool = True) -> Expr:
        kind = self.kinds[self.at]
        text, span = self._take()
        if kind in ("INT", "FLOAT") and operand or kind == "NAME" and operand and text == "inf":
            return Num(text, span)
        if kind == "REF" and operand:
            if len(text) - 2 >= _LONG:
                raise _NotFast
            return Ref(int(text[1:-1]), span)
        if kind == "REF_ACCESS":
            index = []
            for m in INDEX_REF.finditer(text):
                if len(m.group(1)) >= _LONG:
                    raise _NotFast
                index.append(Ref(int(m.group(1)), Span(self.line, span.col + m.start(), self.line,
                                                       span.col + m.end())))
            return Access(text[: text.index("[")], tuple(index), span)
        if kind == "NAME" and self.kinds[self.at] == "[":
            self._take()
            index, end = self._list("]")
            return Access(text, index, span.join(end))
        if kind == "NAME" and operand and self.kinds[self.at] == "(":
            self._take()
            args, end = self._list(")")
            return Call(text, args, span.join(end))
        if kind == "NAME" and operand:
            return Name(text, span)
        if kind == "(" and operand:
            inner = self._sum()
            _, end = self._take(")")
            return replace(inner, span=span.join(end))
        raise _NotFast

    def _list(self, close: str) -> tuple[tuple[Expr, ...], Span]:
        items = []
        if self.kinds[self.at] != close:
            items.append(self._sum())
            while self.kinds[self.at] == ",":
                self._take()
                items.append(self._sum())
        _, end = self._take(close)
        return tuple(items), end


def fast_line(code: str, line: int, kind: str) -> BodyLine | Buffer | None:
    """The body line or declaration (`kind`) `code` read without lark, or None
    when it is not of the plain shape (then lark reads it)."""
    try:
        reader = _FastLine(code, line)
        return reader.body() if kind == "body" else reader.decl() if kind == "decl" else None
    except (_NotFast, RecursionError):  # lark needs no stack for deep nesting
        return None
