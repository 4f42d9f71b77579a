"""Formatting: the canonical printer, as edits of only the lines that change.
A text with errors is left alone (its canonical form is not defined)."""

from __future__ import annotations

from lsprotocol import types as lsp

from dojo_ir import to_text

from ..edits import line_edits
from ..server import DojoServer


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: DojoServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
        snapshot = ls.snapshot(params.text_document.uri)
        if snapshot.program is None:
            return []
        return line_edits(snapshot.text, to_text(snapshot.program), snapshot.encoding)
