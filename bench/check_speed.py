"""`check` on long files: the checker must stay near-linear in the number of lines.

Builds kernels of 2,000 to 20,000 lines in the style of bench/parse_speed.py (a chain of fused
row-wise stages under one outer scope) and times the parse and `check` (every checker rule, including
the dependence analysis) apart, with every cache cleared. bench/parse_speed.py writes the figures
to bench/results/parse_speed.md; run by itself, this script prints them.
"""

from __future__ import annotations

import time

from dojo_ir import check, parse_with_diagnostics
from dojo_ir.affine import affine
from dojo_ir.dependence import _conflict
from dojo_ir.parser import parse_line

ROWS, COLS = 4096, 512
SIZES = (2000, 4000, 20000)


def chain(length: int) -> str:
    """A kernel of `length` lines: declarations, then one outer scope whose body lines are fused
    row-wise stages, each reading the previous stage's output."""
    stages = (length - 3) // 10 + 1
    head = [f"# A chain of {stages} fused row-wise stages; {length} lines in all.",
            f"kernel chain(x, g) -> y{stages - 1}", ""]
    decls = [f"x f32 [{ROWS}, {COLS}] heap", f"g f32 [{COLS}] heap"]
    body = []
    previous = "x"
    for i in range(stages):
        decls += [f"y{i} f32 [{ROWS}, {COLS}] heap", f"m{i} f32 [{ROWS}:1] heap", f"s{i} f32 [{ROWS}] heap"]
        body += [
            f"m{i}[{{0}}] = -inf",
            f"{COLS} m{i}[{{0}}] max= {previous}[{{0}},{{1}}]",
            f"{COLS} y{i}[{{0}},{{1}}] = exp({previous}[{{0}},{{1}}] - m{i}[{{0}}]) * g[{{1}}]",
            f"s{i}[{{0}}] = 0",
            f"{COLS} s{i}[{{0}}] += y{i}[{{0}},{{1}}]",
            f"{COLS} y{i}[{{0}},{{1}}] = y{i}[{{0}},{{1}}] / (s{i}[{{0}}] + 1e-5)",
            f"{COLS} y{i}[{{0}},{{1}}] = max(y{i}[{{0}},{{1}}], 0.5 * -{previous}[{{0}},{{1}}])",
        ]
        previous = f"y{i}"
    lines = head + decls + [""]
    body_lines = [f"{ROWS} {body[0]}"] + [f"|    {b}" for b in body[1:]]
    lines += body_lines[: length - len(lines)]
    assert len(lines) == length, (len(lines), length)
    return "\n".join(lines) + "\n"


def seconds(length: int) -> tuple[float, float]:
    """The time to parse a `length`-line chain and the time to check it, every cache cleared."""
    text = chain(length)
    for cache in (parse_line, affine, _conflict):
        cache.cache_clear()
    started = time.perf_counter()
    program, diagnostics = parse_with_diagnostics(text)
    parsed = time.perf_counter()
    assert program is not None and not diagnostics and not check(program), diagnostics[:3]
    return parsed - started, time.perf_counter() - parsed


def measure() -> dict[int, tuple[float, float]]:
    seconds(200)  # lark's tables and imports are not what is measured
    return {length: min(seconds(length) for _ in range(3)) for length in SIZES}


def table(figures: dict[int, tuple[float, float]]) -> str:
    rows = "".join(f"| {length:,} | {parse:.2f} s | {check:.2f} s |\n" for length, (parse, check) in figures.items())
    return ("\n## Long files\n\n`python bench/check_speed.py`: a chain of fused stages of 2,000 to 20,000 lines "
            "(bench/check_speed.py's `chain`), every cache cleared; the best of 3 runs.\n\n"
            "| lines | parse | check |\n|---|---|---|\n" + rows)


if __name__ == "__main__":
    print(table(measure()))
