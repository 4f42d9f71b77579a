"""What the server knows about one version of one document.

A `Snapshot` is immutable: the text of a version and everything derived from
it (the program, its diagnostics, the legal moves), computed once, on demand.
Features read a snapshot and never the live document, so a request answers
about one version even while edits arrive; a change makes a new snapshot.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp

from dojo_ir import DojoError, Program, diagnose, load
from dojo_ir.derivation import spec_path
from dojo_ir.errors import Diagnostic
from dojo_ir.moves import Analysis, Move, find
from dojo_ir.moves.base import Path as TreePath
from dojo_ir.parser import classify
from dojo_ir.tree import Span

from .edits import lines_of


def file_path(uri: str) -> Path | None:
    """The local file a `file:` URI names; None for other schemes (unsaved buffers)."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def utf16_column(line: str, column: int) -> int:
    """LSP's column (UTF-16 code units, 0-based) of the 1-based character column `column`."""
    return len(line[: max(column - 1, 0)].encode("utf-16-le")) // 2


def character_column(line: str, character: int) -> int:
    """The 1-based character column of LSP's 0-based UTF-16 `character`."""
    units = 0
    for index, char in enumerate(line):
        if units >= character:
            return index + 1
        units += 2 if ord(char) > 0xFFFF else 1
    return len(line) + 1


@dataclass(frozen=True, eq=False)
class Snapshot:
    uri: str
    version: int | None
    text: str
    lines: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lines", [line.rstrip("\r\n") for line in lines_of(self.text)])

    @cached_property
    def _diagnosed(self) -> tuple[Program | None, list[Diagnostic]]:
        return diagnose(self.text)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return self._diagnosed[1]

    @property
    def program(self) -> Program | None:
        """The program, only when the text has no error: moves, code and
        measurements are about valid programs."""
        program, diagnostics = self._diagnosed
        return None if any(d.severity == "error" for d in diagnostics) else program

    @cached_property
    def analysis(self) -> Analysis | None:
        return Analysis(self.program) if self.program is not None else None

    @cached_property
    def moves(self) -> list[Move]:
        """Every legal move of the program (none for an invalid text)."""
        return find(self.program, self.analysis) if self.analysis is not None else []

    def moves_at(self, first_line: int, last_line: int) -> list[Move]:
        """The legal moves whose node covers any of the 1-based lines
        `first_line..last_line`, innermost node first."""
        if self.analysis is None:
            return []
        found = []
        for move in self.moves:
            lines = self.analysis.lines(move)
            if lines is not None and lines[0] <= last_line and first_line <= lines[1]:
                found.append((lines[1] - lines[0], move))
        return [move for _, move in sorted(found, key=lambda pair: pair[0])]

    def range_of(self, span: Span) -> lsp.Range:
        return lsp.Range(start=self.position(span.line, span.col), end=self.position(span.end_line, span.end_col))

    def position(self, line: int, column: int) -> lsp.Position:
        """LSP's position of a 1-based line and character column."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return lsp.Position(line=max(line - 1, 0), character=utf16_column(text, column))

    def kind_of_line(self, line: int) -> str | None:
        """What the 1-based `line` holds (`kernel`, `decl`, `body`, `spec`, `move`), None if blank."""
        return classify(self.lines[line - 1]) if 0 < line <= len(self.lines) else None

    def node_at(self, line: int, character: int) -> TreePath | None:
        """The path of the node under LSP's 0-based `line`/`character` on a
        body line: the scope whose size (or `|`) is under the cursor, else the
        line's operation."""
        if self.analysis is None:
            return None
        site = next((s for s in self.analysis.sites if s.line == line + 1), None)
        if site is None:
            return None
        offset = character_column(self.lines[line], character) - 1
        tokens = [match.end() for match in re.finditer(r"\S+", self.lines[line])]
        depth = next((k for k, end in enumerate(tokens) if offset <= end), len(tokens))
        return site.path[: depth + 1] if depth < len(site.chain) else site.path

    @property
    def spec(self) -> Program | None:
        """The program this file's derivation starts from, when the file has
        one and its spec can be read and is valid; None otherwise. Read anew
        each time: the spec is another file, which may change on disk."""
        program, path = self.program, file_path(self.uri)
        if program is None or program.derivation is None or path is None:
            return None
        try:
            return load(spec_path(program, path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, DojoError):
            return None

    @property
    def name(self) -> str:
        path = file_path(self.uri)
        return os.path.basename(path) if path is not None else self.uri
