"""Every error of FORMAT.md, one case per kind, with the exact text a person
reads on the command line (`FILE:LINE:COL: error: MESSAGE`)."""

from __future__ import annotations

import pytest

from dojo_ir import DojoError, check, diagnose, load, parse
from dojo_ir.library import KERNELS

DECLS = ("x f32 [4, 8] heap", "y f32 [4, 8] heap")


def kernel(*body: str, decls: tuple[str, ...] = DECLS, line: str = "kernel k(x) -> y") -> str:
    """A file: the kernel line (line 1), a blank line, the declarations (from
    line 3), a blank line and the body (from line 6 with the default two
    declarations)."""
    return "\n".join([line, "", *decls, "", *body]) + "\n"


def formatted(text: str) -> list[str]:
    _, diagnostics = diagnose(text)
    return [d.format("k.dojo") for d in diagnostics]


NON_AFFINE = "; expected integer literals, `{d}`, `+`, `-` and `*` by a literal"
VALUE_START = "`(`, `-`, a name, a number, a scope reference such as `{0}` or an integer"

ERRORS = [
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}] +* 2"),
        f"k.dojo:6:30: error: unexpected `*`; expected {VALUE_START}",
        id="syntax-unexpected-token",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = @x[{0},{1}]"),
        f"k.dojo:6:18: error: unexpected character `@`; expected {VALUE_START}",
        id="syntax-unexpected-character",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}] +"),
        "k.dojo:6:30: error: unexpected end of line; expected `(`, `-`, `inf`, a name, a number, a scope reference "
        "such as `{0}` or an integer",
        id="syntax-end-of-line",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = z[{0},{1}]"),
        "k.dojo:6:18: error: unknown array `z`; declare it before the body",
        id="unknown-array",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0}]"),
        "k.dojo:6:18: error: `x` has 2 dimensions, so it takes 2 indices, not 1",
        id="wrong-index-count",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{2}]"),
        "k.dojo:6:24: error: {2} refers to scope position 2, but this line has scope positions 0-1 only",
        id="scope-reference-out-of-range",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0}*{1},{1}]"),
        "k.dojo:6:20: error: index `{0}*{1}` is not affine: a product of two scope references is not affine"
        + NON_AFFINE,
        id="non-affine-product-of-references",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0}/2,{1}]"),
        "k.dojo:6:20: error: index `{0}/2` is not affine: division is not allowed in an index" + NON_AFFINE,
        id="non-affine-division",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0}*1.5,{1}]"),
        "k.dojo:6:24: error: index `{0}*1.5` is not affine: `1.5` is not an integer" + NON_AFFINE,
        id="non-affine-float-literal",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[abs({0}),{1}]"),
        "k.dojo:6:20: error: index `abs({0})` is not affine: the function `abs` is not allowed in an index"
        + NON_AFFINE,
        id="non-affine-function",
    ),
    pytest.param(
        kernel("| y[0,0] = 0"),
        "k.dojo:6:1: error: `|` at scope position 0 continues nothing: no line above has a scope at this position; "
        "write the scope's size here",
        id="orphan-bar-nothing-above",
    ),
    pytest.param(
        kernel("4 y[{0},0] = 0", "| | y[{0},1] = 0"),
        "k.dojo:7:3: error: `|` at scope position 1 continues line 6, which has its operation there, not a scope; "
        "write a scope size here",
        id="orphan-bar-operation-above",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}]", "4 | y[{0},{1}] = 0"),
        "k.dojo:7:3: error: `|` at scope position 1 continues the scope opened on line 6, which is not inside the "
        "scope this line has at position 0",
        id="orphan-bar-not-a-child",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}]", decls=("x f16 [4, 8] heap", DECLS[1])),
        "k.dojo:3:3: error: unknown dtype `f16`; expected f32, f64, i32 or i64",
        id="unknown-dtype",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}]", decls=("x f32 [4, 8] disk", DECLS[1])),
        "k.dojo:3:14: error: unknown location `disk`; expected heap, stack or shared",
        id="unknown-location",
    ),
    pytest.param(
        kernel("4:q 8 y[{0},{1}] = x[{0},{1}]"),
        "k.dojo:6:1: error: unknown scope suffix `:q`; expected u (unroll), p (parallel), v (vectorize), g (GPU grid), "
        "b (GPU block) or w (GPU warp)",
        id="unknown-scope-suffix",
    ),
    pytest.param(
        kernel("4 0 y[{0},0] = 1"),
        "k.dojo:6:3: error: scope size 0: a scope runs at least one iteration",
        id="scope-size-zero",
    ),
    pytest.param(
        kernel("4 t[{0}] = 1", decls=(*DECLS, "t f32 [4:4] stack")),
        "k.dojo:5:8: error: `4:4`: the stored extent K of `D:K` must satisfy 1 <= K < 4",
        id="bad-d-k",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}]", decls=(DECLS[0], "y f32 [4, 8:1] heap")),
        "k.dojo:4:11: error: `y` is a kernel input or output and is always stored whole: `8:1` (`D:K`) is not "
        "allowed on its buffer",
        id="d-k-on-output",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0},{1}]", decls=("xt f32 [4, 8] heap -> x, t", DECLS[1])),
        "k.dojo:3:1: error: buffer `xt` holds the input `x`, so it holds only that input",
        id="buffer-holding-an-input-and-another-array",
    ),
    pytest.param(
        kernel("4 8 x[{0},{1}] = 1"),
        "k.dojo:6:5: error: `x` is an input of the kernel and is read-only; write to an output or a temporary",
        id="write-to-input",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[i[{0}],{1}]", decls=(*DECLS, "i i32 [4] heap"), line="kernel k(x, i) -> y"),
        "k.dojo:7:20: error: indirection `i[{0}]` inside an index is not supported (Table 2): indices are affine in "
        "scope references",
        id="indirection",
    ),
    pytest.param(
        kernel("4 M[{0}] y[{0},{1}] = x[{0},{1}]", decls=(*DECLS, "M i32 [4] heap"), line="kernel k(x, M) -> y"),
        "k.dojo:7:3: error: data-dependent range `M[...]` is not supported (Table 2): a scope size is an integer "
        "literal",
        id="data-dependent-range",
    ),
    pytest.param(
        kernel("N 8 y[{0},{1}] = x[{0},{1}]"),
        "k.dojo:6:1: error: scope sizes are integer literals, not names: `N` is not a size (kernels are tuned per "
        "shape)",
        id="symbolic-size",
    ),
    pytest.param(
        # Table 2's `N z[{0}]=z[{0}-1]*y[{0}]`, with an integer size and the shift kept in bounds
        kernel("z[0] = y[0]", "7 z[{0}+1]=z[{0}]*y[{0}+1]", decls=("y f32 [8] heap", "z f32 [8] heap"),
               line="kernel k(y) -> z"),
        "k.dojo:7:12: error: dependent iteration (Table 2): `z[{0}]` reads an element that an earlier iteration of "
        "the scope on line 7 wrote (`z[{0}+1]` on line 7), and this iteration does not write it first; only a "
        "reduction's accumulator (`+=`, `*=`, `max=`, `min=`) may carry values from one iteration to the next",
        id="dependent-iteration",
    ),
    pytest.param(
        kernel("while (y[0,0] < 1)"),
        "k.dojo:6:1: error: general control flow (`while`) is not supported (Table 2): a body line is scope sizes "
        "followed by one operation",
        id="general-control-flow",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x[{0}+1,{1}]"),
        "k.dojo:6:20: error: index `{0}+1` of `x` can reach 4, outside dimension 0 of extent 4 (0 to 3)",
        id="index-out-of-bounds",
    ),
    pytest.param(
        kernel("8 y[0,{0}] = x[0,7-{0}-1]"),
        "k.dojo:6:18: error: index `7-{0}-1` of `x` can reach -1, outside dimension 1 of extent 8 (0 to 7)",
        id="index-out-of-bounds-below-zero",
    ),
    pytest.param(
        kernel("4 y[{0}] = x[{0}] * 0.5", decls=("x i32 [4] heap", "y i32 [4] heap")),
        "k.dojo:6:21: error: `0.5` is not an integer, and this operation computes in `i32` (the dtype of `y`)",
        id="integer-op-with-float-literal",
    ),
    pytest.param(
        kernel("4 y[{0}] = exp(x[{0}])", decls=("x i32 [4] heap", "y i32 [4] heap")),
        "k.dojo:6:12: error: `exp` needs a floating-point operation, and this one computes in `i32` (the dtype of "
        "`y`)",
        id="integer-op-with-exp",
    ),
    pytest.param(
        kernel("4 y[{0}] = x[{0}] + erf(x[{0}] * 2)", decls=("x i64 [4] heap", "y i64 [4] heap")),
        "k.dojo:6:21: error: `erf` needs a floating-point operation, and this one computes in `i64` (the dtype of "
        "`y`)",
        id="integer-op-with-erf",
    ),
    pytest.param(
        kernel("4:g t[{0}] = 1", decls=(*DECLS, "t f32 [4] shared")),
        "k.dojo:7:5: error: `t` is in `shared` memory, so every access to it lies inside a `:b` (GPU block) scope",
        id="shared-buffer-outside-block",
    ),
    pytest.param(
        kernel(decls=(*DECLS, "exp f32 [4] heap")),
        "k.dojo:5:1: error: `exp` is a keyword and cannot name a buffer or an array",
        id="keyword-as-buffer-name",
    ),
    pytest.param(
        kernel(line="kernel inf(x) -> y"),
        "k.dojo:1:1: error: `inf` is a keyword and cannot name the kernel",
        id="keyword-as-kernel-name",
    ),
    pytest.param(
        kernel(decls=(*DECLS, "y f64 [4] heap")),
        "k.dojo:5:1: error: buffer `y` is declared twice",
        id="duplicate-buffer",
    ),
    pytest.param(
        kernel(decls=(*DECLS, "t f32 [4, 8] heap -> y")),
        "k.dojo:5:1: error: array `y` already lives in buffer `y`",
        id="duplicate-array",
    ),
    pytest.param(
        "x f32 [4, 8] heap\n",
        "k.dojo:1:1: error: expected a kernel line `kernel NAME(INPUTS) -> OUTPUTS` first",
        id="missing-kernel-line",
    ),
    pytest.param(
        kernel(line="kernel k(x)"),
        "k.dojo:1:1: error: a kernel has at least one output: write `-> NAME` after the inputs",
        id="no-outputs",
    ),
    pytest.param(
        kernel(line="kernel k(x) -> x", decls=DECLS[:1]),
        "k.dojo:1:16: error: `x` is both an input and an output; inputs are read-only, so write the result to "
        "another array",
        id="array-both-input-and-output",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = x"),
        "k.dojo:6:18: error: `x` is not a value: write `x[...]`",
        id="bare-name-as-value",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = sigmoid(x[{0},{1}])"),
        "k.dojo:6:18: error: unknown function `sigmoid`; expected exp, log, sqrt, abs, tanh, erf, max or min",
        id="unknown-function",
    ),
    pytest.param(
        kernel("4 8 y[{0},{1}] = max(x[{0},{1}])"),
        "k.dojo:6:18: error: `max` takes 2 arguments, not 1",
        id="wrong-arity",
    ),
]


