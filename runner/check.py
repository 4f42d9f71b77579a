"""`dojo check` and `dojo-lsp --check`: every diagnostic of a `.dojo` file, and with `verify`
its derivation replayed from its spec and the numbers compared.

The replay proves the file's program equal to what its moves make of its spec, as trees; the
comparison runs both on the reference interpreter with the same inputs and proves the numbers,
as CI wants to see.
"""

from __future__ import annotations

from pathlib import Path

from dojo_ir import Diagnostic, DojoError, Program, diagnose, interpret, random_inputs
from dojo_ir.derivation import derivation_diagnostics, read_spec
from dojo_ir.errors import LIMITS, NOWHERE, beyond_limits
from dojo_ir.source import read_source

from .verify import compare

SEED = 0


def check_file(path: Path, verify: bool = False) -> list[Diagnostic]:
    """Every diagnostic of the file at `path`, in order; one at line 1 (or at its first byte that
    is not UTF-8) when it cannot be read."""
    try:
        text = read_source(path)
    except DojoError as error:
        return list(error.diagnostics)
    return check_text(text, path, verify)


def check_text(text: str, path: Path, verify: bool = False) -> list[Diagnostic]:
    """Every diagnostic of `text`, the contents of the file at `path` (where a derivation's spec
    is found from)."""
    try:
        program, found = diagnose(text)
    except LIMITS as error:
        return [beyond_limits(error, NOWHERE)]
    if verify and program is not None and not found and program.derivation is not None:
        found = found + verify_derivation(program, read_spec(program, path))
    return found


def verify_derivation(program: Program, spec: Program | None) -> list[Diagnostic]:
    """Where the derivation of `program` does not replay on `spec`; else where their numbers
    differ."""
    return derivation_diagnostics(program, spec) or (same_numbers(program, spec) if spec is not None else [])


def same_numbers(program: Program, spec: Program) -> list[Diagnostic]:
    """A diagnostic at the kernel line when `program`'s outputs differ from `spec`'s on the same
    random inputs."""
    try:
        inputs = random_inputs(spec, SEED)
        expected, actual = interpret(spec, inputs), interpret(program, inputs)
    except DojoError as error:
        return list(error.diagnostics)
    except LIMITS as error:  # sizes the checker accepts may still be beyond this machine
        return [beyond_limits(error, program.span or NOWHERE)]
    same, worst = compare(spec, actual, expected)
    if same or program.span is None:
        return []
    return [Diagnostic(program.span, f"the program's outputs differ from the spec's (largest difference {worst:.3g})",
                       "verify")]
