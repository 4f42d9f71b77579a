"""Results files that several bench scripts share, one `# ` section each."""

from __future__ import annotations

import re
from pathlib import Path


def write_section(path: Path, text: str) -> None:
    """Replace the section of `path` that starts with the first line of `text` (a `# ` heading; the
    section runs to the next one), or append it; the other sections stay as they are."""
    heading = text.split("\n", 1)[0]
    old = path.read_text() if path.exists() else ""
    kept = [s for s in re.split(r"(?m)^(?=# )", old) if s.strip() and s.split("\n", 1)[0] != heading]
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(s.rstrip("\n") + "\n" for s in [*kept, text]))
