"""The parser: spans, equality, hashing, `|` resolution and error recovery
(FORMAT.md, "The body: a tree written as lines" and "Precise rules")."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from dojo_ir import DojoError, diagnose, parse, parse_with_diagnostics, parser, to_text
from dojo_ir.library import KERNELS
from dojo_ir.parser import source_lines
from dojo_ir.tree import Access, Binary, Num, Op, Ref, Scope, Span, Unary, walk_ops

KERNEL = """\
kernel k(x) -> y

x f32 [4, 8:2] heap
y f32 [4, 8] heap

4:p 8 y[{0},{1}] = (x[{0}, {1}] + -{1}) * 2
"""


def _line(line: int, col: int, end_col: int) -> Span:
    return Span(line, col, line, end_col)


# -- spans ----------------------------------------------------------------------


def test_spans_are_one_based_with_an_exclusive_end_column() -> None:
    program = parse(KERNEL)
    outer = program.body[0]
    inner = outer.body[0]
    op = inner.body[0]
    assert isinstance(op, Op)
    # `4:p 8 y[{0},{1}] = (x[{0}, {1}] + -{1}) * 2`
    #  1   5 7        16  20 22     28   33 35  39 41 43
    assert outer.span == _line(6, 1, 4)  # the size token with its suffix
    assert inner.span == _line(6, 5, 6)
    assert op.span == _line(6, 7, 44)  # from the target to the end of the value
    assert op.target.span == _line(6, 7, 17)
    assert [r.span for r in op.target.index] == [_line(6, 9, 12), _line(6, 13, 16)]
    value = op.value
    assert isinstance(value, Binary) and value.span == _line(6, 20, 44)
    parenthesized = value.left
    assert isinstance(parenthesized, Binary) and parenthesized.span == _line(6, 20, 40)  # parentheses included
    x = parenthesized.left
    assert isinstance(x, Access) and x.span == _line(6, 21, 32)
    assert [r.span for r in x.index] == [_line(6, 23, 26), _line(6, 28, 31)]
    negated = parenthesized.right
    assert isinstance(negated, Unary) and negated.span == _line(6, 35, 39)
    assert negated.operand.span == _line(6, 36, 39)
    assert value.right.span == _line(6, 43, 44)


def test_declaration_and_kernel_line_spans() -> None:
    program = parse(KERNEL)
    assert program.span == _line(1, 1, 17)
    assert program.io_spans == (_line(1, 10, 11), _line(1, 16, 17))
    x = program.buffers[0]
    assert x.span == _line(3, 1, 20)
    assert x.dtype_span == _line(3, 3, 6)
    assert x.location_span == _line(3, 16, 20)
    assert [d.span for d in x.dims] == [_line(3, 8, 9), _line(3, 11, 14)]


def test_spans_of_accesses_without_spaces_and_with_spaces_agree() -> None:
    tight = parse("kernel k() -> y\n\n2 3 y[{0},{1}] = 0\n")
    loose = parse("kernel k() -> y\n\n2 3 y[ {0},{1} ] = 0\n")
    (op_tight, _), (op_loose, _) = next(walk_ops(tight.body)), next(walk_ops(loose.body))
    assert op_tight.target.span == _line(3, 5, 15)
    assert [r.span for r in op_tight.target.index] == [_line(3, 7, 10), _line(3, 11, 14)]
    assert op_loose.target.span == _line(3, 5, 17)
    assert [r.span for r in op_loose.target.index] == [_line(3, 8, 11), _line(3, 12, 15)]


def test_a_scope_continued_by_bars_keeps_the_span_of_the_line_that_opened_it() -> None:
    program = parse("kernel k() -> y\n\n4 y[{0}] = 1\n| y[{0}] = 2\n")
    (scope,) = program.body
    assert scope.span == _line(3, 1, 2)
    assert [op.span.line for op in scope.body] == [3, 4]


# -- equality and hashing ---------------------------------------------------------


def test_equality_ignores_spans() -> None:
    spaced = (
        "kernel   k ( x )->y\nx   f32 [4 ,8:2]heap\ny f32 [4,8] heap\n\n\n"
        "4:p   8  y[ {0},{1} ]=(x[{0},{1}]+ - {1})*2\n"
    )
    assert parse(spaced) == parse(KERNEL)
    assert hash(parse(spaced)) == hash(parse(KERNEL))
    assert Ref(0, _line(1, 1, 4)) == Ref(0, _line(9, 9, 12))
    assert Num("1", _line(1, 1, 2)) == Num("1")


def test_equality_does_not_ignore_comments() -> None:
    assert parse(KERNEL) != parse("# a comment\n" + KERNEL)
    assert parse(KERNEL) != parse(KERNEL.replace("* 2\n", "* 2  # a comment\n"))
    assert parse(KERNEL) != parse(KERNEL.replace("x f32", "# a comment\nx f32"))
    assert parse(KERNEL) != parse(KERNEL + "# a comment\n")


def test_equality_does_not_ignore_literal_text() -> None:
    assert Num("1.0") != Num("1")
    assert parse(KERNEL) != parse(KERNEL.replace("* 2", "* 2.0"))


def test_trees_are_hashable_and_usable_as_keys() -> None:
    program = parse(KERNEL)
    op, _ = next(walk_ops(program.body))
    nodes = {program: "program", program.body[0]: "scope", op: "op", op.target: "access", op.value: "value"}
    assert nodes[parse(KERNEL)] == "program"
    assert nodes[Access("y", (Ref(0), Ref(1)))] == "access"
    assert len({parse(KERNEL), parse(KERNEL), parse(KERNEL.replace("* 2", "* 3"))}) == 2


def test_trees_are_immutable() -> None:
    program = parse(KERNEL)
    with pytest.raises(AttributeError):
        program.name = "other"  # type: ignore[misc]


# -- `|` resolution -----------------------------------------------------------------

HEADER = "kernel k() -> y\n\ny f32 [8, 8, 8] heap\n\n"


def _body(lines: str):
    return parse(HEADER + lines).body


def _errors(lines: str) -> list[str]:
    _, diagnostics = parse_with_diagnostics(HEADER + lines)
    return [d.format("k.dojo") for d in diagnostics]


def test_bar_continues_the_scope_opened_at_its_position() -> None:
    body = _body("4 2 y[{0},{1},0] = 1\n| | y[{0},{1},1] = 2\n| y[{0},0,0] = 3\n")
    assert body == (
        Scope(4, "", (
            Scope(2, "", (
                Op(Access("y", (Ref(0), Ref(1), Num("0"))), "=", Num("1")),
                Op(Access("y", (Ref(0), Ref(1), Num("1"))), "=", Num("2")),
            )),
            Op(Access("y", (Ref(0), Num("0"), Num("0"))), "=", Num("3")),
        )),
    )  # fmt: skip


def test_bar_refers_to_the_nearest_preceding_line_with_a_token_at_its_position() -> None:
    # line 2 opens a second `3` at position 1; the `|` at position 1 of line 3 continues it, not line 1's `2`
    body = _body("4 2 y[{0},{1},0] = 1\n| 3 y[{0},{1},1] = 2\n| | y[{0},{1},2] = 3\n")
    (outer,) = body
    first, second = outer.body
    assert (first.size, second.size) == (2, 3)
    assert len(first.body) == 1 and len(second.body) == 2


def test_bars_accept_any_spacing_and_may_touch() -> None:
    aligned = _body("4 2 y[{0},{1},0] = 1\n| | y[{0},{1},1] = 2\n")
    assert _body("4 2 y[{0},{1},0] = 1\n||y[{0},{1},1] = 2\n") == aligned
    assert _body("4 2 y[{0},{1},0] = 1\n      |     |      y[{0},{1},1] = 2\n") == aligned
    assert _body("4 2 y[{0},{1},0] = 1\n\t|\t| y[{0},{1},1] = 2\n") == aligned


def test_blank_and_comment_lines_do_not_break_a_scope() -> None:
    body = _body("4 y[{0},0,0] = 1\n\n# note\n\n| y[{0},0,1] = 2\n")
    assert len(body) == 1 and len(body[0].body) == 2


def test_a_size_token_at_a_position_opens_a_new_sibling_scope() -> None:
    body = _body("4 y[{0},0,0] = 1\n4 y[{0},0,1] = 2\n")
    assert [type(n) for n in body] == [Scope, Scope]
    assert body[0] != body[1]


def test_operations_without_scope_tokens_sit_under_the_root() -> None:
    body = _body("y[0,0,0] = 1\n2 y[{0},0,0] = 2\ny[1,1,1] = 3\n")
    assert [type(n) for n in body] == [Op, Scope, Op]


def test_bar_with_no_line_above_at_its_position_is_an_error() -> None:
    assert _errors("| y[0,0,0] = 1\n") == [
        "k.dojo:5:1: error: `|` at scope position 0 continues nothing: no line above has a scope at this position; "
        "write the scope's size here"
    ]


def test_bar_must_refer_to_a_line_with_a_scope_not_an_operation_there() -> None:
    assert _errors("4 y[{0},0,0] = 1\n| | y[{0},0,0] = 1\n") == [
        "k.dojo:6:3: error: `|` at scope position 1 continues line 5, which has its operation there, not a scope; "
        "write a scope size here"
    ]


def test_bar_must_name_a_child_of_the_scope_at_the_position_before() -> None:
    # line 6 opens a new `4` at position 0, so line 5's `2` is not inside it
    assert _errors("4 2 y[{0},{1},0] = 1\n4 | y[{0},{1},0] = 1\n") == [
        "k.dojo:6:3: error: `|` at scope position 1 continues the scope opened on line 5, which is not inside the "
        "scope this line has at position 0"
    ]


def test_a_line_continuing_a_rejected_line_is_not_reported_again() -> None:
    errors = _errors("4 y[{0},0,0] = 1\n| | y[{0},0,0] = 1\n| | | y[{0},0,0] = 1\n")
    assert len(errors) == 1 and errors[0].startswith("k.dojo:6:3:")


# -- several errors at once --------------------------------------------------------


def test_every_bad_line_is_reported_once() -> None:
    text = (
        "kernel k(x) -> y\n"
        "x f32 [4,, 8] heap\n"  # 2
        "y f32 [4, 8] heap\n"
        "4 8 y[{0},{1}] = x[{0},{1}] +\n"  # 4
        "4 8 y[{0},{1}] = x[{0},{1}]\n"
        "4 8 y[{0},{1}] == x[{0},{1}]\n"  # 6
        "4 8 y[{0},{1}] = x[{0},{1}] $ 1\n"  # 7
        "4 8 y[{0},{1}] = (x[{0},{1}]\n"  # 8
    )
    program, diagnostics = parse_with_diagnostics(text)
    assert program is not None
    assert [d.span.line for d in diagnostics] == [2, 4, 6, 7, 8]
    assert all(d.rule == "syntax" for d in diagnostics)
    with pytest.raises(DojoError) as raised:
        parse(text)
    assert len(raised.value.diagnostics) == 5


def test_what_did_parse_is_kept_around_bad_lines() -> None:
    text = "kernel k(x) -> y\nx f32 [4] heap\ny f32 [4] heap\n4 y[{0}] = = 1\n4 y[{0}] = x[{0}]\n"
    program, diagnostics = parse_with_diagnostics(text)
    assert [d.span.line for d in diagnostics] == [4]
    assert [b.name for b in program.buffers] == ["x", "y"]
    assert len(program.body) == 1


def test_structure_errors() -> None:
    late = "kernel k() -> y\n\ny[] = 1\ny f32 [] heap\n"
    assert [d.format("k.dojo") for d in parse_with_diagnostics(late)[1]] == [
        "k.dojo:4:1: error: the declaration of `y` after the body has begun; a file is the kernel line, its "
        "derivation, the declarations, then the body"
    ]
    twice = "kernel k() -> y\nkernel j() -> y\ny f32 [] heap\n"
    assert [d.format("k.dojo") for d in parse_with_diagnostics(twice)[1]] == [
        "k.dojo:2:1: error: a second kernel line; the kernel is already named on line 1 and a file holds one kernel"
    ]


# -- names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["if", "while"])
def test_control_flow_words_are_names_like_any_other(name: str) -> None:
    """FORMAT.md lists the keywords (`kernel`, dtypes, locations, function
    names, `inf`); `if`, `while`, ... are not among them, so they name arrays
    like any other word, also at the start of a body line."""
    text = f"kernel k() -> {name}\n\n{name} f32 [] heap\n\n{name}[] = 1\n"
    program, diagnostics = diagnose(text)
    assert diagnostics == []
    assert program.outputs == (name,)


# -- the plain body line without lark --------------------------------------------------


def _with_spans(node: object) -> object:
    """`node` as nested tuples that include the spans (which node equality leaves out)."""
    if dataclasses.is_dataclass(node):
        return (type(node).__name__, *((f.name, _with_spans(getattr(node, f.name))) for f in dataclasses.fields(node)))
    if isinstance(node, tuple):
        return tuple(_with_spans(item) for item in node)
    return node


def _by_lark(code: str, line: int, kind: str) -> object:
    try:
        return parser._lark_line(code, line, kind)
    except DojoError as error:
        return error.diagnostics


EDGES = [
    "4y[{0}] = 1", "4 : p y[{0}]=1", "4:p y[{0}] max= inf", "y[] = -inf", "y[ {0} , {1} ] = x[{0},{1}]",
    "y[{0}] = inf[{0}]", "y[{0}] = inf [{0}]", "y[{0}] = max(1,2)", "y[{0}] = max=1", "y[{0}] += 1.",
    "y[{0}] = .5e3", "y[{0}] = 1e5", "1e5 y[{0}] = 1", "y[{0}] = f()", "y[{0}] = f(1,)", "y[{0}] = ((x[{0}]))",
    "y[{0}] = - - 1", "y[{0}] = 2 - -1 * 3 / (4 + 5)", "| | 3 y[{0}] = 007", "inf [{0}] = 1", "y[{0}] = a b",
    "y[{0}]", "y[{0}] =", "x[{0}] 4 y[{0}] = 1", "n 4 y[{0}] = 1", "\t4\fy[{0}]\v=\r1", "y[{01}] = {007}",
    "y[x[{0}]] = 1", "4:p:q y[] = 1", "4: y[] = 1", "y[{0}] = 1.5.3", "y[{0}] = é", "y[{0}] = exp (1)",
    "y [{0}] = x [{0}]", "y[{0}] = x[{0}] min= 1", "99999999999999999999 y[] = 1", "y[{99999999999999999999}] = 1",
    "x f32 [4096, 512] heap", "x f32 [] heap", "x f32 [4,] heap", "x f32 [4:8, 2] stack", "x f32 [4 : 8] heap",
    "x f32 [, 4] heap", "x f32 [4] heap extra", "x f32 [4] heap -> a, b", "x f32 [4]", "x f32 [4:] heap",
    "inf f32 [4] heap", "x f32 [4] spec", "x f32 [99999999999999999999] heap", "x f32 [4:99999999999999999999] heap",
]


def test_erf_is_a_function_of_one_argument_that_prints_back_as_written() -> None:
    """FORMAT.md 1.1's one addition, through both paths and the printer."""
    text = ("kernel gelu(x) -> y\n\nx f32 [4, 8] heap\ny f32 [4, 8] heap\n\n"
            "4 8:v y[{0},{1}] = 0.5 * x[{0},{1}] * (1 + erf(x[{0},{1}] * 0.70710677))\n")
    program = parse(text)
    ((op, _),) = walk_ops(program.body)
    call = op.value.right.right
    assert (call.func, len(call.args), call.span.col) == ("erf", 1, 44)
    assert to_text(program) == text and parse(to_text(program)) == program
    code = text.splitlines()[-1]
    assert _with_spans(parser.fast_line(code, 6, "body")) == _with_spans(_by_lark(code, 6, "body"))


def test_the_fast_path_reads_plain_lines_exactly_as_lark_does() -> None:
    # the fast path must accept only what the grammar accepts and build the same tree, spans
    # included; anything else it hands to lark (None)
    from bench.fuzz_input import mutants

    texts = [KERNELS[name].small() for name in KERNELS] + [m.text for m in mutants(300, seed=7)]
    lines = [(code, 6) for code in EDGES]
    lines += [(parser._split_comment(raw)[0], n) for text in texts for n, raw in enumerate(source_lines(text), 1)]
    fast: Counter[str] = Counter()
    for code, line in lines:
        kind = parser.classify(code)
        if (found := parser.fast_line(code, line, kind)) is None:
            continue
        if kind == "body" and (parser._too_deep(found.op) is not None or len(found.tokens) > parser.MAX_SCOPE_DEPTH):
            continue  # lark's tree would be as deep: compared by the nesting tests instead
        fast[kind] += 1
        assert _with_spans(found) == _with_spans(_by_lark(code, line, kind)), code
    assert fast["body"] > 900 and fast["decl"] > 300  # plain lines of the library and of the mutants
