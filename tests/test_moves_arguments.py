"""A move's arguments against its declaration (each move module's `ARGS`): unknown, repeated,
empty, missing and malformed arguments are errors positioned in the move's text, and the
arguments come out in the declared order whatever order they were written in. Also: the IR's
users (code generation, the runner) do without the moves, and docs/moves.md is up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dojo_ir import load
from dojo_ir.moves import KINDS, IllegalMove, apply, find, parse_move, why_not
from dojo_ir.moves.__main__ import catalogue
from dojo_ir.moves.split_scope import EXAMPLES as SPLIT_EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
SPLIT = load(SPLIT_EXAMPLES[0][0])  # `8 3 y[{0},{1}] = x[{0},{1}] * {0}`
PADDED = """kernel k(x) -> y

x f32 [5] heap
y f32 [5] heap
t f32 [5] heap

5 t[{0}] = exp(x[{0}])
5 y[{0}] = t[{0}] + 1
"""


def rejection(text: str) -> tuple[int, int, str]:
    """Where parse_move rejects `text` (first and last column, 1-based, last exclusive) and why."""
    with pytest.raises(IllegalMove) as caught:
        parse_move(text)
    diagnostic = caught.value.diagnostics[0]
    assert diagnostic.span.line == diagnostic.span.end_line == 1
    return diagnostic.span.col, diagnostic.span.end_col, diagnostic.message


def test_an_unknown_argument_is_rejected_where_it_stands() -> None:
    # Before: `bogus=1` was carried along and the move answered legal.
    text = "split_scope(op=y, depth=0, factor=4, bogus=1)"
    col, end, message = rejection(text)
    assert text[col - 1:end - 1] == "bogus"
    assert "no argument `bogus`" in message and "op, depth, factor" in message
    assert why_not(SPLIT, text) is not None
    with pytest.raises(IllegalMove):
        apply(SPLIT, text)


def test_a_repeated_argument_is_rejected_at_its_second_use() -> None:
    text = "join_scopes(op=m#1, op=m#2)"
    col, end, message = rejection(text)
    assert col == text.index("op=m#2") + 1 and text[col - 1:end - 1] == "op"
    assert "`op` is given twice" in message


@pytest.mark.parametrize("text, empty_at", [
    ("join_scopes(op=m#1,, depth=0)", len("join_scopes(op=m#1,") + 1),
    ("join_scopes(op=m#1, depth=0,)", len("join_scopes(op=m#1, depth=0,") + 1),
    ("join_scopes(, op=m#1, depth=0)", len("join_scopes(") + 1),
])
def test_an_empty_argument_is_rejected(text: str, empty_at: int) -> None:
    col, _, message = rejection(text)
    assert col == empty_at
    assert "empty argument" in message


def test_a_missing_argument_is_named() -> None:
    text = "split_scope(op=y, depth=0)"
    col, _, message = rejection(text)
    assert col == text.index(")") + 1
    assert "needs the argument `factor`" in message


@pytest.mark.parametrize("text, bad, expected", [
    ("split_scope(op=y, depth=first, factor=4)", "first", "depth"),
    ("split_scope(op=y#x, depth=0, factor=4)", "y#x", "operation"),
    ("set_location(buffer=t, location=disk)", "disk", "heap, stack or shared"),
    ("map_gpu(op=y, depth=0, kind=v)", "v", "g, b or w"),
    ("split_scope(op=y, depth=0, factor=1)", "1", "2 or more"),
    ("pad_dim(buffer=t#2, dim=0, size=8)", "t#2", "buffer"),
    ("split_scope(op=y, depth=0, factor)", "factor", "`key=value`"),
])
def test_a_value_of_the_wrong_kind_or_range_is_rejected_where_it_stands(text: str, bad: str, expected: str) -> None:
    col, end, message = rejection(text)
    assert text[col - 1:end - 1] == bad
    assert expected in message


@pytest.mark.parametrize("digits", [25, 4300, 100_000])
def test_a_huge_integer_is_out_of_range_not_a_crash(digits: int) -> None:
    # Before: 25 digits were accepted as a pad size, and 4,300 or more raised ValueError (Python's
    # limit on converting long digit strings).
    size = "9" * digits
    text = f"pad_dim(buffer=t, dim=0, size={size})"
    col, end, message = rejection(text)
    assert (col, end) == (text.index(size) + 1, text.index(size) + 1 + digits)
    assert "out of range" in message and len(message) < 200
    assert why_not(load(PADDED), text) is not None


def test_an_unknown_move_is_rejected_at_its_name() -> None:
    col, end, message = rejection("  fuse(op=e, depth=0)")
    assert (col, end) == (3, 7)
    assert "unknown move `fuse`" in message


def test_arguments_come_out_in_the_declared_order() -> None:
    # Before: the written order was kept, so this applied but differed from the listed move.
    shuffled = parse_move("split_scope(depth=0, factor=4, op=y)")
    assert shuffled == parse_move("split_scope(op=y, depth=0, factor=4)")
    assert str(shuffled) == "split_scope(op=y, depth=0, factor=4)"
    assert shuffled in find(SPLIT)


def test_an_optional_argument_may_be_left_out() -> None:
    assert str(parse_move("swap_ops(op=e)")) == "swap_ops(op=e)"
    assert str(parse_move("swap_ops(depth=1, op=e)")) == "swap_ops(op=e, depth=1)"


def test_every_move_declares_its_arguments_and_lists_them_so() -> None:
    from dojo_ir.library import KERNELS

    for name, kind in KINDS.items():
        assert kind.ARGS and len({p.key for p in kind.ARGS}) == len(kind.ARGS), name
    for kernel in ("softmax", "matmul", "layernorm1"):
        for move in find(load(KERNELS[kernel].small())):
            assert parse_move(str(move)) == move and parse_move(str(move)).args == move.args, move


def test_a_hand_built_move_is_checked_too() -> None:
    from dojo_ir.moves import Move

    with pytest.raises(IllegalMove, match="no argument `bogus`"):
        apply(SPLIT, Move("split_scope", (("op", "y"), ("depth", 0), ("factor", 4), ("bogus", 1))))
    assert why_not(SPLIT, Move("split_scope", (("depth", 0), ("op", "y"), ("factor", 4)))) is not None


@pytest.mark.parametrize("module", ["codegen.c", "codegen.gpu", "runner.local"])
def test_generating_code_and_running_do_not_load_the_moves(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('dojo_ir.moves')))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert found.stdout.strip() == "[]"


def test_docs_moves_md_is_generated_from_the_move_modules() -> None:
    written = (ROOT / "docs" / "moves.md").read_text(encoding="utf-8")
    assert written == catalogue(), "docs/moves.md is stale: run `python -m dojo_ir.moves > docs/moves.md`"


def _broken_why_not(a, move):
    raise ZeroDivisionError("a bug in a move")


def test_a_bug_in_a_move_surfaces_in_the_passes_and_the_replay(monkeypatch) -> None:
    # Before: `except Exception` took the bug for an illegal move and skipped it silently.
    from agent.evaluate import replay_moves
    from agent.passes.state import State as _State

    monkeypatch.setattr(KINDS["split_scope"], "why_not", _broken_why_not)
    with pytest.raises(ZeroDivisionError):
        _State(SPLIT).legal("split_scope(op=y, depth=0, factor=4)")
    with pytest.raises(ZeroDivisionError):
        replay_moves(SPLIT, ["split_scope(op=y, depth=0, factor=4)"])


def test_the_passes_and_the_replay_skip_a_malformed_or_stale_move() -> None:
    from agent.evaluate import replay_moves
    from agent.passes.state import State as _State

    for move in ("split_scope(op=y, depth=0, factor=4, bogus=1)", "split_scope(op=q, depth=0, factor=4)",
                 "split_scope(op=y, depth=0, factor=" + "9" * 5000 + ")", "fuse()"):
        assert not _State(SPLIT).legal(move)
        assert replay_moves(SPLIT, [move]) == (SPLIT, [])


def test_a_hand_built_move_with_a_huge_integer_is_refused_not_a_crash() -> None:
    from dojo_ir.moves import Move

    huge = 10**5000  # printing it raises ValueError
    for value in (huge, 0, "4", "y"):
        assert why_not(SPLIT, Move("split_scope", (("op", "y"), ("depth", 0), ("factor", value)))) is not None
