"""Tune the library: each of the 16 kernels at the benchmark's shape, with several methods at one budget.

    python bench/tune_library.py                          # heuristic pass + sa on both graphs, 200 evaluations
    python bench/tune_library.py --kernels softmax add --runs sa:edges sa:heuristic random:edges --budget 1000
    python bench/tune_library.py --quick                  # the library's quick shapes
    python bench/tune_library.py --quick --runs sa:heuristic --budget 1000 --out bench/results/convergence_runs

For each kernel the spec is written to `OUT/<kernel>.spec.dojo` at the shape bench/library.py runs
(`shape_of`, the same `--scale`), then each run (`method:graph`) calls `agent.tune` with the budget and
logs every evaluation to `OUT/logs/<kernel>.<method>.<graph>.jsonl`; the fastest result of the runs,
measured again for at least a second, is `OUT/<kernel>.dojo`, whose derivation replays from the spec
(`dojo replay`). `bench/library.py --tuned OUT` then compares those with the peers.

Convergence (the paper's Figure 13): from the logs, the best time after each evaluation per run,
plotted with a panel per kernel (`--report`'s name in .png), and for each search how many
evaluations it took to come within 5% of its final best (`--report`, by default
bench/results/convergence.md; the bar is 95% of the 1000-evaluation result within 300 evaluations,
WITHIN_AT).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.tune import KernelTuneOptions, tune  # noqa: E402
from bench.library import best_so_far, shape_of  # noqa: E402
from bench.sections import archive_log  # noqa: E402
from dojo_ir import load, to_text  # noqa: E402
from dojo_ir.derivation import record as record_moves  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from runner.files import write_atomically  # noqa: E402

RESULTS = ROOT / "bench" / "results"
RUNS = ("heuristic", "sa:edges", "sa:heuristic")
SEARCHES = ("random", "sa")


def tune_kernel(kernel: str, runs: list[str], budget: int, out: Path, scale: int, quick: bool) -> dict:
    shape, change = shape_of(kernel, scale, quick)
    spec_file = out / f"{kernel}.spec.dojo"
    spec_file.write_text(KERNELS[kernel].text(**shape))
    spec = load(spec_file.read_text())
    record = {"kernel": kernel, "shape": shape, "shape_change": change, "runs": {}}
    best = None
    for run in runs:
        method, _, graph = run.partition(":")
        log = out / "logs" / f"{kernel}.{method}.{graph or 'edges'}.jsonl"
        log.unlink(missing_ok=True)
        log.with_name(log.name + ".gz").unlink(missing_ok=True)
        started = time.perf_counter()
        result = tune(spec, KernelTuneOptions(method, budget, graph=graph or "edges"), spec_path=spec_file.name,
                      log=log)
        wall = time.perf_counter() - started
        log = archive_log(log)
        record["runs"][run] = {"spec_s": result.spec_s, "time_s": result.time_s, "evaluations": result.evaluations,
                               "moves": len(result.moves), "wall_s": wall, "log": str(log.relative_to(out))}
        print(f"{kernel:11} {run:20} {result.evaluations:5} evaluations  spec {result.spec_s}  best {result.time_s}"
              f"  ({wall:.0f} s)", flush=True)
        if result.time_s is not None and (best is None or result.time_s < best.time_s):
            best = result
    if best is not None and best.spec_s is not None and best.time_s >= best.spec_s:
        record["best"] = {"time_s": best.spec_s, "spec_s": best.spec_s, "method": "spec", "graph": ""}
        best_program = record_moves(spec, [], spec_file.name)  # no run beat the spec: it is the best program
    elif best is not None:
        record["best"] = {"time_s": best.time_s, "spec_s": best.spec_s, "method": best.method, "graph": best.graph}
        best_program = best.program
    if best is not None:
        write_atomically(out / f"{kernel}.dojo", to_text(best_program).encode())
    return record


def evaluations_to_within(log: Path, fraction: float = 0.95) -> tuple[int | None, float | None, int]:
    """How many evaluations a run took to come within `fraction` of its final best (best / fraction),
    its final best, and how many evaluations it made in all."""
    indices, best = best_so_far(log)
    if not best or best[-1] == float("inf"):
        return None, None, len(indices)
    goal = best[-1] / fraction
    return next(i for i, b in zip(indices, best, strict=True) if b <= goal), best[-1], indices[-1]


WITHIN_AT = 300  # the bar: 95% of a run's final result within this many evaluations


def convergence_report(records: list[dict], out: Path, budget: int, shapes: str) -> str:
    lines = ["# Convergence of the searches", "",
             f"`python bench/tune_library.py`, budget {budget} evaluations per run (evaluation 0 is the spec), "
             f"{shapes}. For each run: the evaluation at which the best time came within 5% of the run's final "
             "best (the paper's Figure 13 reads the same curves). Single evaluations are 3 repetitions, so a "
             "'best' can be a lucky timing; the final figures in library.md are measured again.", "",
             "| kernel | run | evaluations | final best | within 5% at |", "|---|---|---:|---:|---:|"]
    reached: dict[str, list[bool]] = {}
    for record in records:
        for run, data in record["runs"].items():
            at, final, total = evaluations_to_within(out / data["log"])
            reached.setdefault(run, []).append(at is not None and at <= WITHIN_AT)
            lines.append(f"| {record['kernel']} | {run} | {total} | "
                         f"{'-' if final is None else f'{final * 1e3:.3g} ms'} | {'-' if at is None else at} |")
    lines.append("")
    for run, hits in reached.items():
        lines.append(f"- {run}: within 5% of its {budget}-evaluation result by evaluation {WITHIN_AT} on "
                     f"**{sum(hits)} of {len(hits)}** kernels.")
    return "\n".join(lines) + "\n"


def plot_all(records: list[dict], out: Path, path: Path) -> Path:
    """Figure 13 for every kernel at once: best time over the spec's against evaluations, a panel per
    kernel, a line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = -(-len(records) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False)
    for axis, record in zip(axes.flat, records, strict=False):
        for run, data in record["runs"].items():
            xs, ys = best_so_far(out / data["log"])
            if xs:
                axis.step(xs, [y / ys[0] for y in ys], where="post", label=run)
        axis.set_title(record["kernel"], fontsize=9)
        axis.set_yscale("log")
        axis.tick_params(labelsize=7)
    for axis in axes.flat[len(records):]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=7)
    figure.supxlabel("evaluations")
    figure.supylabel("best time / first time")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    parser.add_argument("--runs", nargs="+", default=list(RUNS), help="method:graph, e.g. sa:edges heuristic")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--scale", type=int, default=1, help="divide the outermost dimension (as bench/library.py)")
    parser.add_argument("--quick", action="store_true", help="the benchmark's small shapes")
    parser.add_argument("--out", type=Path, default=RESULTS / "tuned")
    parser.add_argument("--report", type=Path, default=RESULTS / "convergence.md",
                        help="the convergence table (and its plot, the same name in .png)")
    args = parser.parse_args(argv)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    records = [tune_kernel(k, args.runs, args.budget, args.out, args.scale, args.quick) for k in args.kernels]
    summary = args.out / "summary.json"
    kept = [r for r in (json.loads(summary.read_text()) if summary.exists() else []) if r["kernel"] not in args.kernels]
    summary.write_text(json.dumps(kept + records, indent=1) + "\n")  # kernels tuned before stay
    # and are reported with the new ones, so a study can be run a kernel at a time into one directory
    searches = [{**r, "runs": {run: d for run, d in r["runs"].items() if run.partition(":")[0] in SEARCHES}}
                for r in sorted(kept + records, key=lambda r: r["kernel"])]
    searches = [r for r in searches if r["runs"]]
    if searches:  # a pass has no curve to speak of: one evaluation
        shapes = "the library's quick shapes" if args.quick else (
            f"the paper's shapes with the outermost dimension divided by {args.scale}" if args.scale > 1
            else "the paper's shapes")
        plot = plot_all(searches, args.out, args.report.with_suffix(".png"))
        report = convergence_report(searches, args.out, args.budget, shapes)
        report += f"\nPlot: `{plot.relative_to(ROOT) if plot.is_relative_to(ROOT) else plot}`.\n"
        args.report.write_text(report)
        print(report)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
