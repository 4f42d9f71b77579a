"""The learned agent on kernels it never saw, against random sampling and simulated annealing.

    python bench/agent_heldout.py                                   # the shipped agent, its held-out kernels
    python bench/agent_heldout.py --checkpoint runs/agent --kernels bmm swiglu --seeds 0 1 2

For each held-out kernel, at the library's quick shape, and each seed, every method searches from
the spec with the local runner, each evaluation timed once (3 repetitions) and verified:

- `agent`: the agent of `--checkpoint` as a search (`agent.perfllm.search`: best first by its
  Q-values, learning from the times as it goes), `max(--budgets)` evaluations;
- `random`: random sampling on the edges graph, `max(--budgets)` evaluations;
- `sa`: simulated annealing on the edges graph, one run per budget (its temperature falls over the
  budget, so its first 50 evaluations of a 200-evaluation run are not a 50-evaluation run);
- `sa:heuristic`, for reference: simulated annealing on the heuristic graph, which starts from
  the expert heuristic pass's program (the only method here that knows the hardware).

The agent and random sampling know nothing of the budget, so their best after N evaluations is
read off their one run. Single timings of 3 repetitions are noisy, so the best program each
method met within N evaluations is measured again, all of them one after another at the end
(`runner.measure.measure`, at least `--min-time` seconds each), and the spec with them; a
method's time at N is the median of its seeds' re-measured times.

Writes bench/results/agent_heldout.md (the table, the bar: the agent at 100 evaluations against
sa at 200 in geometric mean over the kernels) and agent_heldout.png (best time so far against
evaluations, as the searches timed them).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.evaluate import Evaluation, Evaluator  # noqa: E402
from agent.perfllm.checkpoint import SHIPPED  # noqa: E402
from agent.perfllm.search import search  # noqa: E402
from agent.search import METHODS, make_graph  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import Program, load  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from runner.local import LocalRunner  # noqa: E402
from runner.measure import measure  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HELD_OUT = ("swiglu", "layernorm2", "conv2", "bmm")  # what the shipped agent never saw (its README)
Run = list[Evaluation]


def run_search(spec: Program, method: str, budget: int, seed: int, runner: LocalRunner, checkpoint: Path) -> Run:
    """Every evaluation of one search, evaluation 0 (the spec) first."""
    evaluations: Run = []
    evaluator = Evaluator(spec, runner=runner, budget=budget,
                          on_evaluation=lambda evaluation, _: evaluations.append(evaluation))
    evaluator.evaluate([])
    if method == "agent":
        search(evaluator.start, checkpoint, evaluator, seed=seed)
    else:
        name, _, graph = method.partition(":")
        METHODS[name](evaluator, make_graph(graph or "edges", evaluator, get_target("native")), seed)
    return evaluations


def best_within(run: Run, budget: int) -> Evaluation:
    """The fastest program among the first `budget` evaluations after the spec."""
    return min((e for e in run if e.index <= budget), key=lambda e: (e.cost, e.index))


def curve(run: Run) -> tuple[list[int], list[float]]:
    best, xs, ys = math.inf, [], []
    for e in sorted(run, key=lambda e: e.index):
        best = min(best, e.cost)
        xs.append(e.index)
        ys.append(best)
    return xs, ys


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED, help="the agent (default: the shipped one)")
    parser.add_argument("--kernels", nargs="*", default=list(HELD_OUT), help="held-out library kernels")
    parser.add_argument("--budgets", nargs="*", type=int, default=[50, 100, 200])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds each final measurement times")
    parser.add_argument("--out", type=Path, default=RESULTS / "agent_heldout.md")
    args = parser.parse_args(argv)
    budgets, top = sorted(args.budgets), max(args.budgets)
    runner = LocalRunner()
    began = time.perf_counter()
    specs = {name: load(KERNELS[name].quick()) for name in args.kernels}
    runs: dict[tuple[str, str, int, int], Run] = {}  # (kernel, method, budget, seed)
    searches = [("agent", top), ("random", top), *(("sa", b) for b in budgets), ("sa:heuristic", top)]
    for name, spec in specs.items():
        for seed in args.seeds:
            for method, budget in searches:
                started = time.perf_counter()
                run = runs[name, method, budget, seed] = run_search(spec, method, budget, seed, runner,
                                                                    args.checkpoint)
                print(f"{name:11} seed {seed} {method:13} {budget:4}: {len(run) - 1:4} evaluations, best "
                      f"{best_within(run, budget).cost * 1e6:9.1f} us ({time.perf_counter() - started:.0f} s)",
                      flush=True)

    def chosen(name: str, method: str, budget: int, seed: int) -> Evaluation:
        run_budget = budget if method == "sa" else top
        return best_within(runs[name, method, run_budget, seed], budget)

    # measure again every program some method would return, and the specs, one after another
    remeasured: dict[tuple[str, tuple[str, ...]], float] = {}
    for name, spec in specs.items():
        evaluator = Evaluator(spec, runner=runner)
        wanted = {(): None} | {chosen(name, m, b, s).moves: None for m in ("agent", "random", "sa") for b in budgets
                               for s in args.seeds}
        wanted |= {chosen(name, "sa:heuristic", top, s).moves: None for s in args.seeds}
        for moves in wanted:
            result = measure(runner, evaluator.program(moves)[0], repeats=5, warmup=1, spec=spec,
                             min_time_s=args.min_time)
            remeasured[name, moves] = result.median_s if result.ok and result.median_s else math.inf

    def time_of(name: str, method: str, budget: int) -> float:
        return statistics.median(remeasured[name, chosen(name, method, budget, s).moves] for s in args.seeds)

    report(args, specs, budgets, top, time_of, remeasured, runs, time.perf_counter() - began)
    return 0


def report(args: argparse.Namespace, specs: dict[str, Program], budgets: list[int], top: int,
           time_of: Callable[[str, str, int], float], remeasured: dict, runs: dict, wall_s: float) -> None:
    methods = [(m, b) for m in ("agent", "random", "sa") for b in budgets] + [("sa:heuristic", top)]
    lines = ["# The learned agent on held-out kernels", "",
             f"`python bench/agent_heldout.py --checkpoint {shown(args.checkpoint)} --kernels {' '.join(specs)} "
             f"--seeds {' '.join(map(str, args.seeds))}`, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {wall_s / 60:.0f} min.", "",
             "Kernels at the library's quick shapes, none of them seen in training. Each cell: the speed-up over the "
             "spec of the best program the method met within that many evaluations, measured again (median over "
             f"seeds {', '.join(map(str, args.seeds))}). `agent`, `random` and `sa` know nothing of the hardware; "
             "`sa:heuristic` starts from the expert heuristic pass and is there for reference.", "",
             "| kernel | spec | " + " | ".join(f"{m} {b}" for m, b in methods) + " |",
             "|---|---:|" + "---:|" * len(methods)]
    for name in specs:
        spec_s = remeasured[name, ()]
        cells = [f"{spec_s / time_of(name, m, b):.2f}x" for m, b in methods]
        lines.append(f"| {name} | {spec_s * 1e6:.1f} us | " + " | ".join(cells) + " |")
    ratios = {(m, b): geomean([remeasured[n, ()] / time_of(n, m, b) for n in specs]) for m, b in methods}
    lines.append("| geomean |  | " + " | ".join(f"{ratios[key]:.2f}x" for key in methods) + " |")
    agent_100 = geomean([time_of(n, "agent", min(100, top)) / time_of(n, "sa", top) for n in specs])
    lines += ["", f"The bar: the agent at {min(100, top)} evaluations against simulated annealing at {top}, time over "
              f"time in geometric mean: **{agent_100:.2f}** ({'met' if agent_100 <= 1 else 'not met'}: at most 1 "
              "means the agent matches it).", ""]
    plot = args.out.with_suffix(".png")
    draw(runs, specs, top, plot)
    lines.append(f"Plot: `{shown(plot)}` (best time so far over "
                 "the spec's, as each search timed it, seed 0).")
    args.out.write_text("\n".join(lines) + "\n")
    (args.out.with_suffix(".json")).write_text(json.dumps(
        {f"{n}|{m}|{b}": time_of(n, m, b) for n in specs for m, b in methods} | {f"{n}|spec": remeasured[n, ()]
                                                                                 for n in specs}, indent=1))
    print("\n".join(lines))


def draw(runs: dict, specs: dict[str, Program], top: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(specs), figsize=(4 * len(specs), 3.2), squeeze=False)
    for axis, name in zip(axes[0], specs, strict=True):
        for method in ("agent", "random", "sa", "sa:heuristic"):
            run = runs.get((name, method, top, 0))
            if run is None:
                continue
            xs, ys = curve(run)
            spec_s = ys[0]
            axis.step(xs, [y / spec_s for y in ys], where="post", label=method)
        axis.set_title(name)
        axis.set_xlabel("evaluations")
        axis.set_yscale("log")
    axes[0][0].set_ylabel("best time / spec time")
    axes[0][-1].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
