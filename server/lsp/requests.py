"""What the features share in answering a request: the document it names,
its arguments, and the edits it sends back.

Features import this module and never one another.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from dojo_ir import Program
from dojo_ir.derivation import advance
from dojo_ir.printer import to_text

from .documents import Snapshot
from .edits import line_edits
from .server import DojoServer

# the editors' language id (and Markdown fence) for each target language
LANGUAGE_ID = {"c": "c", "cuda": "cuda", "hip": "cpp"}


async def snapshot_of(ls: DojoServer, uri: str) -> Snapshot:
    """The current version of the open document `uri`, analysed; InvalidParams if it is not open
    (a request about a document the editor has not opened is the client's error)."""
    try:
        return await ls.analysed(uri)
    except KeyError:
        raise JsonRpcInvalidParams(f"{uri} is not open; open it (textDocument/didOpen) first") from None


def argument(args: tuple[Any, ...], index: int, kind: type, command: str, what: str) -> Any:
    """A command's argument `index`, of type `kind` (described as `what`); None if it is not given."""
    if index >= len(args) or args[index] is None:
        return None
    if not isinstance(args[index], kind) or isinstance(args[index], bool):
        raise JsonRpcInvalidParams(f"{command}: argument {index + 1} should be {what}, not {args[index]!r}")
    return args[index]


async def document_of(ls: DojoServer, args: tuple[Any, ...], command: str) -> tuple[Snapshot, Program]:
    """The snapshot named by the first argument, with its program; a clear
    error if there is none or it has errors."""
    uri = argument(args, 0, str, command, "a document URI")
    if uri is None:
        raise JsonRpcInvalidParams(f"{command} needs the document's URI as its first argument")
    snapshot = await snapshot_of(ls, uri)
    if snapshot.program is None:
        first = snapshot.diagnostics[0]
        raise JsonRpcInvalidParams(f"{command}: {snapshot.name} has {len(snapshot.diagnostics)} error(s); the first, "
                                   f"at {first.span}: {first.message}")
    return snapshot, snapshot.program


async def apply_edit(ls: DojoServer, label: str, edit: lsp.WorkspaceEdit) -> bool:
    """Send `edit` through `workspace/applyEdit`; whether the client applied it."""
    answer = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit=edit, label=f"PerfDojo: {label}"))
    return bool(answer and answer.applied)


def moves_edit(ls: DojoServer, snapshot: Snapshot, moves: list[str]) -> lsp.WorkspaceEdit:
    """The edit that plays `moves` on the snapshot's (valid) program and
    records them in its derivation; DojoError naming the first that does not apply."""
    assert snapshot.program is not None
    return document_edit(ls, snapshot, to_text(advance(snapshot.program, moves)))


def document_edit(ls: DojoServer, snapshot: Snapshot, new_text: str) -> lsp.WorkspaceEdit:
    """A workspace edit of the snapshot's document into `new_text`: versioned,
    so the client refuses it for any other version, where the client can."""
    edits = line_edits(snapshot.text, new_text, snapshot.encoding)
    workspace = ls.client_capabilities.workspace
    if workspace and workspace.workspace_edit and workspace.workspace_edit.document_changes:
        document = lsp.OptionalVersionedTextDocumentIdentifier(uri=snapshot.uri, version=snapshot.version)
        return lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(text_document=document, edits=edits)])
    return lsp.WorkspaceEdit(changes={snapshot.uri: edits})
