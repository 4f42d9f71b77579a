"""Parse + check + print of a 200-line `.dojo` file.

Builds a 200-line kernel (a chain of fused row-wise operations in the style of
the library's softmax and layernorm), then times the whole front end:
`diagnose` (parse and every checker rule) followed by `to_text`.

- cold: every cache (lines, index forms, dependence questions) is cleared
  before every run, so every line goes through the lark parser;
- edit: one line differs from the previous run, as after a keystroke in an
  editor; the other lines come from the per-line cache.

Then times the parse and `check` of files of 2,000 to 20,000 lines
(bench/check_speed.py). Prints medians over many runs and writes
bench/results/parse_speed.md.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.check_speed import clear_caches  # noqa: E402
from bench.check_speed import measure as measure_long_files  # noqa: E402
from bench.check_speed import table as long_files_table  # noqa: E402
from bench.sections import machine  # noqa: E402
from dojo_ir import diagnose, to_text  # noqa: E402

ROWS, COLS = 4096, 512


def two_hundred_lines() -> str:
    """A kernel of 28 header and declaration lines and 172 body lines."""
    stages = 24
    lines = [f"# A chain of {stages} fused row-wise stages; 200 lines in all.",
             f"kernel chain(x, g) -> y{stages - 1}", ""]
    lines += [f"x f32 [{ROWS}, {COLS}] heap", f"g f32 [{COLS}] heap"]
    lines += [f"y{i} f32 [{ROWS}, {COLS}] heap" for i in range(stages)]
    lines.append("")
    previous = "x"
    body = []
    for i in range(stages):
        body += [
            f"m{i}[{{0}}] = -inf",
            f"512 m{i}[{{0}}] max= {previous}[{{0}},{{1}}]",
            f"512 y{i}[{{0}},{{1}}] = exp({previous}[{{0}},{{1}}] - m{i}[{{0}}]) * g[{{1}}]",
            f"s{i}[{{0}}] = 0",
            f"512 s{i}[{{0}}] += y{i}[{{0}},{{1}}]",
            f"512 y{i}[{{0}},{{1}}] = y{i}[{{0}},{{1}}] / (s{i}[{{0}}] + 1e-5)",
            f"512 y{i}[{{0}},{{1}}] = max(y{i}[{{0}},{{1}}], 0.5 * -{previous}[{{0}},{{1}}])",
        ]
        previous = f"y{i}"
    for i in range(stages):
        lines.insert(4 + stages + 2 * i, f"m{i} f32 [{ROWS}:1] heap")
        lines.insert(5 + stages + 2 * i, f"s{i} f32 [{ROWS}] heap")
    body_lines = [f"{ROWS} {body[0]}"] + [f"|    {b}" for b in body[1:]]
    text = "\n".join(lines + body_lines[: 200 - len(lines)]) + "\n"
    assert len(text.splitlines()) == 200, len(text.splitlines())
    return text


def front_end(text: str) -> str:
    program, diagnostics = diagnose(text)
    assert program is not None and not diagnostics, diagnostics[:3]
    return to_text(program)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def measure(runs: int = 60) -> dict[str, float]:
    text = two_hundred_lines()
    front_end(text)  # import-time work and lark's tables are not what is measured
    cold, edit = [], []
    for _ in range(runs):
        clear_caches()
        started = time.perf_counter()
        front_end(text)
        cold.append(time.perf_counter() - started)
    lines = text.splitlines()
    for run in range(runs):
        # A different literal on one body line each run: a keystroke.
        edited = lines[:]
        edited[-1] = edited[-1].replace("0.5", f"0.{run + 1}")
        started = time.perf_counter()
        front_end("\n".join(edited) + "\n")
        edit.append(time.perf_counter() - started)
    return {"cold_ms": median_ms(cold), "edit_ms": median_ms(edit)}


def main() -> None:
    figures = measure()
    report = (
        "# Parse + check + print of a 200-line file\n\n"
        "`python bench/parse_speed.py`: `diagnose` (the parse of every line: plain body lines by the parser's fast "
        "path, the others by lark; the scope tree; every checker rule including the dependence analysis) then "
        "`to_text`, on a 200-line kernel. Medians of 60 runs. Before the fast path (issue 16) the cold case took "
        "25.2 ms.\n\n"
        f"Machine: {machine()}. The machine is shared with other people's jobs, so the figures are noisy; "
        "compare medians taken together.\n\n"
        "| case | median |\n|---|---|\n"
        f"| cold (every cache cleared before each run) | {figures['cold_ms']:.1f} ms |\n"
        f"| after a one-line edit (other lines from the cache) | {figures['edit_ms']:.1f} ms |\n"
        + long_files_table(measure_long_files())
    )
    out = Path(__file__).parent / "results" / "parse_speed.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