@pytest.mark.parametrize("text, expected", ERRORS)
def test_each_error_is_reported_once_with_its_position_and_message(text: str, expected: str) -> None:
    assert formatted(text) == [expected]
    with pytest.raises(DojoError) as raised:
        load(text)
    assert raised.value.format("k.dojo") == expected


def test_every_error_points_at_a_non_empty_range_on_its_line() -> None:
    for case in ERRORS:
        text = case.values[0]
        lines = text.splitlines()
        for diagnostic in diagnose(text)[1]:
            span = diagnostic.span
            assert 1 <= span.line <= len(lines), case.id
            assert 1 <= span.col < span.end_col <= len(lines[span.line - 1]) + 2, (case.id, span)


# -- known bugs, each with the error that FORMAT.md asks for -----------------------------------


def test_control_flow_is_named_even_when_the_line_looks_like_a_declaration() -> None:
    """`while y[0,0] < 1` has no `=`, so it looks like `NAME NAME [`; it must
    still be rejected as control flow, pointing at `while`."""
    assert formatted(kernel("while y[0,0] < 1")) == [
        "k.dojo:6:1: error: general control flow (`while`) is not supported (Table 2): a body line is scope sizes "
        "followed by one operation"
    ]


def test_a_scope_of_size_zero_is_reported_without_follow_on_bounds_errors() -> None:
    """A scope of size 0 runs no iteration, so `{0}` inside it cannot reach -1."""
    assert formatted(kernel("0 y[{0},0] = 1")) == [
        "k.dojo:6:1: error: scope size 0: a scope runs at least one iteration"
    ]


