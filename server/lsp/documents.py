"""What the server knows about one version of one document.

A `Snapshot` is immutable: the text of a version and everything derived from
it (the program, its diagnostics, the legal moves), computed once, on demand.
Features read a snapshot and never the live document, so a request answers
about one version even while edits arrive; a change makes a new snapshot.
The server computes what grows with the text (`analyse`, `moves_at`) off its
event loop.

A text of more than MAX_CHARS characters is not analysed: it gets one error
saying so, as a kernel is a few kilobytes, and checking megabytes would hold a
core for minutes at every keystroke.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types as lsp

from dojo_ir import Program, diagnose
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import read_spec
from dojo_ir.errors import NOWHERE, Diagnostic
from dojo_ir.moves import Move, legal_moves, move_lines
from dojo_ir.parser import classify
from dojo_ir.paths import TreePath
from dojo_ir.tree import Span

from .edits import lines_of, units

MAX_CHARS = 1_000_000


def file_path(uri: str) -> Path | None:
    """The local file a `file:` URI names; None for other schemes (unsaved buffers)."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def lsp_column(line: str, column: int, encoding: str) -> int:
    """LSP's 0-based column, in the negotiated encoding's code units, of the 1-based character column `column`."""
    return units(line[: max(column - 1, 0)], encoding)


def character_column(line: str, character: int, encoding: str) -> int:
    """The 1-based character column of LSP's 0-based `character` (in the encoding's code units)."""
    counted = 0
    for index, char in enumerate(line):
        if counted >= character:
            return index + 1
        counted += units(char, encoding)
    return len(line) + 1


@dataclass
class _Listing:
    """The legal moves at a range of lines, as they are found."""

    moves: list[Move] = field(default_factory=list)
    complete: bool = False


@dataclass(frozen=True, eq=False)
class Snapshot:
    uri: str
    version: int | None
    text: str
    encoding: str = "utf-16"  # what LSP columns count, as negotiated with the client
    lines: list[str] = field(init=False, repr=False)
    # (program, diagnostics, analysis) once analysed. Not cached_property's: in Python 3.11 its lock is
    # one for all instances, so the analysis of a big document would hold up every other document's.
    _analysed: tuple[Program | None, list[Diagnostic], Analysis | None] | None = field(default=None, init=False,
                                                                                      repr=False)
    _moves_at: dict[tuple[int, int], _Listing] = field(default_factory=dict, init=False, repr=False)
    _listing: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lines", [line.rstrip("\r\n") for line in lines_of(self.text)])

    def analyse(self) -> None:
        """Parse and check the text and label its operations, once: what every request needs first."""
        if self._analysed is not None:
            return
        if len(self.text) > MAX_CHARS:
            program, diagnostics = None, [Diagnostic(NOWHERE, f"the document has {len(self.text):,} "
                                                     "characters; the language server analyses documents of up to "
                                                     f"{MAX_CHARS:,}", "size")]
        else:
            program, diagnostics = diagnose(self.text)
        valid = None if any(d.severity == "error" for d in diagnostics) else program
        analysis = Analysis(valid) if valid is not None else None
        if analysis is not None:
            analysis.sites  # noqa: B018 (computed now, and kept)
        object.__setattr__(self, "_analysed", (valid, diagnostics, analysis))

    @property
    def analysed(self) -> bool:
        return self._analysed is not None

    def _facts(self) -> tuple[Program | None, list[Diagnostic], Analysis | None]:
        self.analyse()
        assert self._analysed is not None
        return self._analysed

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return self._facts()[1]

    @property
    def program(self) -> Program | None:
        """The program, only when the text has no error: moves, code and
        measurements are about valid programs."""
        return self._facts()[0]

    @property
    def analysis(self) -> Analysis | None:
        return self._facts()[2]

    def moves_at(self, first_line: int, last_line: int) -> list[Move]:
        """The legal moves whose node covers any of the 1-based lines
        `first_line..last_line`, innermost node first (none for an invalid
        text). Remembered per range: a cursor that stays costs nothing.
        They are checked innermost node first, and `moves_known_at` tells
        those found so far; one listing at a time, so that a second request
        for the range finds the first's."""
        analysis = self.analysis
        if analysis is None:
            return []
        with self._listing:
            listing = self._moves_at.get((first_line, last_line))
            if listing is not None and listing.complete:
                return listing.moves
            listing = self._moves_at[(first_line, last_line)] = _Listing()

            def covers(move: Move) -> bool:
                lines = move_lines(analysis, move)
                return lines is not None and lines[0] <= last_line and first_line <= lines[1]

            def size(move: Move) -> int:
                first, last = move_lines(analysis, move)
                return last - first

            for move in legal_moves(analysis, covers, order=size):
                listing.moves.append(move)
            listing.complete = True
            return listing.moves

    def moves_listed_at(self, first_line: int, last_line: int) -> list[Move] | None:
        """The moves of that range if `moves_at` has listed them all, else None."""
        listing = self._moves_at.get((first_line, last_line))
        return listing.moves if listing is not None and listing.complete else None

    def moves_known_at(self, first_line: int, last_line: int) -> list[Move]:
        """The moves `moves_at` has found so far for that range: the first of its answer."""
        listing = self._moves_at.get((first_line, last_line))
        return [] if listing is None else list(listing.moves)

    def range_of(self, span: Span) -> lsp.Range:
        return lsp.Range(start=self.position(span.line, span.col), end=self.position(span.end_line, span.end_col))

    def position(self, line: int, column: int) -> lsp.Position:
        """LSP's position of a 1-based line and character column."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return lsp.Position(line=max(line - 1, 0), character=lsp_column(text, column, self.encoding))

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
        offset = character_column(self.lines[line], character, self.encoding) - 1
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
        return read_spec(program, path)

    @property
    def name(self) -> str:
        path = file_path(self.uri)
        return os.path.basename(path) if path is not None else self.uri
