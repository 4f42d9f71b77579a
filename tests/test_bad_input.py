"""Hostile input to the front end and the interpreter (issue 16, "Bad input"): every one is a
positioned DojoError or diagnostic, never a RecursionError, ValueError, numpy error or a
quadratic wait."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from dojo_ir import DojoError, check, diagnose, interpret, load, parse, random_inputs, to_text
from dojo_ir.parser import MAX_EXPRESSION_DEPTH, MAX_SCOPE_DEPTH
from dojo_ir.tree import Buffer, Dim, Scope, walk_expr
from server.cli import main

HEAD = "kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n\n"


def _only_error(text: str) -> tuple[int, int, str, str]:
    _, diagnostics = diagnose(text)
    assert diagnostics, "expected an error"
    first = diagnostics[0]
    return first.span.line, first.span.col, first.rule, first.message


# -- nesting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, col",
    [
        ("1 " * 331 + "y[0] = x[0]", 2 * MAX_SCOPE_DEPTH + 1),  # the first scope beyond the limit
        ("4 y[{0}] = " + " + ".join(["x[{0}]"] * 989), 12),  # a chain of 989 terms, deepest at its start
        ("4 y[{0}] = " + "exp(" * 2000 + "x[{0}]" + ")" * 2000, 12 + 4 * MAX_EXPRESSION_DEPTH),
        ("4 y[{0}] = x[" + "+".join(["0"] * 100_000) + "]", 14),  # a 200 KB index expression
    ],
    ids=["331 scopes", "989 terms", "2000 exp(", "long index"],
)
def test_nesting_beyond_the_stated_limits_is_a_positioned_error(body: str, col: int) -> None:
    line, column, rule, message = _only_error(HEAD + body + "\n")
    assert (line, column, rule) == (6, col, "too-deep")
    assert "at most" in message
    with pytest.raises(DojoError):
        load(HEAD + body + "\n")


def test_nesting_up_to_the_limits_checks_prints_and_runs() -> None:
    inner = MAX_SCOPE_DEPTH - 1
    scopes = "1 " * inner + f"4 y[{{{inner}}}] = x[{{{inner}}}]"
    terms = "4 y[{0}] = " + " + ".join(["x[{0}]"] * (MAX_EXPRESSION_DEPTH - 3))
    for body in (scopes, terms):
        program = load(HEAD + body + "\n")
        assert parse(to_text(program)) == program
        interpret(program, random_inputs(program, 0))


def test_walk_expr_needs_no_stack_for_deep_trees() -> None:
    # trees built by code (moves, tests) are not bounded by the parser
    expr = parse(HEAD + "4 y[{0}] = x[{0}] + 1\n").body[0].body[0].value
    for _ in range(5000):
        expr = type(expr)("+", expr, expr.right)
    assert sum(1 for _ in walk_expr(expr)) == 4 + 2 * 5000  # x[{0}] + 1, then a `+` and a `1` each time


# -- numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, where",
    [
        (HEAD + "1" * 5000 + " y[0] = x[0]\n", (6, 1)),
        ("kernel k(x) -> y\n\nx f32 [" + "7" * 4400 + "] heap\ny f32 [4] heap\n\n4 y[{0}] = x[0]\n", (3, 8)),
        (HEAD + "4 y[{" + "3" * 4400 + "}] = x[{0}]\n", (6, 5)),
        (HEAD + "4 y[{0}] = x[{" + "3" * 4400 + "}+0]\n", (6, 14)),
        (HEAD + "9223372036854775808 y[0] = x[0]\n", (6, 1)),
    ],
    ids=["scope size", "dimension", "ref access", "ref", "2**63"],
)
def test_integers_beyond_64_bits_are_positioned_errors(text: str, where: tuple[int, int]) -> None:
    line, col, rule, message = _only_error(text)
    assert (line, col, rule) == (*where, "too-large")
    assert "2**63 - 1" in message and len(message) < 200


def test_extents_and_buffer_sizes_beyond_int64_are_rejected_by_the_checker() -> None:
    # trees built by code are not bounded by the parser; the checker is the gate before codegen
    program = parse(HEAD + "4 y[{0}] = x[{0}]\n")
    big = 1 << 63
    huge_dim = Buffer("t", "f32", (Dim(big),), "heap")
    assert [d.rule for d in check(replace(program, buffers=program.buffers + (huge_dim,)))] == ["too-large"]
    many = Buffer("t", "f64", (Dim(1 << 31), Dim(1 << 31)), "heap")  # 2**62 elements of 8 bytes
    assert [d.rule for d in check(replace(program, buffers=program.buffers + (many,)))] == ["too-large"]
    wide = Scope(big, "", program.body[0].body)
    assert "too-large" in [d.rule for d in check(replace(program, body=(wide,)))]


def test_an_integer_literal_beyond_the_dtype_of_an_integer_operation_is_an_error() -> None:
    text = "kernel k(x) -> y\n\nx i32 [4] heap\ny i32 [4] heap\n\n4 y[{0}] = x[{0}] + 99999999999\n"
    assert _only_error(text)[:3] == (6, 21, "integer-op")
    # unchecked, the interpreter says so too, rather than raising numpy's OverflowError
    program = parse(text)
    with pytest.raises(DojoError) as error:
        interpret(program, random_inputs(program, 0))
    assert error.value.diagnostics[0].span.line == 6


# -- memory -----------------------------------------------------------------------


def test_the_interpreter_refuses_arrays_beyond_its_limit_before_allocating() -> None:
    text = "kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\nt f32 [1000000000000] heap\n\n4 y[{0}] = x[{0}]\n"
    program = load(text)
    for run in (lambda: random_inputs(program, 0), lambda: interpret(program, {"x": [1, 2, 3, 4]})):
        with pytest.raises(DojoError) as error:
            run()
        (d,) = error.value.diagnostics
        assert (d.span.line, d.rule) == (5, "interpret-memory")


def test_a_name_longer_than_the_limit_is_an_error() -> None:
    name = "a" * (1 << 20)
    text = f"kernel k(x) -> {name}\n\nx f32 [4] heap\n{name} f32 [4] heap\n\n4 {name}[{{0}}] = x[{{0}}]\n"
    line, _, rule, message = _only_error(text)
    assert (line, rule) == (4, "name-length") and len(message) < 200


# -- speed ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["4 y[{0}] = x[{0}]", "| y[{0}] = y[{0}] + x[{0}]", "| y[{0}] += x[{0}]"],
    ids=["scope per line", "same element", "one accumulator"],
)
def test_check_is_near_linear_in_the_number_of_lines(line: str) -> None:
    # 10,000 lines took minutes when every scope (or every read) rescanned the program
    text = HEAD + "4 y[{0}] = x[{0}]\n" + (line + "\n") * 10_000
    program = parse(text)
    started = time.perf_counter()
    assert check(program) == []
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(
    "char, shown", [("\u2028", "U+2028"), ("\x1c", "U+001C"), ("\x85", "U+0085"), ("\x00", "U+0000")]
)
def test_an_unprintable_character_is_named_by_its_code_point(char: str, shown: str) -> None:
    # so that the message stays on one line of the terminal and of `dojo check`'s output
    _, _, rule, message = _only_error(HEAD + f"4 y[{{0}}] = x[{{0}}] {char} 1\n")
    assert rule == "syntax" and f"`{shown}`" in message and message.isprintable()


def test_dojo_interp_refuses_a_huge_temporary_with_a_position(tmp_path: Path, capsys) -> None:
    path = tmp_path / "huge.dojo"
    path.write_text("kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\nt f32 [1000000000000] heap\n\n"
                    "4 y[{0}] = x[{0}]\n")
    assert main(["interp", "--seed", "0", "--out", str(tmp_path / "out.npz"), str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"{path}:5:1: error: the arrays of k take 4000000000064 bytes")


def test_a_device_or_a_pipe_is_not_read_as_a_dojo_file(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "zero.dojo"  # a derivation whose spec is a device that never ends
    spec.write_text('kernel k(x) -> y\nspec "/dev/zero"\nmove join_scopes(op=y#1, depth=0)\n\nx f32 [4] heap\n'
                    'y f32 [4] heap\n\n4 y[{0}] = x[{0}]\n')
    assert main(["replay", str(spec)]) == 1
    assert "/dev/zero:1:1: error: cannot read: not a regular file" in capsys.readouterr().err
    assert main(["check", "/dev/zero"]) == 1
    assert capsys.readouterr().out.startswith("/dev/zero:1:1: error: cannot read: not a regular file")


def test_a_dojo_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path, capsys) -> None:
    big = tmp_path / "big.dojo"
    with open(big, "wb") as sparse:  # 5 GiB that take no disk
        sparse.truncate(5 << 30)
    assert main(["check", str(big)]) == 1
    assert "over the limit of 268,435,456 for a .dojo file" in capsys.readouterr().out
