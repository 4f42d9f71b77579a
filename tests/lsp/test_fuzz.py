"""Mutated kernels sent to a real `dojo-lsp` as didOpen and didChange (tests/test_fuzz_input.py runs
the same document code in-process on many more): every version gets its diagnostics, and the server
keeps answering."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from bench.fuzz_input import mutants
from dojo_ir.library import KERNELS


async def test_mutated_kernels_get_diagnostics_and_the_server_keeps_answering(editor, tmp_path: Path) -> None:
    path = tmp_path / "kernel.dojo"
    path.write_text(KERNELS["softmax"].small())
    uri = editor.open(path)
    assert await editor.diagnostics(uri) == []
    flagged = 0
    for mutant in mutants(40, seed=4):
        editor.replace(uri, mutant.text)
        found = await editor.diagnostics(uri, timeout=30)
        lines = len(re.split(r"\r\n|\r|\n", mutant.text))  # as LSP counts them
        assert all(0 <= d.range.start.line < lines for d in found), (mutant, found)
        flagged += bool(found)
    assert flagged > 0  # the mutants were checked, not all waved through
    symbols = await editor.client.text_document_document_symbol_async(
        lsp.DocumentSymbolParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert symbols is not None
