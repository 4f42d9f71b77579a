"""Files for the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

from dojo_ir import load, to_text
from dojo_ir.derivation import record


def derived_file(directory: Path, name: str, spec_text: str) -> Path:
    """`name.dojo` derived from `name.spec.dojo` by no moves yet: the file a
    user starts optimising in."""
    spec = directory / f"{name}.spec.dojo"
    spec.write_text(spec_text)
    derived = directory / f"{name}.dojo"
    derived.write_text(to_text(record(load(spec_text), [], spec=spec.name)))
    return derived