def test_missing_kernel_line_is_reported_at_the_first_line_with_a_visible_range() -> None:
    text = "x f32 [4, 8] heap\ny f32 [4, 8] heap\n\n4 8 y[{0},{1}] = x[{0},{1}]\n"
    (diagnostic,) = diagnose(text)[1]
    assert diagnostic.format("k.dojo") == (
        "k.dojo:1:1: error: expected a kernel line `kernel NAME(INPUTS) -> OUTPUTS` first"
    )
    assert diagnostic.span.end_col > diagnostic.span.col


# -- many errors at once -------------------------------------------------------------------------


def test_a_file_with_five_different_errors_reports_all_five_in_order() -> None:
    text = kernel(
        "4 8 y[{0},{1}] = x[{0},{1}] +",  # 6: syntax
        "4 8 y[{0},{1}] = q[{0},{1}]",  # 7: unknown array
        "4:z 8 y[{0},{1}] = x[{0},{1}]",  # 8: scope suffix
        "4 8 y[{0},{1}] = x[{0}+1,{1}]",  # 9: out of bounds
        decls=("x f32 [4, 8] heap", "y f32 [4, 8] dram"),  # 4: location
    )
    _, diagnostics = diagnose(text)
    assert [(d.span.line, d.rule) for d in diagnostics] == [
        (4, "unknown-location"),
        (6, "syntax"),
        (7, "unknown-array"),
        (8, "scope-suffix"),
        (9, "out-of-bounds"),
    ]


