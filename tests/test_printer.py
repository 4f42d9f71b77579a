"""The canonical printer (FORMAT.md, "Canonical text").

Golden files: `tests/golden/NAME.dojo` is a kernel as a person might type it
and `NAME.expected` is its canonical text. Regenerate the expected files
after a deliberate change of the canonical form with

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_printer.py

and review the diff before committing it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from dojo_ir import load, parse, to_text
from dojo_ir.library import KERNELS
from dojo_ir.tree import Access, Binary, Num, Op, Program, Ref, Scope, Unary

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_INPUTS = sorted(GOLDEN.glob("*.dojo"))
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def _body(text: str) -> str:
    """The body section of a canonical text: everything after the last blank line."""
    return text.rsplit("\n\n", 1)[1]


# -- golden files -------------------------------------------------------------


def test_there_are_golden_files() -> None:
    assert len(GOLDEN_INPUTS) >= 3
    for source in GOLDEN_INPUTS:
        assert source.with_suffix(".expected").exists() or UPDATE, f"{source.name} has no .expected file"


@pytest.mark.parametrize("source", GOLDEN_INPUTS, ids=_ids(GOLDEN_INPUTS))
def test_golden_input_prints_as_expected(source: Path) -> None:
    printed = to_text(parse(source.read_text()))
    expected = source.with_suffix(".expected")
    if UPDATE:
        expected.write_text(printed)
    assert printed == expected.read_text()


@pytest.mark.parametrize("source", GOLDEN_INPUTS, ids=_ids(GOLDEN_INPUTS))
def test_expected_text_is_a_fixed_point_of_the_printer(source: Path) -> None:
    canonical = source.with_suffix(".expected").read_text()
    assert to_text(parse(canonical)) == canonical


@pytest.mark.parametrize("source", GOLDEN_INPUTS, ids=_ids(GOLDEN_INPUTS))
def test_golden_input_is_a_valid_kernel_equal_to_its_canonical_form(source: Path) -> None:
    program = load(source.read_text())  # raises DojoError if the fixture broke a rule
    assert parse(to_text(program)) == program
    assert load(source.with_suffix(".expected").read_text()) == program


# -- round trips over the library ---------------------------------------------------

LIBRARY = [(name, size) for name in KERNELS for size in ("paper", "small")]


@pytest.mark.parametrize("name, size", LIBRARY, ids=[f"{n}-{s}" for n, s in LIBRARY])
def test_library_kernel_round_trips(name: str, size: str) -> None:
    text = KERNELS[name].text() if size == "paper" else KERNELS[name].small()
    program = parse(text)
    assert parse(to_text(program)) == program
    # the library is written in canonical form already
    assert to_text(program) == text


# -- layout -------------------------------------------------------------------------

# FORMAT.md, "A complete example", after five join_scopes moves.
FUSED_SOFTMAX_BODY = """\
24576 m[{0}] = -inf
|     512 m[{0}] max= x[{0},{1}]
|     512 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
|     s[{0}] = 0
|     512 s[{0}] += e[{0},{1}]
|     512 y[{0},{1}] = e[{0},{1}] / s[{0}]
"""


def test_fused_softmax_prints_exactly_as_in_format_md() -> None:
    unfused = parse(KERNELS["softmax"].text())
    rows = unfused.body
    assert all(isinstance(s, Scope) and s.size == 24576 for s in rows)
    fused = replace(unfused, body=(Scope(24576, "", tuple(child for s in rows for child in s.body)),))
    printed = to_text(fused)
    assert _body(printed) == FUSED_SOFTMAX_BODY
    assert parse(printed) == fused


def test_bar_stands_under_the_first_character_of_the_size_it_continues() -> None:
    text = (
        "kernel k() -> y\n\ny f32 [4, 4] heap\n\n"
        "4:p   2   y[{0},{1}] = 1\n"
        "|  |  3   y[{0},{2}] = 2\n"
        "| 1:u y[{0},0] = 3\n"
    )
    body = _body(to_text(parse(text)))
    assert body == (
        "4:p 2 y[{0},{1}] = 1\n"
        "|   | 3 y[{0},{2}] = 2\n"
        "|   1:u y[{0},0] = 3\n"
    )  # fmt: skip


def test_sections_are_separated_by_one_blank_line() -> None:
    text = "kernel k(x) -> y\nx f32 [2] heap\ny f32 [2] heap\n2 y[{0}] = x[{0}]\n"
    assert to_text(parse(text)) == "kernel k(x) -> y\n\nx f32 [2] heap\ny f32 [2] heap\n\n2 y[{0}] = x[{0}]\n"


def test_declarations_print_dims_arrays_and_scalars_canonically() -> None:
    text = "kernel k(x)->y\nx f32 [ 4,8 ] heap\ny f32 [4 , 8] heap\nt i64 [ 8:2 ,4 ]   stack->a,b\ns f64 [ ] shared\n"
    assert to_text(parse(text)).splitlines()[2:] == [
        "x f32 [4, 8] heap",
        "y f32 [4, 8] heap",
        "t i64 [8:2, 4] stack -> a, b",
        "s f64 [] shared",
    ]


# -- expressions -----------------------------------------------------------------------


def _value_text(value: str) -> str:
    program = parse(f"kernel k(a, b, c) -> y\n\ny[] = {value}\n")
    return to_text(program).splitlines()[-1].removeprefix("y[] = ")


@pytest.mark.parametrize(
    "written, printed",
    [
        ("a[] - (b[] - c[])", "a[] - (b[] - c[])"),
        ("(a[] * b[]) + c[]", "a[] * b[] + c[]"),
        ("-(a[] + b[])", "-(a[] + b[])"),
        ("(a[] - b[]) - c[]", "a[] - b[] - c[]"),
        ("a[] / (b[] * c[])", "a[] / (b[] * c[])"),
        ("(a[] / b[]) * c[]", "a[] / b[] * c[]"),
        ("a[] * (b[] + c[])", "a[] * (b[] + c[])"),
        ("-(a[] * b[])", "-(a[] * b[])"),
        ("(-a[]) * b[]", "-a[] * b[]"),
        ("a[] - (-b[])", "a[] - -b[]"),
        ("-(-a[])", "--a[]"),
        ("((exp((a[]))))", "exp(a[])"),
        ("max( a[] ,min(b[],(c[])) )", "max(a[], min(b[], c[]))"),
        ("-inf", "-inf"),
        ("1e-5 * 2.50", "1e-5 * 2.50"),
        ("a[]+{0}", "a[] + {0}"),
    ],
)
def test_expressions_print_with_the_fewest_parentheses(written: str, printed: str) -> None:
    assert _value_text(written) == printed


def test_parentheses_kept_by_the_printer_are_exactly_those_the_tree_needs() -> None:
    a, b, c = Access("a", ()), Access("b", ()), Access("c", ())
    for tree in (
        Binary("-", a, Binary("-", b, c)),
        Binary("-", Binary("-", a, b), c),
        Binary("*", Binary("+", a, b), c),
        Unary("-", Binary("/", a, b)),
        Binary("/", a, Unary("-", Binary("*", b, c))),
    ):
        program = Program("k", ("a", "b", "c"), ("y",), (), (Op(Access("y", ()), "=", tree),))
        assert parse(to_text(program)).body[0].value == tree


def test_no_spaces_inside_brackets() -> None:
    text = "kernel k(x) -> y\n\n2 4 y[ {0} , {1} ] = x[ ( {0} * 4 ) + {1} , 3 - {1} ]\n"
    assert _body(to_text(parse(text))) == "2 4 y[{0},{1}] = x[{0}*4+{1},3-{1}]\n"


def test_number_literals_keep_their_text() -> None:
    program = Program("k", (), ("y",), (), tuple(
        Op(Access("y", ()), "=", Num(text)) for text in ("1e-5", "1E+05", "0.500", ".5", "1.", "007", "inf")
    ))  # fmt: skip
    assert [line.split(" = ")[1] for line in to_text(program).splitlines()[2:]] == [
        "1e-5", "1E+05", "0.500", ".5", "1.", "007", "inf",
    ]  # fmt: skip


def test_index_expressions_print_compactly_and_keep_their_tree() -> None:
    index = Binary("-", Binary("*", Ref(0), Num("4")), Binary("+", Ref(1), Num("1")))
    op = Op(Access("y", (index,)), "=", Num("0"))
    program = Program("k", (), ("y",), (), (Scope(2, "", (Scope(3, "", (op,)),)),))
    text = to_text(program)
    assert _body(text) == "2 3 y[{0}*4-({1}+1)] = 0\n"
    assert parse(text) == program


# -- comments -----------------------------------------------------------------------------


def test_comments_survive_and_stay_with_their_node() -> None:
    text = (
        "# about the kernel\n"
        "kernel k(x) -> y\n"
        "# about x\n"
        "x f32 [2] heap\n"
        "y f32 [2] heap\n"
        "# about the first operation\n"
        "2 y[{0}] = x[{0}]\n"
        "# about the second operation\n"
        "| y[{0}] += 1\n"
        "# at the end\n"
    )
    program = parse(text)
    assert program.comments == (" about the kernel",)
    assert program.buffers[0].comments == (" about x",)
    first, second = program.body[0].body
    assert first.comments == (" about the first operation",)
    assert second.comments == (" about the second operation",)
    assert program.trailing == (" at the end",)
    assert to_text(program) == (
        "# about the kernel\n"
        "kernel k(x) -> y\n\n"
        "# about x\n"
        "x f32 [2] heap\n"
        "y f32 [2] heap\n\n"
        "# about the first operation\n"
        "2 y[{0}] = x[{0}]\n"
        "# about the second operation\n"
        "| y[{0}] += 1\n"
        "# at the end\n"
    )


def test_a_trailing_comment_moves_to_its_own_line_before_its_node() -> None:
    text = (
        "kernel k(x) -> y   # the kernel\n"
        "x f32 [2] heap # an input\n"
        "y f32 [2] heap\n"
        "# above\n"
        "2 y[{0}] = x[{0}]   # at the end of the line\n"
    )
    assert to_text(parse(text)) == (
        "# the kernel\n"
        "kernel k(x) -> y\n\n"
        "# an input\n"
        "x f32 [2] heap\n"
        "y f32 [2] heap\n\n"
        "# above\n"
        "# at the end of the line\n"
        "2 y[{0}] = x[{0}]\n"
    )


def test_comments_take_part_in_equality_and_printing() -> None:
    plain = parse("kernel k() -> y\ny f32 [] heap\ny[] = 1\n")
    commented = parse("kernel k() -> y\ny f32 [] heap\ny[] = 1 # note\n")
    assert plain != commented
    assert "# note" in to_text(commented)
    assert "#" not in to_text(plain)
