"""Matrix products from the heuristic pass alone (no search), against their peers and the FMA peak.

    python bench/matrix_products.py                        # native and x86-avx2, every case
    python bench/matrix_products.py --cases matmul conv2 --targets native

For each case (a library kernel at the paper's shape, or at a shape that no vector width or tile
divides) and each C target this machine runs: the heuristic pass's program (`agent.passes.heuristic`
for that target's facts), built and timed by the runner (`runner.measure.measure`: at least 1 s,
verified against the spec), its GFLOP/s, and that as a share of the FMA peak measured with the
target's own vectors (`runner.roofline.peak_flops`: AVX2's 256-bit FMAs on an AVX-512 machine)
in the same run, at its start and its end (the higher counts: a peak is a best case). The peers
(numpy, PyTorch eager, torch.compile, ONNX Runtime) run as in bench/library.py, each in a forked
child, on the same inputs, their outputs checked. Every contestant runs once a round, in turn, for
`--rounds` rounds: a shared host's load comes and goes within seconds, so a time is the median of
the rounds' medians and a ratio is the median over the rounds of the ratio within each round.
Writes bench/results/matrix_products.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.passes import heuristic  # noqa: E402
from bench.library import run_peer  # noqa: E402
from bench.pairing import paired  # noqa: E402
from bench.sections import machine  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import random_inputs  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from dojo_ir.tree import Program  # noqa: E402
from libgen.peers import reference, spec_of  # noqa: E402
from runner.local import LocalRunner  # noqa: E402
from runner.measure import measure  # noqa: E402
from runner.result import format_time  # noqa: E402
from runner.roofline import peak_flops, work  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PEERS = ("numpy", "torch", "torch.compile", "onnxruntime")
# (name, kernel, shape): None is the paper's shape (Table 3)
CASES = {
    "matmul": ("matmul", None),
    "bmm": ("bmm", None),
    "swiglu": ("swiglu", None),
    "conv1": ("conv1", None),  # rows of 508 outputs: 31 vectors of 16 and a tail of 12
    "conv2": ("conv2", None),  # rows of 54 outputs
    "matmul-500x700x300": ("matmul", {"m": 500, "k": 700, "n": 300}),
}


def shape_of(kernel: str, shape: dict[str, int] | None) -> dict[str, int]:
    return dict(KERNELS[kernel].params) | (shape or {})


def perfdojo(program: Program, spec: Program, target: str) -> float | str:
    """The program's median time, or why it has none."""
    result = measure(LocalRunner(), program, target=target, repeats=3, warmup=1, spec=spec, min_time_s=0.5)
    if result.error is not None or result.verified is False:
        return (result.error or f"wrong numbers: {result.max_error}").splitlines()[0][:120]
    return result.median_s


def time_case(name: str, peers: list[str], targets: list[str], rounds: int, timeout_s: float) -> dict:
    """Each peer's and target's median time in each round, the contestants in turn within a round."""
    kernel, change = CASES[name]
    shape = shape_of(kernel, change)
    spec = spec_of(kernel, shape)
    inputs = random_inputs(spec, 0)
    expected = reference(kernel, inputs)
    programs = {t: advance(spec, heuristic(spec, t)) for t in targets}
    times: dict[str, list[float]] = {c: [] for c in [*peers, *targets]}
    failures: dict[str, str] = {}
    for round_ in range(rounds):
        for contestant in times:
            if contestant in failures:
                continue
            if contestant in programs:
                outcome = perfdojo(programs[contestant], spec, contestant)
            else:
                result = run_peer(contestant, kernel, shape, inputs, expected, timeout_s, {})
                outcome = result.median_s if result.ok else result.failure
            if isinstance(outcome, str):
                failures[contestant] = outcome
            else:
                times[contestant].append(outcome)
            print(f"{name:20} round {round_ + 1} {contestant:14} "
                  f"{outcome if isinstance(outcome, str) else format_time(outcome)}", flush=True)
    return {"case": name, "shape": "x".join(str(v) for v in shape.values()), "flops": work(spec).flops,
            "rounds": {c: t for c, t in times.items() if c not in failures}, "failures": failures}


def median_time(row: dict, contestant: str) -> float | None:
    rounds = row["rounds"].get(contestant)
    return statistics.median(rounds) if rounds else None


