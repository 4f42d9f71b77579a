"""`dojo-lsp --check`: the server's diagnostics, headless, for CI.

The diagnostics the editor shows, for each file, printed as
`FILE:LINE:COL: severity: message` or as GitHub workflow annotations. With
`--verify`, every file with a derivation is also replayed from its spec, and
the replayed program and the file's program are run by the reference
interpreter on the same inputs and must give the same numbers
(runner/check.py, which `dojo check --verify` runs too).
"""

from __future__ import annotations

from pathlib import Path

from dojo_ir import Diagnostic
from runner.check import check_file


def github(diagnostic: Diagnostic, filename: str) -> str:
    """A GitHub Actions annotation (`::error file=...,line=...::message`)."""
    kind = "error" if diagnostic.severity == "error" else "warning"
    span = diagnostic.span
    message = diagnostic.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return (f"::{kind} file={filename},line={span.line},col={span.col},endLine={span.end_line},"
            f"endColumn={span.end_col},title=dojo {diagnostic.rule}::{message}")


def run_check(files: list[str], verify: bool, style: str) -> tuple[list[str], int]:
    """The lines to print and the exit status (1 if any error, or any file could not be read)."""
    lines, failed = [], False
    for name in files:
        found = check_file(Path(name), verify)
        failed |= any(d.severity == "error" for d in found)
        lines += [d.format(name) if style == "text" else github(d, name) for d in found]
    return lines, int(failed)
