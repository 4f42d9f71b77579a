"""The `.dojo` IR: tree, parser, printer, checker and reference interpreter.

    program = load(text)          # parse and check, or raise DojoError
    text = to_text(program)       # the canonical text
    outputs = interpret(program, random_inputs(program, seed=0))
"""

from __future__ import annotations

import re

from .checker import check
from .errors import Diagnostic, DojoError
from .interpreter import interpret, random_inputs
from .parser import classify, parse, parse_with_diagnostics, source_lines
from .printer import to_text
from .tree import Program


def diagnose(text: str) -> tuple[Program | None, list[Diagnostic]]:
    """Every error in `text`: syntax and structure errors, and the checker's
    rules on whatever parsed. An array that is unknown only because its
    declaration (or the kernel line) did not parse is not reported again."""
    program, diagnostics = parse_with_diagnostics(text)
    if program is None:
        return None, diagnostics
    lines = source_lines(text)
    unparsed = {
        word
        for d in diagnostics
        if d.rule in ("syntax", "too-large") and classify(lines[d.span.line - 1]) in ("kernel", "decl")
        for word in re.findall(r"\w+", lines[d.span.line - 1].partition("#")[0])
    }
    semantic = [
        d for d in check(program) if not (d.rule == "unknown-array" and re.search(r"`(\w+)`", d.message)[1] in unparsed)
    ]
    return program, sorted(diagnostics + semantic, key=lambda d: (d.span.line, d.span.col))


def load(text: str) -> Program:
    """Parse and check `text`; raise DojoError listing every error."""
    program, diagnostics = diagnose(text)
    if diagnostics:
        raise DojoError(diagnostics)
    assert program is not None
    return program


__all__ = [
    "Diagnostic",
    "DojoError",
    "Program",
    "check",
    "diagnose",
    "interpret",
    "load",
    "parse",
    "parse_with_diagnostics",
    "random_inputs",
    "to_text",
]
