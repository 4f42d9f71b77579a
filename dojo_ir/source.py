"""Reading a `.dojo` file. A file that cannot be read, or is not UTF-8 text, is bad input like any
other: a DojoError with a position (where the first byte that is not UTF-8 is, else line 1,
column 1), which every front door prints as `FILE:LINE:COL: error: ...`."""

from __future__ import annotations

from pathlib import Path

from .errors import NOWHERE, DojoError
from .tree import Span

RULE = "read"


def decode(data: bytes) -> str:
    """`data` as text, newlines made `\\n` (as Python's text files read them)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = _lines(data[: error.start].decode("utf-8")).split("\n")
        line, col = len(before), len(before[-1]) + 1
        raise DojoError.at(Span(line, col, line, col + 1), f"cannot read: not UTF-8 text (byte "
                           f"0x{data[error.start]:02x} at offset {error.start})", RULE) from None
    return _lines(text)


def read_source(path: Path) -> str:
    """The text of the file at `path`."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DojoError.at(NOWHERE, f"cannot read: {error.strerror or error}", RULE) from None
    return decode(data)


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
