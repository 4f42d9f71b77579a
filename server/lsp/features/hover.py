"""Hover: the generated code of the node under the cursor for the configured
target (the scope whose size is under it, else the line's operation), or of
the whole kernel on the kernel line, with its measured time when known and the
comment lines right above it (an imported kernel's "From MODEL, node ..." line)."""

from __future__ import annotations

from collections.abc import Sequence

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
        heading = ""
        if snapshot.kind_of_line(line + 1) == "kernel":
            code, about = kernel_source(program, target), f"kernel `{program.name}`"
            heading = comment_above(snapshot.lines, line)
            measured = ls.measurements.get(program, ls.settings)
            if measured is not None:
                about += f"\n\n{measured.details()}"
        else:
            path = snapshot.node_at(line, params.position.character)
            if path is None:
                return None
            code, about = node_source(program, path, target), ""
        text = (f"{heading}\n\n" if heading else "") + f"```{LANGUAGE_ID[target.language]}\n{code}\n```\n" \
            f"{target.name}" + (f" · {about}" if about else "")
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text),
                         range=lsp.Range(start=lsp.Position(line=line, character=0),
                                         end=lsp.Position(line=line + 1, character=0)))


def comment_above(lines: Sequence[str], line: int) -> str:
    """The comment lines directly above 0-based `line`, without their `#`, as Markdown lines."""
    start = line
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return "  \n".join(text.lstrip().removeprefix("#").strip() for text in lines[start:line])
