"""Diagnostics: the checker's errors and the derivation's replay, on open, on
every change and on save (the spec may have changed on disk).

Changes are debounced by cancelling the pending publication: a burst of
keystrokes is checked once, for its last version. Each publication carries
the version it was computed for, so a client can drop a stale one.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

from lsprotocol import types as lsp

from dojo_ir import Diagnostic, Program, load
from dojo_ir.derivation import derivation_diagnostics as check_derivation

from ..documents import Snapshot
from ..server import DojoServer

DEBOUNCE_S = 0.005  # long enough to merge the messages of one burst, short enough not to be felt
SOURCE = "dojo"
_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning}


def register(server: DojoServer) -> None:
    pending: dict[str, asyncio.Task] = {}

    def schedule(ls: DojoServer, uri: str) -> None:
        if (task := pending.pop(uri, None)) is not None:
            task.cancel()
        pending[uri] = ls.spawn(_publish_later(ls, uri), f"diagnostics of {uri}")

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DojoServer, params: lsp.DidOpenTextDocumentParams) -> None:
        schedule(ls, params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DojoServer, params: lsp.DidChangeTextDocumentParams) -> None:
        schedule(ls, params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=False))
    def did_save(ls: DojoServer, params: lsp.DidSaveTextDocumentParams) -> None:
        schedule(ls, params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DojoServer, params: lsp.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if (task := pending.pop(uri, None)) is not None:
            task.cancel()
        ls.forget(uri)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


async def _publish_later(ls: DojoServer, uri: str) -> None:
    await asyncio.sleep(DEBOUNCE_S)
    try:
        snapshot = await ls.analysed(uri)
    except KeyError:  # closed meanwhile
        return
    found = snapshot.diagnostics + await ls.off_loop(derivation_diagnostics, f"replaying {snapshot.name}", snapshot)
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
        uri=uri, version=snapshot.version, diagnostics=[to_lsp(snapshot, d) for d in found]))


def to_lsp(snapshot: Snapshot, diagnostic: Diagnostic) -> lsp.Diagnostic:
    return lsp.Diagnostic(range=snapshot.range_of(diagnostic.span), message=diagnostic.message, source=SOURCE,
                          code=diagnostic.rule, severity=_SEVERITY.get(diagnostic.severity,
                                                                       lsp.DiagnosticSeverity.Information))


def derivation_diagnostics(snapshot: Snapshot) -> list[Diagnostic]:
    """Where replaying the file's derivation on its spec does not give the
    file's program; a warning when the spec cannot be read."""
    program = snapshot.program
    if program is None or program.derivation is None:
        return []
    return list(_verified(snapshot.text, snapshot.spec))


@lru_cache(maxsize=64)
def _verified(text: str, spec: Program | None) -> tuple[Diagnostic, ...]:
    # keyed by the text, not the program: programs compare without their positions, diagnostics have them
    return tuple(check_derivation(load(text), spec))
