"""conv2's heuristic schedule with the padding that its widened tail reads zeroed, and without.

    python bench/padding.py                # 7 alternating rounds, 1 and 2 threads
    python bench/padding.py --rounds 3 --threads 1

The heuristic pass's conv2 (paper's shape, this machine's target) computes each output row's tail
of 6 lanes as a vector of 8 whose reads reach 2 elements past the staged input row's last written
one (codegen/padding.py). The C backend zeroes them; this script builds the same C source a
second time with the zeroing loops taken out, so that those lanes read whatever the stack held,
and times both binaries in alternating rounds (the runner's harness: fresh inputs before every
repetition, 10 repetitions, the median; the runner's `bench.lock` held). Medians over the rounds
and the ratio per round. Writes its section of bench/results/padding.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.passes import heuristic  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen import generate, get_target  # noqa: E402
from codegen.build import build  # noqa: E402
from dojo_ir import load, random_inputs  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402
from runner.verify import encode  # noqa: E402

RESULTS = ROOT / "bench" / "results"
REPEATS = 10
ZEROING = re.compile(r"\bdojo_[rk]\b")  # the loop variables of `zero_padding`'s two lines


def without_zeroing(source: str) -> str:
    """The source without the loops that zero the padding (`codegen.padding.zero_padding`'s two lines)."""
    return "".join(line for line in source.splitlines(keepends=True) if not ZEROING.search(line))


def median_time(binary: Path, data: Path, threads: int, seed: int) -> float:
    environment = os.environ | {"OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
    with machine_lock():  # as the runner times: no other benchmark on this machine meanwhile
        out = subprocess.run([str(binary), str(data), os.devnull, str(REPEATS), "2", str(seed)], env=environment,
                             capture_output=True, text=True, check=True).stdout
    return statistics.median(float(line.split()[1]) for line in out.splitlines() if line.startswith("time "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    target = get_target("native")
    spec = load(KERNELS["conv2"].text())
    program = advance(spec, heuristic(spec, target))
    zeroed = generate(program, target)
    sources = {"padding zeroed": zeroed, "padding as the stack left it": without_zeroing(zeroed)}
    assert sources["padding zeroed"] != sources["padding as the stack left it"], "conv2 reads no padding"
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        binaries = {name: build(text, target, Path(directory)).path for name, text in sources.items()}
        data = Path(directory) / "inputs"
        data.write_bytes(encode(program, random_inputs(program, 0)))
        for threads in args.threads:
            times: dict[str, list[float]] = {name: [] for name in binaries}
            for round_ in range(args.rounds):
                for name in list(binaries) if round_ % 2 == 0 else list(reversed(binaries)):
                    times[name].append(median_time(binaries[name], data, threads, round_))
            ratios = [g / z for g, z in zip(times["padding as the stack left it"], times["padding zeroed"],
                                            strict=True)]
            rows.append((threads, {n: statistics.median(t) for n, t in times.items()}, ratios))
            print(f"{threads} thread(s): " + ", ".join(f"{n} {statistics.median(t) * 1e3:.1f} ms"
                                                      for n, t in times.items()), flush=True)
    write_section(RESULTS / "padding.md", report(rows, args.rounds))
    print(f"wrote {RESULTS / 'padding.md'}")
    return 0


def report(rows: list[tuple[int, dict[str, float], list[float]]], rounds: int) -> str:
    lines = ["# conv2 with the padding its widened tail reads zeroed, and without", "",
             f"`python bench/padding.py` on {machine()}, a machine shared with other work. The heuristic pass's "
             "conv2 (8 x 64 -> 64 x 56 x 56, 3x3) for this machine, built twice from the same C source, once with "
             "the loops that zero the padding taken out; each binary's median over "
             f"{REPEATS} repetitions on fresh inputs, in {rounds} alternating rounds. Medians over the rounds; "
             "the slow-down is the time without zeroing over the time with, per round, its median and range.", "",
             "| threads | zeroed | as the stack left it | slow-down without zeroing |", "|---|---|---|---|"]
    for threads, medians, ratios in rows:
        lines.append(f"| {threads} | {medians['padding zeroed'] * 1e3:.1f} ms | "
                     f"{medians['padding as the stack left it'] * 1e3:.1f} ms | **{statistics.median(ratios):.2f}x** "
                     f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
