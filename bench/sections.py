"""What several bench scripts share: the machine they ran on, results files with one `# ` section
per script, and OpenMP threads bound as the runner binds them."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path


def bind_openmp_threads() -> None:
    """Every OpenMP runtime this process loads (PyTorch's, a library's) binds its threads one per
    core, as the runner does for a timed binary: unbound, a thread that waits for work can share a
    core with the one doing it while another process holds the other core, and a call then takes a
    scheduler tick. Call it before the first of them loads."""
    os.environ.setdefault("OMP_PROC_BIND", "true")
    os.environ.setdefault("OMP_PLACES", "cores")


def machine() -> str:
    """The CPU as lscpu names it (family, model, AVX-512; a virtual machine may name only the brand),
    the cores, and the load when measured."""
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        info = ""
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines())}
    avx512 = "with" if re.search(r"\bavx512f\b", field.get("Flags", "")) else "without"
    return (f"{field.get('Model name', '?')}, CPU family {field.get('CPU family', '?')} model "
            f"{field.get('Model', '?')}, {avx512} avx512f, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f} when measured")


def write_section(path: Path, text: str) -> None:
    """Replace the section of `path` that starts with the first line of `text` (a `# ` heading; the
    section runs to the next one), or append it; the other sections stay as they are."""
    heading = text.split("\n", 1)[0]
    old = path.read_text() if path.exists() else ""
    kept = [s for s in re.split(r"(?m)^(?=# )", old) if s.strip() and s.split("\n", 1)[0] != heading]
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(s.rstrip("\n") + "\n" for s in [*kept, text]))


def archive_log(log: Path) -> Path:
    """A finished run's log compressed beside it as `NAME.gz` (agent.evaluate.log_text reads it by
    either name), the raw one removed: bench/results keeps runs, not raw logs."""
    packed = log.with_name(log.name + ".gz")
    packed.write_bytes(gzip.compress(log.read_bytes(), mtime=0))
    log.unlink()
    return packed