def best_peer_over(row: dict, target: str, peers: list[str]) -> float | None:
    """The median over the rounds of the fastest peer's time in a round over the target's."""
    ran = [p for p in peers if p in row["rounds"]]
    if not ran or target not in row["rounds"]:
        return None
    best = [min(times) for times in zip(*(row["rounds"][p] for p in ran), strict=True)]
    return paired({"best": best, target: row["rounds"][target]}, "best", target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--targets", nargs="+", default=["native", "x86-avx2"])
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--rounds", type=int, default=5, help="times each contestant runs, in turn")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per peer, case and round")
    parser.add_argument("--out", type=Path, default=RESULTS / "matrix_products.md")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets if get_target(t).runnable()]

    started = time.perf_counter()
    peaks = {t: [peak_flops(get_target(t))] for t in targets}
    rows = [time_case(name, args.peers, targets, args.rounds, args.timeout) for name in args.cases]
    for target in targets:
        peaks[target].append(peak_flops(get_target(target)))
    peak = {t: max(values) for t, values in peaks.items()}
    text = report(rows, targets, args.peers, peak, peaks, {
        "command": "python bench/matrix_products.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": time.perf_counter() - started, "rounds": args.rounds,
    })
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


def report(rows: list[dict], targets: list[str], peers: list[str], peak: dict[str, float],
           peaks: dict[str, list[float]], meta: dict) -> str:
    lines = [
        "# Matrix products: the heuristic pass against the peers and the FMA peak",
        "",
        f"`{meta['command']}`, {meta['date']}, {meta['elapsed_s']:.0f} s.",
        "",
        f"Machine: {machine()}.",
        "FMA peak, f32, all cores, with each target's vectors (`runner.roofline.peak_flops`, at the start and "
        "the end of the run; the higher counts): "
        + "; ".join(f"{t} {peak[t] / 1e9:.0f} GFLOP/s ({', '.join(f'{v / 1e9:.0f}' for v in peaks[t])})"
                    for t in targets) + ".",
        "",
        f"{meta['rounds']} rounds; in each, every contestant runs in turn. PerfDojo: "
        "`agent.passes.heuristic` for the target, no search, timed by the runner (median over at least 0.5 s, "
        "verified against the spec). Peers as in bench/library.py (median over at least 0.5 s, outputs "
        "checked). A time is the median of the rounds' medians. `of peak`: the spec's flops over that time, as "
        "a share of the target's FMA peak. `best peer / PerfDojo`: the median over the rounds of the fastest "
        "peer's time in the round over PerfDojo's; above 1, PerfDojo is faster. The FMA bound of a case is its "
        "flops at the peak, so time / bound is 1 / (of peak). A peer may do fewer flops than the spec "
        "(oneDNN's Winograd convolution, which PyTorch can choose for conv2's 3 x 3 filters), so a "
        "convolution's share of peak is the direct convolution's measure and the peers' times are a separate "
        "comparison.",
        "",
        "| case | shape | " + " | ".join(peers) + " | "
        + " | ".join(f"PerfDojo {t} | of peak | best peer / PerfDojo" for t in targets) + " |",
        "|" + "---|" * (2 + len(peers) + 3 * len(targets)),
    ]
    for row in rows:
        cells = [row["case"], row["shape"]]
        cells += [_cell(row, p) for p in peers]
        for target in targets:
            median = median_time(row, target)
            if median is None:
                cells += [_cell(row, target), "-", "-"]
                continue
            ratio = best_peer_over(row, target, peers)
            cells += [format_time(median), f"{row['flops'] / median / peak[target]:.0%}",
                      f"{ratio:.2f}" if ratio else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    against_numpy = [f"{r['case']} {t} {paired(r['rounds'], t, 'numpy'):.2f}x numpy's time"
                     for r in rows for t in targets if t in r["rounds"] and "numpy" in r["rounds"]]
    lines += ["", "Against numpy, the BLAS most users have (paired by round): " + "; ".join(against_numpy) + "."]
    means = {t: _geomean([best_peer_over(r, t, peers) for r in rows]) for t in targets}
    lines += ["", "Geometric mean of best peer / PerfDojo: "
              + "; ".join(f"{t} {m:.2f}" for t, m in means.items() if m is not None) + ".", ""]
    lines.append(f"Load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}.")
    return "\n".join(lines) + "\n"


def _cell(row: dict, contestant: str) -> str:
    median = median_time(row, contestant)
    return format_time(median) if median is not None else row["failures"].get(contestant, "fail")


def _geomean(ratios: list[float | None]) -> float | None:
    known = [r for r in ratios if r]
    return statistics.geometric_mean(known) if known else None


if __name__ == "__main__":
    sys.exit(main())
