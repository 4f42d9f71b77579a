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


def scope_per_line(length: int) -> str:
    """A kernel of `length` lines whose body lines are each a scope of their own over the same arrays,
    the shape that made checking quadratic (every scope rescanned every access of the program)."""
    head = ["kernel copies(x) -> y", "", f"x f32 [{COLS}] heap", f"y f32 [{COLS}] heap", ""]
    body = [f"{COLS} y[{{0}}] = x[{{0}}] + {k}" for k in range(length - len(head))]
    return "\n".join(head + body) + "\n"


SHAPES = {"chain": chain, "scope per line": scope_per_line}


def clear_caches() -> None:
    """Forget every line parsed, affine form and dependence answer: the front end starts cold."""
    for cache in (parse_line, affine, _conflict):
        cache.cache_clear()


def seconds(text: str) -> tuple[float, float]:
    """The time to parse `text` and the time to check it, every cache cleared."""
    clear_caches()
    started = time.perf_counter()
    program, diagnostics = parse_with_diagnostics(text)
    parsed = time.perf_counter()
    assert program is not None and not diagnostics and not check(program), diagnostics[:3]
    return parsed - started, time.perf_counter() - parsed


def measure() -> dict[tuple[str, int], tuple[float, float]]:
    seconds(chain(200))  # lark's tables and imports are not what is measured
    return {(shape, length): min(seconds(make(length)) for _ in range(3))
            for shape, make in SHAPES.items() for length in SIZES}


def table(figures: dict[tuple[str, int], tuple[float, float]]) -> str:
    rows = "".join(f"| {shape} | {length:,} | {parse:.2f} s | {check:.2f} s |\n"
                   for (shape, length), (parse, check) in figures.items())
    return ("\n## Long files\n\n`python bench/check_speed.py`: files of 2,000 to 20,000 lines, every cache cleared; "
            "the best of 3 runs. `chain` is a chain of fused stages under one outer scope; `scope per line` gives "
            "every body line a scope of its own (before issue 16, checking it took 0.8 s at 2,000 lines and 2.5 s "
            "at 4,000, growing with the square of the length).\n\n"
            "| file | lines | parse | check |\n|---|---|---|---|\n" + rows)


if __name__ == "__main__":
    print(table(measure()))
