"""Edits change exactly the lines that change."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from server.lsp.edits import line_edits, lines_of
from tests.lsp.editor import apply_text_edits

line = st.text(alphabet=st.sampled_from("ab λ😀\t#"), max_size=6)
ending = st.sampled_from(["\n", "\r\n", "\r"])
text = st.lists(st.tuples(line, ending), max_size=12).map(lambda ls: "".join(a + b for a, b in ls)) | st.text(
    alphabet=st.sampled_from("ab\n\r λ"), max_size=30)


@given(text, text)
def test_the_edits_turn_the_old_text_into_the_new(old, new):
    assert apply_text_edits(old, line_edits(old, new)) == new


@given(text, text)
def test_the_edits_touch_only_changed_lines_in_order(old, new):
    edits = line_edits(old, new)
    starts = [(e.range.start.line, e.range.start.character) for e in edits]
    assert starts == sorted(starts)
    for first, second in zip(edits, edits[1:], strict=False):
        assert (first.range.end.line, first.range.end.character) < (second.range.start.line,
                                                                     second.range.start.character)
    kept = set(range(len(lines_of(old)))) - {n for e in edits for n in range(e.range.start.line, e.range.end.line)}
    assert len(kept) >= len(lines_of(old)) - sum(e.range.end.line - e.range.start.line + 1 for e in edits)


def test_one_changed_line_is_one_edit_of_one_line():
    [edit] = line_edits("a\nb\nc\n", "a\nB\nc\n")
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.line, edit.range.end.character) == (
        1, 0, 2, 0)
    assert edit.new_text == "B\n"


def test_equal_texts_need_no_edit():
    assert line_edits("a\nb", "a\nb") == []


def test_lines_end_only_at_lsp_line_ends():
    assert lines_of("a\u2028b\x0cc\r\nd\re") == ["a\u2028b\x0cc\r\n", "d\r", "e"]
