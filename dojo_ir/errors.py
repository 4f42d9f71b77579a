"""One error type for everything people read: a span, a message that says what
was expected, and the rule (or move) that raised it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .tree import Span

# Where an error stands that no text places: the start of the file.
NOWHERE = Span(1, 1, 1, 1)


@dataclass(frozen=True)
class Diagnostic:
    span: Span
    message: str
    rule: str
    severity: str = "error"

    def format(self, filename: str = "<input>") -> str:
        """`FILE:LINE:COL: severity: MESSAGE`, the form every command prints."""
        return f"{filename}:{self.span.line}:{self.span.col}: {self.severity}: {self.message}"


class DojoError(Exception):
    """Raised for bad input anywhere in the project. It always holds at least
    one positioned diagnostic; `str()` gives the first."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        if not self.diagnostics:
            raise ValueError("DojoError needs at least one diagnostic")
        first = self.diagnostics[0]
        super().__init__(f"{first.span}: {first.message}")

    @classmethod
    def at(cls, span: Span, message: str, rule: str) -> DojoError:
        return cls([Diagnostic(span, message, rule)])

    def format(self, filename: str = "<input>") -> str:
        return "\n".join(d.format(filename) for d in self.diagnostics)


# What the library may raise for input beyond its limits that its checks do not catch (a size that
# overflows, memory that cannot be had, nesting too deep): bad input all the same, which the front
# doors report with a position (`beyond_limits`), never as a traceback.
LIMITS = (ArithmeticError, MemoryError, RecursionError, ValueError)


def beyond_limits(error: BaseException, span: Span) -> Diagnostic:
    """The diagnostic of one of LIMITS, raised while handling what starts at `span`."""
    return Diagnostic(span, str(error) or type(error).__name__, "limit")
