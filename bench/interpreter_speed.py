"""How fast the reference interpreter runs the sizes tests and fuzzing use.

Medians of 5 runs; results in bench/results/interpreter_speed.md.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from dojo_ir import interpret, load, random_inputs
from dojo_ir.library import KERNELS

CASES = {
    "1,000,000-iteration elementwise": "kernel k(x) -> y\nx f32 [1000, 1000] heap\ny f32 [1000, 1000] heap\n"
    "1000 1000 y[{0},{1}] = exp(x[{0},{1}]) * 2 + {1}\n",
    "512 x 512 x 512 matmul (134M iterations)": "kernel k(a, b) -> c\na f32 [512, 512] heap\nb f32 [512, 512] heap\n"
    "c f32 [512, 512] heap\n512 512 c[{0},{1}] = 0\n512 512 512 c[{0},{1}] += a[{0},{2}] * b[{2},{1}]\n",
    "library softmax, 24576 x 512": KERNELS["softmax"].text(),
}


def main() -> None:
    rows = ["# Reference interpreter speed", "", "`python bench/interpreter_speed.py`; medians of 5 runs.", "",
            "| program | median |", "|---|---|"]
    for label, text in CASES.items():
        program = load(text)
        inputs = random_inputs(program, 0)
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            interpret(program, inputs)
            samples.append(time.perf_counter() - started)
        rows.append(f"| {label} | {statistics.median(samples):.2f} s |")
    out = Path(__file__).parent / "results" / "interpreter_speed.md"
    out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
