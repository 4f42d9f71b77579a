"""Inlay hint: the kernel's measured median time at the end of its kernel line
(and its multiple of the roofline bound, where this machine's limits have been
measured). Asking for hints never waits for a measurement: it starts one in
the background when automatic measuring is on, shows that it is measuring, and
the client is asked to refresh its hints when the time arrives."""

from __future__ import annotations

from lsprotocol import types as lsp

from ..requests import snapshot_of
from ..server import DojoServer


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT, lsp.InlayHintOptions(resolve_provider=False))
    async def inlay_hints(ls: DojoServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
        snapshot = await snapshot_of(ls, params.text_document.uri)
        program = snapshot.program
        if program is None or program.span is None:
            return []
        line = program.span.line - 1
        if not params.range.start.line <= line <= params.range.end.line:
            return []
        measured = ls.measurements.get(program, ls.settings)
        if measured is None and ls.settings.measure_automatically:  # the spec is read from disk only then
            measured = ls.measurements.request(snapshot.uri, program, snapshot.spec, ls.settings)
        if measured is None:
            return []
        end = snapshot.position(line + 1, len(snapshot.lines[line]) + 1)
        return [lsp.InlayHint(position=end, label=f"⏱ {measured.summary()}", padding_left=True,
                              tooltip=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=measured.details()))]
