"""What one line of a `.dojo` file parses to, and the limits on its nesting.

Both readers of a line build these: the lark grammar (`parser.py`) and the
lark-free reader of the common lines (`fastparse.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .tree import Op, Span

# Limits that keep every recursive walk of a tree (checker, printer,
# interpreter, moves, code generators) far from Python's recursion limit.
MAX_SCOPE_DEPTH = 64  # scopes around one operation
MAX_EXPRESSION_DEPTH = 100  # nested operators, calls and accesses in one expression (parentheses add none)

INDEX_REF = re.compile(r"\{([0-9]+)\}")

@dataclass(frozen=True)
class KernelLine:
    name: str
    inputs: tuple[tuple[str, Span], ...]
    outputs: tuple[tuple[str, Span], ...]
    span: Span


@dataclass(frozen=True)
class SpecLine:
    path: str
    span: Span


@dataclass(frozen=True)
class MoveLine:
    text: str  # canonical: `name(key=value, ...)`
    span: Span


@dataclass(frozen=True)
class ScopeToken:
    kind: str  # "size", "bar", "symbolic" or "range"
    span: Span
    size: int = 0
    suffix: str = ""
    text: str = ""


@dataclass(frozen=True)
class BodyLine:
    tokens: tuple[ScopeToken, ...]
    op: Op
