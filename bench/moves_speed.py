"""How fast every legal move of a program is listed.

An agent calls this thousands of times per episode and the editor on every
cursor move, so it is the product's hot path. Two programs:

- the library's softmax spec at the paper's shape (24576 x 512);
- a 60-line program: a chain of nine softmax-like row stages written the
  way the library writes specs, one loop nest per operation.

Each run builds a fresh `Analysis` (nothing carried over from the previous
run of the same program) but keeps the process-wide caches of index forms and
dependence questions, as an agent's process does. The cold first run is
reported too. Medians; results in bench/results/moves_speed.md.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from dojo_ir import load
from dojo_ir.affine import affine
from dojo_ir.analysis import Analysis
from dojo_ir.dependence import _conflict
from dojo_ir.library import KERNELS
from dojo_ir.moves import find


def sixty_lines() -> str:
    stages, rows, cols = 9, 4096, 512
    lines = ["# Nine row-wise stages, one loop nest per operation.", f"kernel chain(x) -> y{stages - 1}", ""]
    lines.append(f"x f32 [{rows}, {cols}] heap")
    body = []
    previous = "x"
    for i in range(stages):
        lines += [f"y{i} f32 [{rows}, {cols}] heap", f"m{i} f32 [{rows}] heap"]
        body += [
            f"{rows} m{i}[{{0}}] = -inf",
            f"{rows} {cols} m{i}[{{0}}] max= {previous}[{{0}},{{1}}]",
            f"{rows} {cols} y{i}[{{0}},{{1}}] = exp({previous}[{{0}},{{1}}] - m{i}[{{0}}])",
            f"{rows} {cols} y{i}[{{0}},{{1}}] = y{i}[{{0}},{{1}}] * 0.5",
        ]
        previous = f"y{i}"
    text = "\n".join(lines + ["", "# Each stage: row max, exponent, scale."] + body) + "\n"
    assert len(text.splitlines()) == 60
    return text


def measure(text: str, runs: int = 40) -> dict[str, float]:
    program = load(text)
    for cache in (affine, _conflict):
        cache.cache_clear()
    started = time.perf_counter()
    count = len(find(program, Analysis(program)))
    cold = time.perf_counter() - started
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        find(program, Analysis(program))
        samples.append(time.perf_counter() - started)
    return {"moves": count, "cold_ms": cold * 1000, "median_ms": statistics.median(samples) * 1000,
            "lines": len(text.splitlines())}


def main() -> None:
    rows = [("softmax spec, 24576 x 512", measure(KERNELS["softmax"].text())),
            ("60-line program", measure(sixty_lines()))]
    report = ["# Listing every legal move", "",
              "`python bench/moves_speed.py`: `dojo_ir.moves.find` with a fresh `Analysis` per run. "
              "Median of 40 runs; cold = the first run with every cache empty.", "",
              "| program | lines | legal moves | median | cold |", "|---|---|---|---|---|"]
    for name, r in rows:
        report.append(f"| {name} | {r['lines']} | {r['moves']} | {r['median_ms']:.2f} ms | {r['cold_ms']:.1f} ms |")
    out = Path(__file__).parent / "results" / "moves_speed.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(report) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
