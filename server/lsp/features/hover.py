"""Hover: the generated code of the node under the cursor for the configured
target (the scope whose size is under it, else the line's operation), or of
the whole kernel on the kernel line, with its measured time when known."""

from __future__ import annotations

from lsprotocol import types as lsp

from codegen import get_target, kernel_source, node_source

from ..requests import LANGUAGE_ID, snapshot_of
from ..server import DojoServer


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    async def hover(ls: DojoServer, params: lsp.HoverParams) -> lsp.Hover | None:
        snapshot = await snapshot_of(ls, params.text_document.uri)
        program = snapshot.program
        if program is None:
            return None
        line = params.position.line
        target = get_target(ls.settings.target)
        if snapshot.kind_of_line(line + 1) == "kernel":
            code, about = kernel_source(program, target), f"kernel `{program.name}`"
            measured = ls.measurements.get(program, ls.settings)
            if measured is not None:
                about += f"\n\n{measured.details()}"
        else:
            path = snapshot.node_at(line, params.position.character)
            if path is None:
                return None
            code, about = node_source(program, path, target), ""
        text = f"```{LANGUAGE_ID[target.language]}\n{code}\n```\n{target.name}" + (f" · {about}" if about else "")
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text),
                         range=lsp.Range(start=lsp.Position(line=line, character=0),
                                         end=lsp.Position(line=line + 1, character=0)))
