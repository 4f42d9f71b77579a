"""Text edits that change only the lines that change.

An edit that replaces the whole document loses the editor's cursor, folds and
undo granularity; a minimal one keeps them. Edits replace whole lines, so the
only column ever computed is the end of a last line that has no line end.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from lsprotocol import types as lsp

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def lines_of(text: str) -> list[str]:
    """The lines as LSP counts them (ended by \\n, \\r\\n or \\r only), with their ends."""
    return _LINE.findall(text)


def units(text: str, encoding: str) -> int:
    """How many code units of LSP's position `encoding` (utf-8, utf-16, utf-32) `text` takes."""
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _start_of(lines: list[str], index: int, encoding: str) -> lsp.Position:
    """Where line `index` starts; past the last line, the end of the text."""
    if index < len(lines) or not lines or lines[-1].endswith(("\n", "\r")):
        return lsp.Position(line=index, character=0)
    return lsp.Position(line=len(lines) - 1, character=units(lines[-1], encoding))


def line_edits(old: str, new: str, encoding: str = "utf-16") -> list[lsp.TextEdit]:
    """Edits that turn `old` into `new`, one per run of changed lines, in
    document order and non-overlapping (as LSP requires)."""
    before, after = lines_of(old), lines_of(new)
    edits = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            edits.append(lsp.TextEdit(range=lsp.Range(start=_start_of(before, i1, encoding),
                                                                end=_start_of(before, i2, encoding)),
                                      new_text="".join(after[j1:j2])))
    return edits
