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
child, on the same inputs, their outputs checked. Every ratio compares times of this one run.
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


def perfdojo(spec: Program, target: str) -> dict:
    moves = heuristic(spec, target)
    result = measure(LocalRunner(), advance(spec, moves), target=target, repeats=3, warmup=1, spec=spec)
    if result.error is not None or result.verified is False:
        return {"failure": (result.error or f"wrong numbers: {result.max_error}").splitlines()[0][:120]}
    return {"median_s": result.median_s, "moves": len(moves)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--targets", nargs="+", default=["native", "x86-avx2"])
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per peer and case")
    parser.add_argument("--out", type=Path, default=RESULTS / "matrix_products.md")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets if get_target(t).runnable()]

    started = time.perf_counter()
    peaks = {t: [peak_flops(get_target(t))] for t in targets}
    rows = []
    for name in args.cases:
        kernel, change = CASES[name]
        shape = shape_of(kernel, change)
        spec = spec_of(kernel, shape)
        inputs = random_inputs(spec, 0)
        expected = reference(kernel, inputs)
        row = {"case": name, "shape": "x".join(str(v) for v in shape.values()), "flops": work(spec).flops,
               "peers": {}, "dojo": {}}
        for peer in args.peers:
            outcome = run_peer(peer, kernel, shape, inputs, expected, args.timeout, {})
            row["peers"][peer] = outcome.median_s if outcome.ok else None
            print(f"{name:20} {peer:14} {format_time(outcome.median_s) if outcome.ok else outcome.failure}",
                  flush=True)
        for target in targets:
            row["dojo"][target] = perfdojo(spec, target)
            print(f"{name:20} {target:14} {row['dojo'][target]}", flush=True)
        rows.append(row)
        del inputs, expected
    for target in targets:
        peaks[target].append(peak_flops(get_target(target)))
    peak = {t: max(values) for t, values in peaks.items()}
    text = report(rows, targets, args.peers, peak, peaks, {
        "command": "python bench/matrix_products.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": time.perf_counter() - started,
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
        "PerfDojo: `agent.passes.heuristic` for the target, no search, timed by the runner (median over at "
        "least 1 s, verified against the spec). Peers as in bench/library.py (median over at least 0.5 s, "
        "outputs checked). `of peak`: the spec's flops over the time, as a share of the target's FMA peak. "
        "`best peer / PerfDojo`: above 1, PerfDojo is faster. The FMA bound of a case is its flops at the "
        "peak, so time / bound is 1 / (of peak). A peer may do fewer flops than the spec (oneDNN's Winograd "
        "convolution, which PyTorch can choose for conv2's 3 x 3 filters), so a convolution's share of peak "
        "is the direct convolution's measure and the peers' times are a separate comparison.",
        "",
        "| case | shape | " + " | ".join(peers) + " | "
        + " | ".join(f"PerfDojo {t} | of peak | best peer / PerfDojo" for t in targets) + " |",
        "|" + "---|" * (2 + len(peers) + 3 * len(targets)),
    ]
    for row in rows:
        times = [t for t in row["peers"].values() if t]
        best = min(times) if times else None
        cells = [row["case"], row["shape"]]
        cells += [format_time(row["peers"][p]) if row["peers"].get(p) else "fail" for p in peers]
        for target in targets:
            dojo = row["dojo"][target]
            if "median_s" not in dojo:
                cells += [dojo.get("failure", "fail"), "-", "-"]
                continue
            share = row["flops"] / dojo["median_s"] / peak[target]
            cells += [format_time(dojo["median_s"]), f"{share:.0%}", f"{best / dojo['median_s']:.2f}" if best else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Against numpy, the BLAS most users have: "
              + "; ".join(f"{r['case']} {t} {r['dojo'][t]['median_s'] / r['peers']['numpy']:.2f}x numpy's time"
                          for r in rows for t in targets
                          if "median_s" in r["dojo"][t] and r["peers"].get("numpy")) + "."]
    means = {t: _geomean_speedup(rows, t) for t in targets}
    lines += ["", "Geometric mean of best peer / PerfDojo: "
              + "; ".join(f"{t} {m:.2f}" for t, m in means.items() if m is not None) + ".", ""]
    lines.append(f"Load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}.")
    return "\n".join(lines) + "\n"


def _geomean_speedup(rows: list[dict], target: str) -> float | None:
    ratios = [min(t for t in r["peers"].values() if t) / r["dojo"][target]["median_s"] for r in rows
              if "median_s" in r["dojo"][target] and any(r["peers"].values())]
    return statistics.geometric_mean(ratios) if ratios else None


if __name__ == "__main__":
    sys.exit(main())
