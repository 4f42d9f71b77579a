"""Moves as quick-fixes: listed where their node is, resolved lazily into a
versioned edit of only the changed lines, recorded in the derivation, refused
when stale, and enough to take a kernel from its spec to a fast program."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from dojo_ir import load
from dojo_ir.analysis import Analysis
from dojo_ir.library import KERNELS
from dojo_ir.moves import KINDS, find, move_lines, parse_move
from dojo_ir.paths import same_program
from tests.lsp.fixtures import derived_file

ROOT = Path(__file__).resolve().parents[2]


def move_of(action: lsp.CodeAction) -> str:
    return action.title.split(" — ")[1]


async def test_actions_are_the_legal_moves_whose_node_covers_the_line(editor, tmp_path: Path):
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    uri = editor.open(path)
    program = load(path.read_text())
    analysis = Analysis(program)
    for line in range(len(editor.texts[uri].splitlines())):
        listed = [move_of(a) for a in await editor.actions(uri, line)]
        expected = {str(m) for m in find(program, analysis)
                    if (lines := move_lines(analysis, m)) is not None and lines[0] <= line + 1 <= lines[1]}
        assert sorted(listed) == sorted(expected), f"line {line + 1}"
    actions = await editor.actions(uri, 5)
    assert all(a.kind == lsp.CodeActionKind.QuickFix for a in actions)
    assert all(a.title == f"{KINDS[parse_move(move_of(a)).name].TITLE} — {move_of(a)}" for a in actions)


async def test_a_selection_lists_the_moves_of_every_line_it_touches(editor, tmp_path: Path):
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    uri = editor.open(path)
    lines = editor.texts[uri].splitlines()
    first, last = next(i for i, s in enumerate(lines) if s[:1].isdigit()), len(lines) - 1
    each = set()
    for line in range(first, last + 1):
        each |= {move_of(a) for a in await editor.actions(uri, line)}
    assert {move_of(a) for a in await editor.actions(uri, first, end=(last, 3))} == each
    # a selection that ends at the start of a line does not take that line
    assert ({move_of(a) for a in await editor.actions(uri, first, end=(first + 1, 0))}
            == {move_of(a) for a in await editor.actions(uri, first)})


async def test_playing_an_action_changes_only_the_changed_lines_and_records_the_move(editor, tmp_path: Path):
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    before = editor.texts[uri]
    action = next(a for a in await editor.actions(uri, before.splitlines().index(
        next(s for s in before.splitlines() if "m[{0}] = -inf" in s))) if move_of(a).startswith("join_scopes"))
    if action.edit is None:
        resolved = await editor.client.code_action_resolve_async(action)
    else:
        resolved = action
    change = resolved.edit.document_changes[0] if resolved.edit.document_changes else None
    if change is not None:
        assert change.text_document.version == editor.versions[uri]
    edits = change.edits if change is not None else resolved.edit.changes[uri]
    changed_lines = sum(e.range.end.line - e.range.start.line for e in edits)
    assert 0 < changed_lines < 6, "the edit rewrites only the lines the move changes"
    assert editor.apply(resolved.edit)
    program = load(editor.texts[uri])
    assert program.derivation.moves == (move_of(action),)
    assert await editor.diagnostics(uri) == []  # the derivation replays to the new text


async def test_a_stale_resolve_is_refused(editor, tmp_path: Path):
    path = tmp_path / "add.dojo"
    path.write_text(KERNELS["add"].small())
    uri = editor.open(path)
    line = len(editor.texts[uri].splitlines()) - 1
    action = (await editor.actions(uri, line))[0]
    editor.replace(uri, editor.texts[uri] + "# a comment\n")
    if action.edit is None:
        with pytest.raises(JsonRpcException, match="changed"):
            await editor.client.code_action_resolve_async(action)
    else:  # listed with its edit: the versioned edit is refused by the editor instead
        assert not editor.apply(action.edit) and editor.refused_edits == 1


async def test_no_actions_on_a_document_with_errors(editor, tmp_path: Path):
    path = tmp_path / "bad.dojo"
    path.write_text(KERNELS["add"].small().replace("] =", "] +=+"))
    uri = editor.open(path)
    assert await editor.diagnostics(uri)
    assert await editor.actions(uri, len(editor.texts[uri].splitlines()) - 1) == []


async def test_matmul_from_its_spec_to_a_fast_program_by_quick_fixes_only(editor, tmp_path: Path):
    """examples/matmul.dojo is about 9x faster than its spec (bench/quickfix_walk.py);
    every one of its moves is a quick-fix offered at the line of its node."""
    example = load((ROOT / "examples/matmul.dojo").read_text())
    uri = editor.open(derived_file(tmp_path, "matmul", (ROOT / "dojo_ir/library/matmul.dojo").read_text()))
    for move in example.derivation.moves:
        program = load(editor.texts[uri])
        line, _ = move_lines(Analysis(program), parse_move(move))
        action = next((a for a in await editor.actions(uri, line - 1) if move_of(a) == move), None)
        assert action is not None, f"`{move}` is not offered at line {line}"
        assert await editor.play(uri, action)
    reached = load(editor.texts[uri])
    assert same_program(reached, example)
    assert reached.derivation.moves == example.derivation.moves
    assert await editor.diagnostics(uri) == []
