"""The server under load: a big document is parsed and checked off the event loop, which goes on
answering requests about the others meanwhile, and a huge one meets a stated limit."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from lsprotocol import types as lsp
from pygls.workspace import Workspace

from bench.lsp_speed import chain
from bench.parse_speed import two_hundred_lines
from dojo_ir.library import KERNELS
from server.lsp.documents import MAX_CHARS, Snapshot
from server.lsp.server import create_server


async def published(editor, uri: str, timeout_s: float = 120) -> lsp.PublishDiagnosticsParams:
    async with asyncio.timeout(timeout_s):
        while uri not in editor.published:
            await asyncio.sleep(0.01)
    return editor.published[uri]


def symbols(editor, uri: str):
    return editor.client.text_document_document_symbol_async(lsp.DocumentSymbolParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri)))


async def test_requests_about_a_small_document_are_answered_while_a_big_one_is_checked(editor, tmp_path: Path):
    known = editor.open(tmp_path / "relu.dojo", KERNELS["relu"].small())
    await published(editor, known)
    # 16,004 lines, about a second to check: the small documents are answered well before, even on a busy machine
    big = editor.open(tmp_path / "big.dojo", chain(8000))
    await asyncio.sleep(0.05)  # its analysis is under way
    assert (await symbols(editor, known))[0].name == "relu"
    new = editor.open(tmp_path / "add.dojo", KERNELS["add"].small())  # analysed beside the big one
    assert (await symbols(editor, new))[0].name == "add"
    assert big not in editor.published, "the small documents waited for the big one's check"
    assert not (await published(editor, big)).diagnostics
    assert (await symbols(editor, big))[0].name == "chain"


async def test_a_document_beyond_the_size_limit_gets_one_error_and_no_analysis(editor, tmp_path: Path):
    text = KERNELS["relu"].small() + "# padding\n" * (MAX_CHARS // 10)
    uri = editor.open(tmp_path / "huge.dojo", text)
    diagnostics = (await published(editor, uri, timeout_s=10)).diagnostics
    assert [(d.range.start.line, d.range.start.character, d.message) for d in diagnostics] == [
        (0, 0, f"the document has {len(text):,} characters; the language server analyses documents of up to "
               f"{MAX_CHARS:,}")]
    assert await asyncio.wait_for(symbols(editor, uri), 5) == []



async def test_code_actions_after_an_edit_list_legal_moves_innermost_first_until_they_have_them_all(editor,
                                                                                                   tmp_path: Path):
    uri = editor.open(tmp_path / "chain.dojo", two_hundred_lines())
    await published(editor, uri)
    lines = two_hundred_lines().splitlines()
    line = next(i for i, text in enumerate(lines) if "0.5" in text)
    lines[line] = lines[line].replace("0.5", "0.75", 1)
    editor.replace(uri, "\n".join(lines) + "\n")
    every = [str(m) for m in Snapshot(uri, 2, editor.texts[uri]).moves_at(line + 1, line + 1)]
    assert every  # else an empty answer would pass
    async with asyncio.timeout(60):
        while True:
            listed = [a.data["move"] for a in await editor.actions(uri, line)]
            assert listed == every[: len(listed)]  # each legal in the new version, innermost node first
            if len(listed) == len(every):
                break
            await asyncio.sleep(0.01)


async def test_a_document_has_one_analysis_under_way_and_a_superseded_version_is_never_analysed(monkeypatch):
    server = create_server([])
    server.protocol._workspace = Workspace(None, lsp.TextDocumentSyncKind.Full)
    started: list[int | None] = []
    release = threading.Event()
    analyse = Snapshot.analyse

    def analyse_slowly(snapshot: Snapshot) -> None:
        if not snapshot.analysed:
            started.append(snapshot.version)
        if snapshot.version == 1:
            release.wait(10)  # version 1's analysis is under way while versions 2 and 3 come
        analyse(snapshot)

    monkeypatch.setattr(Snapshot, "analyse", analyse_slowly)
    uri, text = "file:///tmp/relu.dojo", KERNELS["relu"].small()
    server.workspace.put_text_document(lsp.TextDocumentItem(uri=uri, language_id="dojo", version=1, text=text))
    waiting = [asyncio.ensure_future(server.analysed(uri))]
    await asyncio.sleep(0.05)
    for version in (2, 3):
        server.workspace.update_text_document(lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                                              lsp.TextDocumentContentChangeWholeDocument(text=f"{text}# {version}\n"))
        waiting.append(asyncio.ensure_future(server.analysed(uri)))
        await asyncio.sleep(0.05)
    assert started == [1]
    release.set()
    answers = await asyncio.wait_for(asyncio.gather(*waiting), 10)
    assert [snapshot.version for snapshot in answers] == [3, 3, 3]
    assert started == [1, 3]
