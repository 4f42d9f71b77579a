"""10,000 random moves over the 16 library kernels, each result compared
with its spec by the reference interpreter (`dojo fuzz`).

Writes bench/results/fuzz.md. A change of meaning prints the kernel and the
exact moves that reproduce it, and the script exits 1.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sections import write_section  # noqa: E402
from dojo_ir.fuzz import fuzz  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402

WALKS, STEPS, SEED = 500, 20, 2026


def main() -> int:
    started = time.perf_counter()
    report = fuzz(list(KERNELS), WALKS, STEPS, SEED)
    seconds = time.perf_counter() - started
    kinds = Counter(m.split("(")[0] for m in report.played)
    lines = [
        "# Random walks of legal moves",
        "",
        f"`python bench/fuzz_moves.py`: {report.walks} walks of up to {STEPS} moves over the {len(KERNELS)} "
        f"library kernels (seed {SEED}), each step checked: the result prints, parses back to the same tree, "
        "passes the checker and gives the spec's outputs in the reference interpreter.",
        "",
        f"- moves played: {report.moves}, of which {report.tails} split a scope with a tail",
        f"- changes of meaning: {len(report.failures)}",
        f"- time: {seconds:.0f} s",
        "",
        "| move | times played |",
        "|---|---|",
        *[f"| {k} | {n} |" for k, n in sorted(kinds.items())],
    ]
    for failure in report.failures:
        lines.append(f"\nFAILED {failure.kernel} ({failure.shape}): {failure.problem}\n  " + "\n  ".join(failure.moves))
    write_section(Path(__file__).parent / "results" / "fuzz.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
