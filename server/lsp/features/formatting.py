"""Formatting: the canonical printer, as edits of only the lines that change.
A text with errors is left alone (its canonical form is not defined)."""

from __future__ import annotations

from lsprotocol import types as lsp

from dojo_ir import to_text

from ..edits import line_edits
from ..requests import snapshot_of
from ..server import DojoServer


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    async def formatting(ls: DojoServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
        snapshot = await snapshot_of(ls, params.text_document.uri)
        if snapshot.program is None:
            return []
        return await ls.off_loop(lambda: line_edits(snapshot.text, to_text(snapshot.program), snapshot.encoding),
                                 f"formatting {snapshot.name}")
