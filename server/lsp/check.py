"""`dojo-lsp --check`: the server's diagnostics, headless, for CI.

The same snapshot and diagnostics the editor shows, for each file, printed as
`FILE:LINE:COL: severity: message` or as GitHub workflow annotations. With
`--verify`, every file with a derivation is also replayed from its spec, and
the replayed program and the file's program are run by the reference
interpreter on the same inputs and must give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from dojo_ir import Diagnostic, DojoError, interpret, random_inputs
from runner.verify import compare

from .documents import Snapshot
from .features.diagnostics import derivation_diagnostics

SEED = 0


def check_file(path: Path, verify: bool) -> list[Diagnostic]:
    """Every diagnostic of the file at `path`; OSError if it cannot be read."""
    snapshot = Snapshot(path.resolve().as_uri(), None, path.read_text(encoding="utf-8"))
    found = list(snapshot.diagnostics)
    if verify and snapshot.program is not None and snapshot.program.derivation is not None:
        found += derivation_diagnostics(snapshot) or list(_same_numbers(snapshot))
    return found


def _same_numbers(snapshot: Snapshot) -> Iterator[Diagnostic]:
    """The program against its spec on the interpreter: the replay proved them
    equal as trees; this proves the numbers, as CI wants to see."""
    program, spec = snapshot.program, snapshot.spec
    assert program is not None and spec is not None and program.span is not None
    try:
        inputs = random_inputs(spec, SEED)
        expected, actual = interpret(spec, inputs), interpret(program, inputs)
    except DojoError as error:
        yield from error.diagnostics
        return
    same, worst = compare(spec, actual, expected)
    if not same:
        yield Diagnostic(program.span, f"the program's outputs differ from the spec's (largest difference {worst:.3g})",
                         "verify")


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
        try:
            found = check_file(Path(name), verify)
        except (OSError, UnicodeDecodeError) as error:
            lines.append(f"{name}:1:1: error: cannot read: {error}" if style == "text"
                         else f"::error file={name}::cannot read: {error}")
            failed = True
            continue
        failed |= any(d.severity == "error" for d in found)
        lines += [d.format(name) if style == "text" else github(d, name) for d in found]
    return lines, int(failed)
