"""Reading a `.dojo` file. A file that cannot be read, or is not UTF-8 text, is bad input like any
other: a DojoError with a position (where the first byte that is not UTF-8 is, else line 1,
column 1), which every front door prints as `FILE:LINE:COL: error: ...`."""

from __future__ import annotations

import stat
from pathlib import Path

from .errors import NOWHERE, DojoError
from .tree import Span

RULE = "read"
MAX_SOURCE_BYTES = 256 << 20  # a 20,000-line kernel is about 1 MB


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
    """The text of the file at `path`: a regular file (a pipe or a device would be read forever) of
    at most MAX_SOURCE_BYTES."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise DojoError.at(NOWHERE, "cannot read: not a regular file", RULE)
        if status.st_size > MAX_SOURCE_BYTES:
            raise DojoError.at(NOWHERE, f"cannot read: {status.st_size:,} bytes, over the limit of "
                               f"{MAX_SOURCE_BYTES:,} for a .dojo file", RULE)
        data = path.read_bytes()
    except OSError as error:
        raise DojoError.at(NOWHERE, f"cannot read: {error.strerror or error}", RULE) from None
    return decode(data)


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
