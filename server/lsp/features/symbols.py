"""Document symbols: the kernel, its buffers, and the scope tree with the
operations as leaves, for the editor's outline and breadcrumbs."""

from __future__ import annotations

from lsprotocol import types as lsp

from dojo_ir.printer import expr_text
from dojo_ir.tree import Node, Op, Program, walk_ops

from ..documents import Snapshot
from ..requests import snapshot_of
from ..server import DojoServer


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def document_symbols(ls: DojoServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        snapshot = await snapshot_of(ls, params.text_document.uri)
        program = snapshot.program
        if program is None or program.span is None:
            return []
        return [await ls.off_loop(kernel_symbol, f"symbols of {snapshot.name}", snapshot, program)]


def kernel_symbol(snapshot: Snapshot, program: Program) -> lsp.DocumentSymbol:
    assert program.span is not None
    buffers = [lsp.DocumentSymbol(name=b.name, detail=f"{b.dtype} {list(b.shape)} {b.location}",
                                  kind=lsp.SymbolKind.Variable, range=_lines(snapshot, b.span.line, b.span.line),
                                  selection_range=snapshot.range_of(b.span))
               for b in program.buffers if b.span is not None]
    body = [symbol for node in program.body if (symbol := _node_symbol(snapshot, node, 0)) is not None]
    last = max([program.span.line, *(s.range.end.line for s in buffers + body)])
    signature = f"({', '.join(program.inputs)}) -> {', '.join(program.outputs)}"
    return lsp.DocumentSymbol(name=program.name, detail=signature, kind=lsp.SymbolKind.Function,
                              range=_lines(snapshot, program.span.line, last), selection_range=snapshot.range_of(
                                  program.span), children=buffers + body)


def _node_symbol(snapshot: Snapshot, node: Node, depth: int) -> lsp.DocumentSymbol | None:
    if isinstance(node, Op):
        if node.span is None:
            return None
        text = f"{expr_text(node.target)} {node.assign} {expr_text(node.value)}"
        return lsp.DocumentSymbol(name=text, kind=lsp.SymbolKind.Field, range=_lines(snapshot, node.span.line,
                                  node.span.line), selection_range=snapshot.range_of(node.span))
    lines = [op.span.line for op, _ in walk_ops(node.body) if op.span is not None]
    if not lines:
        return None
    children = [s for child in node.body if (s := _node_symbol(snapshot, child, depth + 1)) is not None]
    whole = _lines(snapshot, min(lines), max(lines))
    name = f"{node.size}" + (f":{node.kind}" if node.kind else "")
    return lsp.DocumentSymbol(name=name, detail=f"scope {{{depth}}}", kind=lsp.SymbolKind.Namespace, range=whole,
                              selection_range=lsp.Range(start=whole.start, end=whole.start), children=children)


def _lines(snapshot: Snapshot, first: int, last: int) -> lsp.Range:
    return lsp.Range(start=snapshot.position(first, 1), end=snapshot.position(last, len(snapshot.lines[last - 1]) + 1))