def test_load_raises_a_dojo_error_with_diagnostics_sorted_by_position() -> None:
    text = kernel(
        "4 8 y[{0},{1}] = sigmoid(x[{0},{1}]) + z[{0},{1}]",
        "4 8 y[{0},{1}] = x[{0},{1}] $",
        "4 8 x[{0},{1}] = x[{0},{1}*2]",
        decls=("x f32 [4, 8] heap", "y f16 [4, 8] heap"),
    )
    with pytest.raises(DojoError) as raised:
        load(text)
    positions = [(d.span.line, d.span.col) for d in raised.value.diagnostics]
    assert positions == sorted(positions)
    assert len(positions) == 6
    assert {d.rule for d in raised.value.diagnostics} == {
        "unknown-dtype", "unknown-function", "unknown-array", "syntax", "write-to-input", "out-of-bounds",
    }  # fmt: skip
    assert str(raised.value) == "4:3: unknown dtype `f16`; expected f32, f64, i32 or i64"


def test_an_array_whose_declaration_did_not_parse_is_not_reported_again_as_unknown() -> None:
    text = kernel("4 8 y[{0},{1}] = x[{0},{1}]", decls=("x f32 [4,, 8] heap", "y f32 [4, 8] heap"))
    assert [d.rule for d in diagnose(text)[1]] == ["syntax"]


def test_an_undeclared_array_is_reported_even_if_a_bad_line_also_mentions_it() -> None:
    """Only an array whose own declaration failed to parse is spared a second
    report; `q` here is declared nowhere."""
    text = kernel("4 8 y[{0},{1}] = q[{0},{1}] +", "4 8 y[{0},{1}] = q[{0},{1}]")
    assert [(d.span.line, d.rule) for d in diagnose(text)[1]] == [(6, "syntax"), (7, "unknown-array")]


# -- what is not an error -------------------------------------------------------------------------


@pytest.mark.parametrize("name", KERNELS)
def test_library_kernels_are_valid(name: str) -> None:
    assert check(parse(KERNELS[name].text())) == []
    assert check(parse(KERNELS[name].small())) == []


