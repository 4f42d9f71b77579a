"""Elementwise functions in `:v` nests wider than the target's registers, against nests as wide as them.

    python bench/vector_width.py            # writes bench/results/vector_width.md

The C backend computes a `:v` scope in pieces of up to 64 bytes whatever the target (16 f32 lanes,
which AVX2 holds in two registers). For `y = f(x)` over 4096 floats (first-level cache), with f one of
max(x, 0), exp, tanh and erf, a `256 16:v` nest against a `512 8:v` one on x86-avx2 and native, each
run by the harness with `--repeats` timed runs per process (inputs uniform in [-4, 4)), `--rounds`
processes of each, alternating: medians in ns per element, and the median of the per-round ratios
16-lane / 8-lane. GCC compares a vector wider than the registers lane by lane with branches, so the
helpers that compare are written as halves there (codegen/vector_helpers.py `_halved`); this shows whether a
wide nest costs what a register-wide one does.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
from pathlib import Path

from codegen import generate, get_target
from codegen.build import build
from dojo_ir import load

ELEMENTS = 4096
FUNCTIONS = {"max": "max({x} * 4, 0)", "exp": "exp({x} * 4)", "tanh": "tanh({x} * 4)", "erf": "erf({x} * 4)"}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def binary(target: str, function: str, lanes: int, work: Path) -> Path:
    x = f"x[{{0}}*{lanes}+{{1}}]"
    line = f"{ELEMENTS // lanes} {lanes}:v y[{{0}}*{lanes}+{{1}}] = {FUNCTIONS[function].format(x=x)}"
    program = load(f"kernel k(x) -> y\n\nx f32 [{ELEMENTS}] heap\ny f32 [{ELEMENTS}] heap\n\n{line}\n")
    return build(generate(program, get_target(target)), get_target(target), work).path


def per_element(path: Path, repeats: int, work: Path) -> float:
    given, taken = work / "x.in", work / "y.out"
    given.write_bytes(bytes(4 * ELEMENTS))
    out = subprocess.run([str(path), str(given), str(taken), str(repeats), "10", "7"], check=True,
                         capture_output=True, text=True).stdout.split()
    return median([float(s) for s in out[1::2]]) / ELEMENTS * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["x86-avx2", "native"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vector_width.md")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for target in args.targets:
            if not get_target(target).runnable():
                print(f"{target}: cannot run here, skipped")
                continue
            for function in FUNCTIONS:
                wide, narrow = binary(target, function, 16, work), binary(target, function, 8, work)
                rounds = [(per_element(wide, args.repeats, work), per_element(narrow, args.repeats, work))
                          for _ in range(args.rounds)]
                rows.append(f"| {target} | {function} | {median([w for w, _ in rounds]):.3f} | "
                            f"{median([n for _, n in rounds]):.3f} | {median([w / n for w, n in rounds]):.2f} |")
                print(rows[-1])
    lines = ["# `:v` nests wider than the registers", "",
             f"Written by `python bench/vector_width.py` on {platform.machine()}, a machine of 2 cores shared with "
             f"other work while it ran; {args.rounds} rounds of {args.repeats} timed runs.", "",
             "| target | f | 16 lanes (ns/element) | 8 lanes (ns/element) | 16 / 8 |", "|---|---|---|---|---|", *rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
