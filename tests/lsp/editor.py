"""A scripted editor around pytest-lsp's client: it keeps each open document's
text and version as a real editor does, sends changes, and applies the
server's `workspace/applyEdit` only to the version it names."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from server.lsp.edits import lines_of


def apply_text_edits(text: str, edits: list[lsp.TextEdit]) -> str:
    """`text` after `edits` (all positions in the original text, as LSP says)."""
    lines = lines_of(text)

    def offset(position: lsp.Position) -> int:
        if position.line >= len(lines):
            return len(text)
        return sum(len(line) for line in lines[: position.line]) + position.character

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


class Editor:
    def __init__(self, client: LanguageClient):
        self.client = client
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        self.refused_edits = 0
        self.inlay_refreshes = 0
        self.published: dict[str, lsp.PublishDiagnosticsParams] = {}
        client.feature(lsp.WORKSPACE_APPLY_EDIT)(lambda params: self._apply_edit(params))
        client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)(lambda params: self._refresh())
        # pytest-lsp keeps only the diagnostics; the editor needs the version they were computed for too
        keep = client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

        def publish(params: lsp.PublishDiagnosticsParams) -> None:
            self.published[params.uri] = params
            keep(params)

        client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish

    def _refresh(self) -> None:
        self.inlay_refreshes += 1

    def _apply_edit(self, params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        applied = self.apply(params.edit)
        return lsp.ApplyWorkspaceEditResult(applied=applied, failure_reason=None if applied else "stale version")

    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.resolve().as_uri()
        text = path.read_text() if text is None else text
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="dojo", version=1, text=text)))
        return uri

    def replace(self, uri: str, text: str) -> int:
        """Send the whole new text as one change; the new version."""
        self.texts[uri] = text
        self.versions[uri] += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)]))
        return self.versions[uri]

    def edit(self, uri: str, edits: list[lsp.TextEdit]) -> int:
        """Apply `edits` and send the new text (the server asks for whole texts)."""
        return self.replace(uri, apply_text_edits(self.texts[uri], edits))

    def apply(self, edit: lsp.WorkspaceEdit) -> bool:
        """Apply a workspace edit as an editor does: refused whole if any
        versioned document is not at the version it names."""
        changes = [(c.text_document.uri, c.text_document.version, c.edits) for c in edit.document_changes or ()]
        changes += [(uri, None, edits) for uri, edits in (edit.changes or {}).items()]
        if any(version is not None and version != self.versions.get(uri) for uri, version, _ in changes):
            self.refused_edits += 1
            return False
        for uri, _, edits in changes:
            self.edit(uri, list(edits))
        return True

    async def diagnostics(self, uri: str, timeout: float = 10.0) -> list[lsp.Diagnostic]:
        """The diagnostics published for the document's current version."""
        async def published() -> list[lsp.Diagnostic]:
            while (params := self.published.get(uri)) is None or params.version != self.versions[uri]:
                await self.client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
            return list(params.diagnostics)

        return await asyncio.wait_for(published(), timeout)

    async def actions(self, uri: str, line: int, character: int = 0,
                      end: tuple[int, int] | None = None) -> list[lsp.CodeAction]:
        end_line, end_character = end or (line, character)
        found = await self.client.text_document_code_action_async(lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=line, character=character),
                            end=lsp.Position(line=end_line, character=end_character)),
            context=lsp.CodeActionContext(diagnostics=[])))
        return [a for a in found or [] if isinstance(a, lsp.CodeAction)]

    async def play(self, uri: str, action: lsp.CodeAction) -> bool:
        """Resolve (when the edit is not there yet) and apply a code action."""
        if action.edit is None:
            action = await self.client.code_action_resolve_async(action)
        assert action.edit is not None
        return self.apply(action.edit)