FUSED_SOFTMAX = """\
kernel softmax(x) -> y

x f32 [24576, 512] heap
y f32 [24576, 512] heap
m f32 [24576] heap
e f32 [24576, 512] heap
s f32 [24576] heap

24576 m[{0}] = -inf
|     512 m[{0}] max= x[{0},{1}]
|     512 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
|     s[{0}] = 0
|     512 s[{0}] += e[{0},{1}]
|     512 y[{0},{1}] = e[{0},{1}] / s[{0}]
"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            kernel("4 y[{0},0] = 0", "| 8 y[{0},0] += x[{0},{1}]"),
            id="init-then-sum-in-one-fused-scope",
        ),
        pytest.param(
            kernel("4 m[{0}] = -inf", "| 8 m[{0}] max= x[{0},{1}]", "| 8 y[{0},{1}] = x[{0},{1}] - m[{0}]",
                   decls=(*DECLS, "m f32 [4] stack")),
            id="max-accumulator-then-use",
        ),
        pytest.param(
            kernel("y[0,0] = 1", "4 8 y[0,0] *= x[{0},{1}]", "4 y[{0},1] = 0", "| 8 y[{0},1] min= x[{0},{1}]"),
            id="product-and-min-accumulators",
        ),
        pytest.param(
            kernel(
                "s[] = 0", "4 8 s[] += x[{0},{1}]", "4 8 y[{0},{1}] = x[{0},{1}] / s[]", decls=(*DECLS, "s f32 [] heap")
            ),
            id="scalar-accumulator",
        ),
        pytest.param(FUSED_SOFTMAX, id="fused-softmax-of-format-md"),
        pytest.param(
            kernel("8 y[0,{0}] = x[0,{0}]", "8 y[1,{0}] = y[0,7-{0}]"),
            id="reading-a-row-finished-by-an-earlier-scope",
        ),
    ],
)
def test_reductions_and_fused_scopes_are_not_dependent_iteration(text: str) -> None:
    assert formatted(text) == []


def test_a_temporary_rewritten_before_every_read_is_not_dependent_iteration() -> None:
    """Every read of `t` sees the value its own iteration wrote, so no value
    flows from one iteration to the next."""
    text = kernel("4 t[] = x[{0},0]", "| y[{0},0] = t[] * 2", decls=(*DECLS, "t f32 [] stack"))
    assert formatted(text) == []


def test_mixing_reduction_operators_on_one_accumulator_is_dependent_iteration() -> None:
    text = kernel("4 y[{0},0] = 0", "| 8 y[{0},0] += x[{0},{1}]", "| | y[{0},0] max= x[{0},{1}]")
    # each accumulator is fed by the other operator in earlier iterations of the `8` scope
    assert [(d.span.line, d.span.col, d.rule) for d in diagnose(text)[1]] == [
        (7, 5, "dependent-iteration"),
        (8, 5, "dependent-iteration"),
    ]


def test_reading_an_accumulator_outside_a_reduction_inside_its_scope_is_dependent_iteration() -> None:
    # FORMAT.md: `s[] = s[] + x[{0}]` must be written `s[] += x[{0}]`
    text = kernel("s[] = 0", "4 s[] = s[] + x[{0},0]", decls=(*DECLS, "s f32 [] heap"))
    assert formatted(text) == [
        "k.dojo:8:9: error: dependent iteration (Table 2): `s[]` reads an element that an earlier iteration of the "
        "scope on line 8 wrote (`s[]` on line 8), and this iteration does not write it first; only a reduction's "
        "accumulator (`+=`, `*=`, `max=`, `min=`) may carry values from one iteration to the next"
    ]


def test_arrays_sharing_a_buffer_share_its_storage_in_dependences() -> None:
    # `a` and `b` are one buffer: writing b[{0}+1] feeds a later iteration's read of a[{0}]
    decls = (*DECLS, "t f32 [5] stack -> a, b")
    text = kernel("a[0] = 0", "4 b[{0}+1] = a[{0}] + 1", decls=decls)
    assert [d.rule for d in diagnose(text)[1]] == ["dependent-iteration"]


def test_shared_buffer_inside_a_block_scope_is_accepted() -> None:
    decls = (*DECLS, "t f32 [4, 8] shared")
    text = kernel("4:g 8:b t[{0},{1}] = x[{0},{1}]", "|   |   y[{0},{1}] = t[{0},{1}]", decls=decls)
    assert formatted(text) == []
