"""How much the median of `dojo run` moves between runs of the same program.

A search compares programs by the runner's median, so two runs of one program must agree much
better than the speed-ups it looks for. Each program is run with `dojo run --json` ten times, each
a separate process (as a search or a user would call it): with the defaults (2 warm-up, 10 timed
repetitions on fresh inputs, more until they add up to 1 s), and with exactly 10 repetitions
(`--min-time 0`). The spread is max/min - 1 of the ten medians; the goal is < 5% on a quiet
machine. The load average is recorded, as other work on the machine is the main source of noise.
Results in bench/results/runner_noise.md.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dojo_ir import load, to_text
from dojo_ir.derivation import record
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply

RUNS = 10
ROOT = Path(__file__).resolve().parent.parent
# softmax with its six row loops fused into one, run in parallel over the rows
PARALLEL_SOFTMAX = [
    "join_scopes(op=m#1, depth=0)", "join_scopes(op=m#1, depth=0)", "join_scopes(op=m#1, depth=0)",
    "join_scopes(op=m#1, depth=0)", "join_scopes(op=m#1, depth=0)", "parallelize_scope(op=m#1, depth=0)",
]


def programs(folder: Path) -> list[tuple[str, Path]]:
    softmax = folder / "softmax.dojo"
    softmax.write_text(KERNELS["softmax"].text(m=1024, n=512))
    matmul = folder / "matmul.dojo"
    matmul.write_text(KERNELS["matmul"].text(m=256, k=256, n=256))
    program = load(softmax.read_text())
    for move in PARALLEL_SOFTMAX:
        program = apply(program, move)
    fused = folder / "softmax_parallel.dojo"
    fused.write_text(to_text(record(program, PARALLEL_SOFTMAX, "softmax.dojo")))
    return [("softmax 1024 x 512, spec", softmax), ("matmul 256 x 256 x 256, spec", matmul),
            ("softmax 1024 x 512, fused, parallel rows", fused)]


def medians(file: Path, cache: Path, options: list[str]) -> list[tuple[float, int]]:
    """The median and the number of repetitions of each of RUNS `dojo run`s."""
    found = []
    for _ in range(RUNS):
        done = subprocess.run([sys.executable, "-m", "server.cli", "run", str(file), "--json", *options], cwd=ROOT,
                              capture_output=True, text=True, check=False,
                              env=os.environ | {"DOJO_CACHE": str(cache)})
        result = json.loads(done.stdout)
        if not (result["error"] is None and result["verified"]):
            raise SystemExit(f"{file.name}: the run failed: {result}")
        found.append((result["median_s"], result["repeats"]))
    return found


def busy_seconds() -> float:
    """CPU seconds this machine has spent outside idle since boot, all cores together."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # 3, 4: idle, iowait


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, file in programs(Path(work)):
            for label, options in (("1 s (default)", []), ("10 runs", ["--min-time", "0"])):
                before = time.perf_counter(), busy_seconds(), children_seconds()
                found = medians(file, Path(work) / "cache", options)
                wall, busy, ours = (now - then for now, then in
                                    zip((time.perf_counter(), busy_seconds(), children_seconds()), before, strict=True))
                times, repeats = [m for m, _ in found], [r for _, r in found]
                rows.append(f"| {name} | {label} | {statistics.median(repeats):.0f} | {min(times) * 1e3:.3f} ms | "
                            f"{max(times) * 1e3:.3f} ms | {max(times) / min(times) - 1:.1%} | "
                            f"{max(busy - ours, 0) / wall:.2f} |")
                print(rows[-1], flush=True)
    report = ["# Noise of the runner's median", "",
              f"`python bench/runner_noise.py`: each program run {RUNS} times with `dojo run --json` (separate "
              f"processes; 2 warm-up, fresh inputs each repetition) on this {os.cpu_count()}-core machine, with the "
              "default minimum timed span of 1 s and with exactly 10 repetitions. Spread = max/min - 1 of the "
              "medians; the goal is < 5% on a quiet machine. Other load = the cores that other processes kept busy "
              "meanwhile, on average (the machine's busy time minus this benchmark's own).", "",
              "| program | timed | repetitions | min median | max median | spread | other load |",
              "|---|---|---|---|---|---|---|", *rows]
    out = Path(__file__).parent / "results" / "runner_noise.md"
    out.write_text("\n".join(report) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
