"""Diagnostics, hover, inlay hints, symbols, formatting and settings, end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types as lsp

from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.printer import expr_text
from dojo_ir.tree import walk_ops
from tests.lsp.fixtures import derived_file

BROKEN = "kernel k(x) -> y\nx f32 [4] heap\ny f32 [4] heap\n4 y[{0}] = x[{0}] +\n"


async def test_diagnostics_follow_the_edits_with_their_version(editor, tmp_path: Path):
    path = tmp_path / "k.dojo"
    path.write_text(BROKEN)
    uri = editor.open(path)
    [found] = await editor.diagnostics(uri)
    assert (found.range.start.line, found.range.start.character) == (3, 19)
    assert found.severity == lsp.DiagnosticSeverity.Error and found.source == "dojo" and found.code == "syntax"
    assert "expected" in found.message
    editor.replace(uri, BROKEN.replace("+\n", "+ 1\n"))
    assert await editor.diagnostics(uri) == []
    editor.replace(uri, BROKEN.replace("x[{0}] +", "q[{0}]"))
    [unknown] = await editor.diagnostics(uri)
    assert "`q`" in unknown.message and unknown.range.start.line == 3


async def test_columns_count_in_the_negotiated_position_encoding(editor, tmp_path: Path):
    path = tmp_path / "k.dojo"
    path.write_text(BROKEN.replace("x[{0}] +", "λx"))
    uri = editor.open(path)
    [found] = await editor.diagnostics(uri)
    encoding = editor.client.initialize_result.capabilities.position_encoding or "utf-16"
    assert found.range.start.line == 3
    assert found.range.start.character == len("4 y[{0}] = ")
    width_of_lambda = {"utf-8": 2, "utf-16": 1, "utf-32": 1}[encoding]  # λ is 2 bytes, 1 UTF-16 unit
    assert found.range.end.character - found.range.start.character == width_of_lambda


async def test_a_derivation_that_does_not_replay_is_reported_at_its_line(editor, tmp_path: Path):
    path = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    text = path.read_text().replace("\nx f32", "\nmove swap_scopes(op=y, depth=7)\n\nx f32", 1)
    path.write_text(text)
    uri = editor.open(path)
    [found] = await editor.diagnostics(uri)
    assert "move 1 `swap_scopes(op=y, depth=7)` does not apply" in found.message
    assert editor.texts[uri].splitlines()[found.range.start.line].startswith("move swap_scopes")
    editor.replace(uri, text.replace("depth=7", "depth=0"))  # as it is typed, not only on save
    [changed] = await editor.diagnostics(uri)
    assert "depth=0" in changed.message or "the derivation gives" in changed.message
    (tmp_path / "softmax.spec.dojo").unlink()
    editor.replace(uri, text.replace("move swap_scopes(op=y, depth=7)\n", ""))
    [missing] = await editor.diagnostics(uri)
    assert missing.severity == lsp.DiagnosticSeverity.Warning and "cannot read the spec" in missing.message


async def test_hover_shows_the_code_of_the_node_under_the_cursor(editor, tmp_path: Path):
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    uri = editor.open(path)
    lines = editor.texts[uri].splitlines()

    async def hover(line: int, character: int) -> str | None:
        found = await editor.client.text_document_hover_async(lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line, character=character)))
        return None if found is None else found.contents.value

    kernel = await hover(next(i for i, s in enumerate(lines) if s.startswith("kernel")), 3)
    assert kernel.startswith(f"{lines[0].removeprefix('# ')}\n\n```c\nstatic void kernel(") and "native" in kernel
    body = next(i for i, s in enumerate(lines) if s[:1].isdigit() and len(s.split()) > 3)
    scope = await hover(body, 0)
    assert scope.startswith("```c\nfor (long i0 = 0;")
    op = await hover(body, len(lines[body]) - 2)
    assert op.startswith("```c\n") and "for (" not in op.split("```")[1]
    assert await hover(next(i for i, s in enumerate(lines) if " f32 " in s), 1) is None
    editor.client.set_configuration({"dojo": {"target": "cuda", "measure": {"automatic": False}}})
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    for _ in range(100):
        if (cuda := await hover(body, 0)).startswith("```cuda"):
            break
        await asyncio.sleep(0.02)
    assert cuda.startswith("```cuda") and "cuda" in cuda


async def test_hover_on_the_kernel_line_shows_the_comment_above_it(editor, tmp_path: Path):
    path = tmp_path / "relu.dojo"
    path.write_text('# A comment further up.\n\n# From encoder.onnx, node "/ffn/Relu" (Relu).\n# Second line.\n'
                    + KERNELS["relu"].small().split("\n", 1)[1])  # without its own comment
    uri = editor.open(path)
    line = next(i for i, s in enumerate(editor.texts[uri].splitlines()) if s.startswith("kernel"))
    found = await editor.client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line, character=3)))
    heading, code = found.contents.value.split("\n\n```c\n", 1)
    assert heading == 'From encoder.onnx, node "/ffn/Relu" (Relu).  \nSecond line.'
    assert code.startswith("static void kernel(")


async def test_inlay_hint_shows_the_measured_time_when_it_arrives(editor, tmp_path: Path):
    path = tmp_path / "relu.dojo"
    path.write_text(KERNELS["relu"].small())
    uri = editor.open(path)
    editor.client.set_configuration({"dojo": {"repetitions": 3, "measure": {"automatic": True}}})
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(0.2)

    async def hints() -> list[str]:
        found = await editor.client.text_document_inlay_hint_async(lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=99, character=0))))
        return [h.label for h in found or []]

    assert await hints() == ["⏱ measuring…"]  # asking starts the measurement and does not wait for it
    for _ in range(600):
        labels = await hints()
        if labels and "measuring" not in labels[0]:
            break
        await asyncio.sleep(0.05)
    assert labels[0].startswith("⏱ ") and labels[0].split()[2] in ("s", "ms", "µs", "ns"), labels
    refresh = editor.client.capabilities.workspace.inlay_hint
    if refresh and refresh.refresh_support:
        assert editor.inlay_refreshes >= 1


async def test_symbols_are_the_kernel_its_buffers_and_its_scope_tree(editor, tmp_path: Path):
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    uri = editor.open(path)
    [kernel] = await editor.client.text_document_document_symbol_async(lsp.DocumentSymbolParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert kernel.name == "softmax" and kernel.kind == lsp.SymbolKind.Function and kernel.detail == "(x) -> y"
    buffers = [c.name for c in kernel.children if c.kind == lsp.SymbolKind.Variable]
    assert buffers[:1] == ["x"] and "y" in buffers
    scopes = [c for c in kernel.children if c.kind == lsp.SymbolKind.Namespace]
    program = load(editor.texts[uri])
    assert [s.name for s in scopes] == [str(node.size) for node in program.body]

    def leaves(symbol: lsp.DocumentSymbol) -> list[str]:
        return [symbol.name] if not symbol.children else [name for c in symbol.children for name in leaves(c)]

    assert [name for s in scopes for name in leaves(s)] == [
        f"{expr_text(op.target)} {op.assign} {expr_text(op.value)}" for op, _ in walk_ops(program.body)]


async def test_formatting_rewrites_only_the_lines_not_in_canonical_form(editor, tmp_path: Path):
    canonical = KERNELS["add"].small()
    messy = canonical.replace("] = ", "]   =   ", 1)
    path = tmp_path / "add.dojo"
    path.write_text(messy)
    uri = editor.open(path)
    edits = await editor.client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), options=lsp.FormattingOptions(tab_size=4,
                                                                                         insert_spaces=True)))
    assert len(edits) == 1 and edits[0].range.end.line - edits[0].range.start.line == 1
    editor.edit(uri, edits)
    assert editor.texts[uri] == to_text(load(canonical))
