"""Properties of the parser, printer and checker over random programs and
random damage to real ones.

Random programs come from `strategies.programs()`, which builds valid trees
straight from the dataclasses; damaged texts are library kernels and random
programs with characters, tokens and lines inserted, deleted, replaced,
swapped and duplicated.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import programs

from dojo_ir import DojoError, check, diagnose, load, parse, to_text
from dojo_ir.errors import Diagnostic
from dojo_ir.library import KERNELS
from dojo_ir.parser import source_lines
from dojo_ir.tree import Program

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- round trips ------------------------------------------------------------------------


@PROPERTY
@given(programs())
def test_parse_inverts_print(program: Program) -> None:
    assert parse(to_text(program)) == program


@PROPERTY
@given(programs())
def test_printing_is_idempotent(program: Program) -> None:
    text = to_text(program)
    assert to_text(parse(text)) == text


@PROPERTY
@given(programs())
def test_generated_programs_are_valid(program: Program) -> None:
    """The strategy's promise, and the checker's: none of its rules fire on a
    program that keeps them all."""
    assert check(program) == []
    assert load(to_text(program)) == program


def _respaced(text: str, data: st.DataObject) -> str:
    """The same program with every space on a code line widened to 1-3
    blanks; comment lines keep their text."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            line = re.sub(" ", lambda _: data.draw(st.sampled_from([" ", "  ", "\t", " \t "])), line)
        lines.append(line)
    return "\n".join(lines) + "\n"


@PROPERTY
@given(programs(), st.data())
def test_layout_does_not_change_the_tree(program: Program, data: st.DataObject) -> None:
    assert parse(_respaced(to_text(program), data)) == program


# -- damaged texts ------------------------------------------------------------------------

LIBRARY_TEXTS = [KERNELS[name].small() for name in KERNELS] + [KERNELS[name].text() for name in KERNELS]

TOKENS = (
    "kernel", "->", "(", ")", "[", "]", "{0}", "{1}", "{7}", ",", "|", "||", "=", "+=", "*=", "max=", "min=",
    "+", "-", "*", "/", "#", "4", "0", "4:u", "8:b", ":", "1e-5", "inf", "-inf", "exp(", "max(", "x[]", "x[{0}]",
    "f32", "i32", "heap", "shared", "[4:2]", "while", "if", "N", " ", "\t", "\n", "\r", "\f", "\x00", "é", "\u2028",
)  # fmt: skip
CHARACTERS = "[]{}()|=+-*/:,.#e0123456789 \t\nabxyz_<>!?@$"
_TOKEN = re.compile(r"\{\d+\}|[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|max=|min=|\+=|\*=|->|\S")


def _mutate(text: str, data: st.DataObject) -> str:
    kind = data.draw(
        st.sampled_from([
            "insert-character", "delete-characters", "replace-character", "insert-token", "replace-token",
            "delete-token", "swap-lines", "duplicate-line", "delete-line",
        ]),  # fmt: skip
        label="mutation",
    )
    if kind.endswith("line") or kind.endswith("lines"):
        lines = text.split("\n")
        a = data.draw(st.integers(0, len(lines) - 1))
        b = data.draw(st.integers(0, len(lines) - 1))
        if kind == "swap-lines":
            lines[a], lines[b] = lines[b], lines[a]
        elif kind == "duplicate-line":
            lines.insert(b, lines[a])
        elif len(lines) > 1:
            del lines[a]
        return "\n".join(lines)
    if kind.endswith("token"):
        tokens = list(_TOKEN.finditer(text))
        if not tokens:
            return text + data.draw(st.sampled_from(TOKENS))
        token = data.draw(st.sampled_from(tokens))
        start, end = token.span()
        if kind == "insert-token":
            where = data.draw(st.sampled_from([start, end]))
            return text[:where] + data.draw(st.sampled_from(TOKENS)) + text[where:]
        replacement = data.draw(st.sampled_from(TOKENS)) if kind == "replace-token" else ""
        return text[:start] + replacement + text[end:]
    position = data.draw(st.integers(0, len(text)))
    if kind == "insert-character":
        return text[:position] + data.draw(st.sampled_from(CHARACTERS)) + text[position:]
    if kind == "delete-characters":
        return text[:position] + text[position + data.draw(st.integers(1, 3)):]
    return text[:position] + data.draw(st.sampled_from(CHARACTERS)) + text[position + 1:]


def _damaged(text: str, data: st.DataObject) -> str:
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        text = _mutate(text, data)
    return text


def _assert_survives(text: str) -> None:
    """`diagnose` never raises and `load` raises nothing but DojoError; every
    diagnostic lies within the text and covers at least one column."""
    program, diagnostics = diagnose(text)
    assert program is None or isinstance(program, Program)
    assert all(isinstance(d, Diagnostic) for d in diagnostics)
    assert program is not None or diagnostics
    lines = source_lines(text) or [""]  # an empty file is reported on its (empty) first line
    for d in diagnostics:
        span = d.span
        assert 1 <= span.line <= len(lines), (d, len(lines))
        assert span.end_line == span.line, d
        assert 1 <= span.col <= len(lines[span.line - 1]) + 1, (d, lines[span.line - 1])
        assert span.end_col > span.col, d
    try:
        loaded = load(text)
    except DojoError as error:
        assert diagnostics and list(error.diagnostics) == list(diagnostics)
    else:
        assert not diagnostics and loaded == program


@PROPERTY
@given(st.sampled_from(LIBRARY_TEXTS), st.data())
def test_damaged_library_kernels_are_diagnosed_never_crash(text: str, data: st.DataObject) -> None:
    _assert_survives(_damaged(text, data))


@PROPERTY
@given(programs(), st.data())
def test_damaged_random_programs_are_diagnosed_never_crash(program: Program, data: st.DataObject) -> None:
    _assert_survives(_damaged(to_text(program), data))


def test_fixed_damaged_texts_are_diagnosed() -> None:
    """A few fixed damaged texts, so that a regression shows without luck."""
    base = KERNELS["softmax"].small()
    for text in (
        base.replace("kernel", "kernal"),
        base.replace("[3]", "[3:3]"),
        base.replace("5 e[", "| | e["),
        base.replace("max=", "max=max="),
        base + "\x00",
        base.replace("\n", "\r\n"),
        base.replace("{1}", "{1}\u2028"),
        "",
        "\n\n#\n",
        "kernel",
        "kernel k(",
        "| | |",
    ):
        _assert_survives(text)
