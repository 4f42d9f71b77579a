"""The heuristic pass's register-blocked kernels with the blocks of the reduction outside the column
blocks and the broadcast operand's slice packed (agent/blocking.py, chosen from this machine's private
cache) and with the column blocks outermost (the order before it: the same pass for this machine
with a 128 KiB private cache, which keeps every block size and tile), against PyTorch, paired by round.

    python bench/blocking.py                         # matmul and swiglu, 9 alternating rounds, 1 and 2 threads
    python bench/blocking.py --kernels matmul --rounds 15 --threads 2

Each round times both schedules (the runner's harness: fresh inputs before every repetition, 20
repetitions, the runner's `bench.lock` held) and torch (libgen/peers in a forked child: at least 0.5 s of calls), in an
order that alternates from round to round. Per schedule: the median of the rounds' medians, the least
time, and its time over torch's of the same round (median and range). Only the kernels whose schedule
the order changes are worth timing: the others are the same program twice. Writes its section of
bench/results/blocking.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sections import bind_openmp_threads, machine, write_section  # noqa: E402

CPUS = os.sched_getaffinity(0)  # before an OpenMP runtime binds this process to its first core
bind_openmp_threads()

from agent.passes import heuristic  # noqa: E402
from bench.library import run_peer  # noqa: E402
from codegen import generate, get_target  # noqa: E402
from codegen.build import build  # noqa: E402
from codegen.targets import Target  # noqa: E402
from dojo_ir import load, random_inputs  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from libgen.peers import machine_lock, torch_peer  # noqa: E402
from runner.verify import encode  # noqa: E402

RESULTS = ROOT / "bench" / "results"
REPEATS = 20
TORCH_TIMEOUT_S = 120
COLUMNS_OUTERMOST = "column blocks outermost"
REDUCTION_OUTSIDE = "k blocks outside, a's slice packed (this machine's cache)"


def schedules(kernel: str, target: Target) -> dict[str, list[str]]:
    spec = load(KERNELS[kernel].text())
    small = replace(target, caches=replace(target.caches, private=128 << 10))
    return {COLUMNS_OUTERMOST: heuristic(spec, small), REDUCTION_OUTSIDE: heuristic(spec, target)}


def harness_times(binary: Path, data: Path, threads: int, seed: int) -> list[float]:
    environment = os.environ | {"OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
    with machine_lock():  # as the runner times: no other benchmark on this machine meanwhile
        out = subprocess.run([str(binary), str(data), os.devnull, str(REPEATS), "2", str(seed)], env=environment,
                             capture_output=True, text=True, check=True).stdout
    return [float(line.split()[1]) for line in out.splitlines() if line.startswith("time ")]


def torch_times(kernel: str, inputs: dict, threads: int) -> tuple[float, float]:
    """torch in a forked child (`bench.library.run_peer`): its OpenMP threads, which wait spinning on
    their cores for a while after each call, end with it instead of taking a core from the next
    binary timed."""
    torch_peer.THREADS = threads  # read by the child, which `prepare`s after the fork
    outcome = run_peer("torch", kernel, dict(KERNELS[kernel].params), inputs, None, TORCH_TIMEOUT_S, {})
    if not outcome.ok:
        raise SystemExit(f"torch failed on {kernel}: {outcome.failure}")
    return outcome.median_s, outcome.min_s


def time_kernel(kernel: str, threads: int, rounds: int, directory: Path) -> dict[str, tuple[list, list]]:
    """Per contender, its medians and minimums, one per round."""
    target = get_target("native")
    spec = load(KERNELS[kernel].text())
    inputs = random_inputs(spec, 0)
    programs = {name: advance(spec, moves) for name, moves in schedules(kernel, target).items()}
    binaries = {name: build(generate(program, target), target, directory).path for name, program in programs.items()}
    data = directory / f"{kernel}.inputs"
    data.write_bytes(encode(spec, inputs))
    times: dict[str, tuple[list, list]] = {name: ([], []) for name in [*binaries, "torch"]}
    for round_ in range(rounds):
        for name in list(times) if round_ % 2 == 0 else list(reversed(times)):
            if name == "torch":
                median, least = torch_times(kernel, inputs, threads)
            else:
                repetitions = harness_times(binaries[name], data, threads, round_)
                median, least = statistics.median(repetitions), min(repetitions)
            times[name][0].append(median)
            times[name][1].append(least)
        print(f"{kernel} {threads} thread(s) round {round_}: " + ", ".join(
            f"{name} {medians[-1] * 1e3:.2f} ms" for name, (medians, _) in times.items()), flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=["matmul", "swiglu"], choices=sorted(KERNELS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, CPUS)  # torch's OpenMP bound this thread to one core, and the binaries inherit it
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for kernel in args.kernels:
            for threads in args.threads:
                rows.append((kernel, threads, time_kernel(kernel, threads, args.rounds, Path(directory))))
    write_section(RESULTS / "blocking.md", report(rows, args.rounds))
    print(f"wrote {RESULTS / 'blocking.md'}")
    return 0


def report(rows: list[tuple[str, int, dict[str, tuple[list, list]]]], rounds: int) -> str:
    lines = ["# The order of a blocked reduction's blocks, against torch", "",
             f"`python bench/blocking.py` on {machine()}, a machine shared with other work (other engineers' tests "
             f"and benchmarks ran throughout). {rounds} alternating rounds; per schedule the median of the rounds' "
             f"medians ({REPEATS} repetitions each), the least time, and its time over torch's in the same round "
             "(median and range; below 1 PerfDojo is faster).", "",
             "| kernel | threads | schedule | median | least | over torch, paired |", "|---|---|---|---|---|---|"]
    target = get_target("native")
    changed = [k for k in sorted(KERNELS) if len({tuple(m) for m in schedules(k, target).values()}) > 1]
    lines[4:4] = [f"The library kernels whose heuristic schedule the order changes on this machine: "
                  f"{', '.join(changed)}; every other kernel's is the same program either way.", ""]
    for kernel, threads, times in rows:
        torch_medians, torch_least = times["torch"]
        lines.append(f"| {kernel} | {threads} | torch | {statistics.median(torch_medians) * 1e3:.2f} ms | "
                     f"{min(torch_least) * 1e3:.2f} ms | |")
        for name in (COLUMNS_OUTERMOST, REDUCTION_OUTSIDE):
            medians, least = times[name]
            ratios = [ours / theirs for ours, theirs in zip(medians, torch_medians, strict=True)]
            lines.append(f"| {kernel} | {threads} | {name} | {statistics.median(medians) * 1e3:.2f} ms | "
                         f"{min(least) * 1e3:.2f} ms | **{statistics.median(ratios):.2f}** "
                         f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
