"""The learned agent on kernels it never saw, against random sampling and simulated annealing.

    python bench/agent_heldout.py --methods random sa sa:heuristic      # the baselines: an hour or more
    python bench/agent_heldout.py --methods agent --checkpoint runs/agent   # then the agent, and the report
    python bench/agent_heldout.py --report-only                         # the report from what is saved
    python bench/agent_heldout.py --kernels real --methods agent sa --budgets 60 \
        --out bench/results/agent_real_kernels.md                       # kernels taken from real models

For each held-out kernel, at the library's quick shape, and each seed, every method searches once
from the spec with the local runner, `max(--budgets)` evaluations, each timed once (3
repetitions) and verified:

- `agent`: the agent of `--checkpoint` as a search (`agent.learned.search_agent`; by default the
  shipped cost model's ranked search: candidates ranked by the model, the best few, the one the roofline bound
  expects fastest and one of another kind measured a batch, the model refit on their times);
- `random`: random sampling on the edges graph;
- `sa`: simulated annealing on the edges graph;
- `sa:heuristic`, for reference: simulated annealing on the heuristic graph, which starts from
  the expert heuristic pass's program (the only method here that knows the hardware);
- `agent:heuristic`: the agent continuing the heuristic pass's program (its moves the start's
  prefix), CONTINUING_AT evaluations after it: compared with `sa:heuristic` at as many, in a
  table of its own.

`--kernels real` are the kernels in bench/agent_kernels/, as `dojo import` wrote them from models
nobody here wrote (each file's first lines name the model and its nodes): a strided and a plain
pointwise convolution of ResNet-50, a depthwise convolution of ShuffleNet, and MiniLM's attention
scores and feed-forward matrix product. Their bar (d) compares the agent at REAL_AT evaluations
with the heuristic pass's program, measured again like the rest, and with `sa` at as many.

The best after N evaluations, for each N of `--budgets`, is read off that one run: the fastest
program among its evaluations 0 to N. (Simulated annealing's temperature falls over its budget,
so the first 100 evaluations of a 200-evaluation run are not a 100-evaluation run; but separate
runs per budget compare one run's luck with another's, which once made sa at 200 look worse than
sa at 100.)

Each run is saved as it finishes, in `--runs`/KERNEL/METHOD-seedS.jsonl.gz (the evaluator's log, one
Evaluation a line, compressed) with METHOD-seedS.json beside it (the budget, the spec's hash, for the
agent the hash of the checkpoint's policy, and for the runs that start from the heuristic pass's
program the hash of its moves on this machine); a run already saved with the same of these is not
run again, so the benchmark can be run a few methods at a time, another checkpoint redoes the
agent's runs only, and a changed heuristic pass (or another machine's) redoes the runs that start
from it.

When every method's runs are saved, single timings of 3 repetitions being noisy, the best
program each method met within N evaluations is measured again, all of them one after another
(`runner.measure.measure`, at least `--min-time` seconds each), with the spec and the heuristic
pass's program, in `--rounds` rounds, each program's time the median of its rounds (one round
measured the heuristic pass's program of a strided convolution at half its speed of the next
two); each round starts at another point of a kernel's programs, so that a slow spell of a shared
machine does not fall on the same program every round; a method's time at N is the median of
its seeds' re-measured times. Writes `--out` (the table, the bars, the
machine) with its .json and .png (best time so far against evaluations as the searches timed
them: one faint line per seed, the median over seeds in bold).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.costmodel.model import SHIPPED  # noqa: E402
from agent.evaluate import Evaluation, Evaluator, read_log, replay_moves, text_hash  # noqa: E402
from agent.passes import PASSES  # noqa: E402
from agent.perfllm.checkpoint import POLICY  # noqa: E402
from agent.search import METHODS, make_graph  # noqa: E402
from bench.pairing import geometric_mean  # noqa: E402
from bench.sections import archive_log, machine  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import Program, load  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from runner.files import write_atomically  # noqa: E402
from runner.local import LocalRunner  # noqa: E402
from runner.measure import Runner, measure  # noqa: E402
from runner.roofline import machine_limits, warm_bound_s, work  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HELD_OUT = ("swiglu", "layernorm2", "conv2", "bmm")  # what the shipped agent never saw (its README)
REAL_KERNELS = {path.stem: path for path in sorted((ROOT / "bench" / "agent_kernels").glob("*.dojo"))}
REAL = "real"  # --kernels real: every kernel of REAL_KERNELS
SEARCHES = ("agent", "random", "sa", "sa:heuristic", "agent:heuristic")
CONTINUING = "agent:heuristic"
FROM_THE_PASS = ("sa:heuristic", CONTINUING)  # runs that start from the heuristic pass's program on this machine
CONTINUING_AT = 40  # the continuing bar: the agent from the heuristic pass's program, against sa:heuristic
CONTINUING_SHARE, CONTINUING_WORST = 0.8, 1.05
AGENTS = ("agent", CONTINUING)
# the bars: the agent at AGENT_AT evaluations against the others at the largest budget
AGENT_AT = 100
HEURISTIC_SHARE = 0.8
# bar (d): the agent at REAL_AT evaluations, its speed-up over the heuristic pass's, in geometric
# mean and on every kernel, and its time against sa's at as many
REAL_AT, REAL_SHARE, REAL_WORST = 60, 0.8, 0.5
Run = list[Evaluation]
Key = tuple[str, str, int]  # (kernel, method, seed)


def spec_of(name: str) -> Program:
    """A library kernel at its quick shape, or a kernel of bench/agent_kernels/."""
    return load(REAL_KERNELS[name].read_text()) if name in REAL_KERNELS else load(KERNELS[name].quick())


@functools.cache
def heuristic_moves(spec: Program) -> tuple[str, ...]:
    return tuple(PASSES["heuristic"](spec, get_target("native")))


def heuristic_hash(spec: Program) -> str:
    """Which program the heuristic pass makes of `spec` here: it reads the machine, and it changes
    as the passes do, so a run saved from another machine's or an older pass's program is run again."""
    return hashlib.sha256("\n".join(heuristic_moves(spec)).encode()).hexdigest()[:16]


def policy_hash(checkpoint: Path) -> str:
    """What identifies the agent of `checkpoint` (a training directory or its policy file)."""
    file = checkpoint / POLICY if checkpoint.is_dir() else checkpoint
    return hashlib.sha256(file.read_bytes()).hexdigest()[:16]


def run_files(runs: Path, kernel: str, method: str, seed: int) -> tuple[Path, Path]:
    """The saved run's evaluations and its description."""
    stem = runs / kernel / f"{method.replace(':', '-')}-seed{seed}"
    return stem.with_suffix(".jsonl"), stem.with_suffix(".json")


def run_identity(spec: Program, method: str, top: int, policy: str | None) -> dict:
    """What a saved run of `method` on `spec` must have been run with to be taken back: its budget
    (`top`, or CONTINUING_AT for the continuing agent), the spec, the agent's `policy`, and the
    heuristic pass's program where the run starts from it."""
    return ({"budget": CONTINUING_AT if method == CONTINUING else top, "spec": text_hash(spec)}
            | ({"policy": policy} if method in AGENTS else {})
            | ({"heuristic": heuristic_hash(spec)} if method in FROM_THE_PASS else {}))


def load_run(runs: Path, key: Key, wanted: dict) -> Run | None:
    """The run saved for `key` if its description has everything of `wanted`, else None."""
    log, described = run_files(runs, *key)
    if not ((log.is_file() or log.with_name(log.name + ".gz").is_file()) and described.is_file()):
        return None
    saved = json.loads(described.read_text())
    if any(saved.get(k) != v for k, v in wanted.items()):
        return None
    header, evaluations = read_log(log)
    return from_spec(evaluations, header.get("prefix", ()) if header else ())


def from_spec(evaluations: Run, prefix: Sequence[str]) -> Run:
    """The evaluations with their moves from the spec: a run that continued a program (its moves the
    evaluator's prefix) logs them from its start."""
    return [replace(e, moves=(*prefix, *e.moves)) for e in evaluations] if prefix else evaluations


def run_search(spec: Program, method: str, budget: int, seed: int, runner: Runner, checkpoint: Path,
               log: Path) -> Run:
    """Every evaluation of one search, evaluation 0 (the spec) first, each logged to `log`."""
    evaluations: Run = []
    prefix = list(heuristic_moves(spec)) if method == CONTINUING else []
    evaluator = Evaluator(spec, prefix=prefix, runner=runner, budget=CONTINUING_AT if prefix else budget, log=log,
                          on_evaluation=lambda evaluation, _: evaluations.append(evaluation))
    evaluator.evaluate([])
    if method in AGENTS:
        from agent.learned import search_agent  # torch loads only for the agent

        search_agent(evaluator.start, evaluator, checkpoint=checkpoint, prefix=prefix, seed=seed)
    else:
        name, _, graph = method.partition(":")
        METHODS[name](evaluator, make_graph(graph or "edges", evaluator, get_target("native")), seed)
    return from_spec(evaluations, prefix)


def run_and_save(spec: Program, runs: Path, key: Key, budget: int, runner: Runner, checkpoint: Path,
                 described: dict) -> Run:
    """Search for `key` and save the run; `described` goes into its description. Until the run
    has finished its log has another name, so an interrupted run is never taken for a saved one."""
    kernel, method, seed = key
    log, description = run_files(runs, *key)
    log.parent.mkdir(parents=True, exist_ok=True)
    partial = log.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    started = time.perf_counter()
    run = run_search(spec, method, budget, seed, runner, checkpoint, partial)
    os.replace(partial, log)
    archive_log(log)
    write_atomically(description, json.dumps(described | {
        "evaluations": len(run) - 1, "wall_s": round(time.perf_counter() - started, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1).encode())
    return run


def best_within(run: Run, budget: int) -> Evaluation:
    """The fastest program among the run's evaluations 0 (the spec) to `budget`."""
    return min((e for e in run if e.index <= budget), key=lambda e: (e.cost, e.index))


def read_at(method: str, budgets: list[int], methods: list[str]) -> list[int]:
    """The evaluations at which `method`'s best is read: the continuing run's at CONTINUING_AT (and its
    start, the heuristic pass's program), sa:heuristic's there too when it is compared with it."""
    if method == CONTINUING:
        return [0, CONTINUING_AT]
    return budgets + ([CONTINUING_AT] if method == "sa:heuristic" and CONTINUING in methods else [])


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def bars(time_of: Callable[[str, str, int], float], kernels: list[str], methods: list[str],
         top: int) -> tuple[list[str], dict[str, float]]:
    """The issue's bars, from the table's times: (a) the agent at AGENT_AT evaluations at least as
    fast as `random` and `sa` at `top` (time over time, geomean over the kernels); (b) its
    speed-up at AGENT_AT at least HEURISTIC_SHARE of `sa:heuristic`'s at `top`. The lines that
    say so and the ratios."""
    at = min(AGENT_AT, top)
    lines, ratios = ["## The bars", ""], {}
    absent = [m for m in ("agent", "random", "sa") if m not in methods]
    if absent:
        lines.append(f"(a) Not computed: no runs of {', '.join(absent)}.")
    else:
        against = {other: geometric_mean([time_of(k, "agent", at) / time_of(k, other, top) for k in kernels])
                   for other in ("random", "sa")}
        ratios |= {f"agent {at} / {other} {top}": ratio for other, ratio in against.items()}
        met = all(ratio <= 1 for ratio in against.values())
        lines.append(f"(a) The agent at {at} evaluations against random sampling and simulated annealing at {top}, "
                     f"its time over theirs in geometric mean over the kernels: {against['random']:.3f} (random) and "
                     f"{against['sa']:.3f} (sa): **{'met' if met else 'not met'}** (at most 1 against both).")
    lines.append("")
    absent = [m for m in ("agent", "sa:heuristic") if m not in methods]
    if absent:
        lines.append(f"(b) Not computed: no runs of {', '.join(absent)}.")
    else:
        # speed-up over speed-up: the spec's time cancels
        share = geometric_mean([time_of(k, "sa:heuristic", top) / time_of(k, "agent", at) for k in kernels])
        ratios[f"agent {at} speed-up / sa:heuristic {top} speed-up"] = share
        lines.append(f"(b) The agent's speed-up at {at} evaluations over sa:heuristic's at {top}, in geometric mean "
                     f"over the kernels: {share:.3f}: **{'met' if share >= HEURISTIC_SHARE else 'not met'}** (at "
                     f"least {HEURISTIC_SHARE:.2f}).")
    return lines + [""], ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED, help="the agent (default: the shipped one)")
    parser.add_argument("--kernels", nargs="+", default=list(HELD_OUT), choices=[*KERNELS, *REAL_KERNELS, REAL],
                        metavar="K", help="held-out library kernels, kernels of bench/agent_kernels/ by name, or "
                        f"`{REAL}` for all of those")
    parser.add_argument("--methods", nargs="+", default=list(SEARCHES), choices=SEARCHES,
                        help="the methods to run (those saved are not run again); the report has them all")
    parser.add_argument("--budgets", nargs="+", type=int, default=[50, 100, 200],
                        help="evaluations at which to read the best; each run spends the largest")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds each final measurement times")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the final measurements (default: 3)")
    parser.add_argument("--runs", type=Path, default=RESULTS / "agent_heldout_runs", help="where runs are saved")
    parser.add_argument("--out", type=Path, default=RESULTS / "agent_heldout.md")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: measure again and report what is saved, noting what is missing")
    args = parser.parse_args(argv)
    budgets, top = sorted(set(args.budgets)), max(args.budgets)
    if set(AGENTS) & set(args.methods) and not args.report_only and not args.checkpoint.exists():
        parser.error(f"no agent at {args.checkpoint}")
    policy = policy_hash(args.checkpoint) if args.checkpoint.exists() else None
    runner = LocalRunner()
    names = [n for name in args.kernels for n in (REAL_KERNELS if name == REAL else [name])]
    specs = {name: spec_of(name) for name in dict.fromkeys(names)}

    def wanted(kernel: str, method: str) -> dict:
        return run_identity(specs[kernel], method, top, policy)

    keys = [(kernel, method, seed) for kernel in specs for seed in args.seeds for method in SEARCHES]
    if not args.report_only:
        for key in keys:
            kernel, method, seed = key
            if method not in args.methods or load_run(args.runs, key, wanted(kernel, method)) is not None:
                continue
            described = wanted(kernel, method) | ({"checkpoint": str(shown(args.checkpoint))}
                                                  if method in AGENTS else {})
            started = time.perf_counter()
            run = run_and_save(specs[kernel], args.runs, key, top, runner, args.checkpoint, described)
            print(f"{kernel:11} seed {seed} {method:13}: {len(run) - 1:4} evaluations, best "
                  f"{best_within(run, top).cost * 1e6:9.1f} us ({time.perf_counter() - started:.0f} s)", flush=True)

    runs = {key: run for key in keys if (run := load_run(args.runs, key, wanted(key[0], key[1]))) is not None}
    complete = [m for m in SEARCHES if all((k, m, s) in runs for k in specs for s in args.seeds)]
    missing = [m for m in SEARCHES if m not in complete]
    if missing and not args.report_only:
        print(f"no report yet: runs of {', '.join(missing)} are missing in {shown(args.runs)} "
              "(--report-only writes one from what is saved)")
        return 0
    if not complete:
        parser.error(f"no method has all its runs saved in {args.runs}")

    # measure again every program some method would return, the heuristic pass's and the specs, one after another
    began = time.perf_counter()
    passes = {name: heuristic_moves(spec) for name, spec in specs.items()}
    rounds: dict[tuple[str, tuple[str, ...]], list[float]] = {}
    for round_ in range(args.rounds):
        for name, spec in specs.items():
            programs = list({(): None, passes[name]: None} | {best_within(runs[name, m, s], n).moves: None
                                                              for m in complete for n in read_at(m, budgets, complete)
                                                              for s in args.seeds})
            # each round starts one program further on, so a slow spell of the machine falls on different programs
            shift = round_ * len(programs) // args.rounds
            for moves in programs[shift:] + programs[:shift]:
                result = measure(runner, replay_moves(spec, moves)[0], repeats=5, warmup=1, spec=spec,
                                 min_time_s=args.min_time)
                rounds.setdefault((name, moves), []).append(result.median_s if result.ok and result.median_s
                                                            else math.inf)
    remeasured = {key: statistics.median(times) for key, times in rounds.items()}

    def time_of(name: str, method: str, budget: int) -> float:
        return statistics.median(remeasured[name, best_within(runs[name, method, s], budget).moves]
                                 for s in args.seeds)

    def pass_time(name: str) -> float:
        return remeasured[name, passes[name]]

    report(args, argv, specs, budgets, complete, time_of, pass_time, remeasured, runs, policy,
           time.perf_counter() - began)
    return 0


def report(args: argparse.Namespace, argv: list[str] | None, specs: dict[str, Program], budgets: list[int],
           methods: list[str], time_of: Callable[[str, str, int], float], pass_time: Callable[[str], float],
           remeasured: dict[tuple[str, tuple[str, ...]], float], runs: dict[Key, Run], policy: str | None,
           measured_s: float) -> None:
    top, kernels = max(budgets), list(specs)
    columns = [(m, b) for m in methods if m != CONTINUING for b in budgets]
    command = shlex.join(["python", "bench/agent_heldout.py", *(sys.argv[1:] if argv is None else argv)])
    descriptions = {key: json.loads(run_files(args.runs, *key)[1].read_text()) for key in runs if key[1] in methods}
    finished = sorted(d["finished"] for d in descriptions.values())
    search_min = sum(d["wall_s"] for d in descriptions.values()) / 60
    agent = (f" The agent: `{shown(args.checkpoint)}`, policy {policy}." if "agent" in methods else "")
    lines = ["# The learned agent on held-out kernels", "",
             f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, from the runs saved in "
             f"`{shown(args.runs)}` (finished {finished[0]} to {finished[-1]}, {search_min:.0f} min of searching; "
             f"{measured_s / 60:.0f} min of measuring again).{agent}", "",
             f"Machine: {machine()}.", "",
             f"Kernels {shapes_said(kernels)}, none of them seen in training. Each method searched once per "
             f"seed ({', '.join(map(str, args.seeds))}) with {top} evaluations; each cell is the speed-up over the "
             "spec of the best program met within that many evaluations of that run, measured again (the median "
             f"of {args.rounds} rounds), median over the seeds. `agent`, `random` and `sa` know nothing of the "
             "hardware; `sa:heuristic` starts from the "
             "expert heuristic pass and is there for reference.", ""]
    if len(methods) < len(SEARCHES):
        lines += [f"Not in this report (runs missing): {', '.join(m for m in SEARCHES if m not in methods)}.", ""]
    lines += ["| kernel | spec | heuristic pass | " + " | ".join(f"{m} {b}" for m, b in columns) + " |",
              "|---|---:|---:|" + "---:|" * len(columns)]
    for name in kernels:
        spec_s = remeasured[name, ()]
        cells = [f"{spec_s / pass_time(name):.2f}x"] + [f"{spec_s / time_of(name, m, b):.2f}x" for m, b in columns]
        lines.append(f"| {name} | {spec_s * 1e6:.1f} us | " + " | ".join(cells) + " |")
    speedups = {key: geometric_mean([remeasured[n, ()] / time_of(n, *key) for n in kernels]) for key in columns}
    by_pass = geometric_mean([remeasured[n, ()] / pass_time(n) for n in kernels])
    lines += [f"| geomean |  | {by_pass:.2f}x | " + " | ".join(f"{speedups[key]:.2f}x" for key in columns) + " |",
              ""]
    bar_lines, ratios = bars(time_of, kernels, methods, top)
    if REAL_AT in budgets and {"agent", "sa"} <= set(methods):
        real_lines, real_ratios = against_the_pass(time_of, pass_time, kernels)
        bar_lines += real_lines
        ratios |= real_ratios
    plot = args.out.with_suffix(".png")
    draw(runs, kernels, [m for m in methods if m != CONTINUING], args.seeds, top, plot)
    lines += bar_lines
    if CONTINUING in methods and "sa:heuristic" in methods:
        limits, caches = machine_limits(), get_target("native").caches
        floors = {name: warm_bound_s(work(specs[name]), limits, caches) for name in kernels}
        continuing_lines, continuing_ratios = continuing(time_of, remeasured, floors)
        lines += continuing_lines
        ratios |= continuing_ratios
    lines.append(f"Plot: `{shown(plot)}` (best time so far over the spec's, as each search timed it: one faint line "
                 "per seed, the median over the seeds in bold).")
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(
        {f"{n}|{m}|{b}": time_of(n, m, b) for n in kernels for m, b in columns}
        | {f"{n}|spec": remeasured[n, ()] for n in kernels} | {"bars": ratios}, indent=1))
    print("\n".join(lines))


def shapes_said(kernels: list[str]) -> str:
    real = [k for k in kernels if k in REAL_KERNELS]
    if not real:
        return "at the library's quick shapes"
    return ("as `dojo import` wrote them from their models (bench/agent_kernels/)" if len(real) == len(kernels) else
            "at the library's quick shapes, and as imported from their models (bench/agent_kernels/)")


def against_the_pass(time_of: Callable[[str, str, int], float], pass_time: Callable[[str], float],
                     kernels: list[str]) -> tuple[list[str], dict[str, float]]:
    """Bar (d): the agent at REAL_AT evaluations, with no heuristic, its speed-up over the heuristic
    pass's (pass time over agent time) in geometric mean and at worst, and its time over sa's at
    as many."""
    share = {name: pass_time(name) / time_of(name, "agent", REAL_AT) for name in kernels}
    over_sa = geometric_mean([time_of(name, "agent", REAL_AT) / time_of(name, "sa", REAL_AT) for name in kernels])
    mean, worst = geometric_mean(list(share.values())), min(share.values())
    met = mean >= REAL_SHARE and worst >= REAL_WORST and over_sa <= 1
    lines = [f"(d) The agent at {REAL_AT} evaluations with no heuristic, its speed-up over the heuristic pass's: "
             f"{mean:.3f} in geometric mean, {worst:.3f} at worst ({min(share, key=share.get)}); its time over sa's "
             f"at {REAL_AT}: {over_sa:.3f}: **{'met' if met else 'not met'}** (at least {REAL_SHARE:.2f}, "
             f"{REAL_WORST:.2f} on every kernel, and at most 1 against sa).", ""]
    return lines, {f"agent {REAL_AT} speed-up / heuristic pass": mean,
                   f"agent {REAL_AT} speed-up / heuristic pass, worst": worst,
                   f"agent {REAL_AT} / sa {REAL_AT}": over_sa}


def continuing(time_of: Callable[[str, str, int], float], remeasured: dict[tuple[str, tuple[str, ...]], float],
               floors: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    """The continuing mode's table and bar: the agent from the heuristic pass's program against
    sa:heuristic, both at CONTINUING_AT evaluations, time over time. `floors` are the kernels' roofline
    bounds: no program runs faster, so the bound over sa's time is the least the ratio can be."""
    at = CONTINUING_AT
    lines = [f"## Continuing the heuristic pass's program, {at} evaluations", "",
             f"`{CONTINUING}`: the agent from the heuristic pass's program (evaluation 0, not counted); "
             f"`sa:heuristic` at {at} evaluations of its runs above (which meet that program among the first). "
             "Speed-ups over the spec, median over the seeds, measured again. `floor`: the spec's roofline bound "
             "(its flops at the FMA peak, its compulsory bytes at the bandwidth of the nearest cache level that "
             "holds them, as the timer's runs find them there: `runner.roofline.warm_bound_s`) over sa's time, "
             "the least the agent's time over sa's could be.", "",
             f"| kernel | heuristic pass | sa:heuristic {at} | {CONTINUING} {at} | agent time / sa time | floor |",
             "|---|---:|---:|---:|---:|---:|"]
    ratio, floor = {}, {}
    for name in floors:
        spec_s, sa_s = remeasured[name, ()], time_of(name, "sa:heuristic", at)
        ratio[name], floor[name] = time_of(name, CONTINUING, at) / sa_s, floors[name] / sa_s
        speedups = [spec_s / time_of(name, m, n) for m, n in ((CONTINUING, 0), ("sa:heuristic", at), (CONTINUING, at))]
        lines.append(f"| {name} | " + " | ".join(f"{x:.2f}x" for x in speedups)
                     + f" | {ratio[name]:.3f} | {floor[name]:.3f} |")
    mean, worst, least = geometric_mean(list(ratio.values())), max(ratio.values()), geometric_mean(list(floor.values()))
    met = mean <= CONTINUING_SHARE and worst <= CONTINUING_WORST
    lines += [f"| geomean |  |  |  | {mean:.3f} | {least:.3f} |", "",
              f"(c) The agent continuing the heuristic pass's program, its time at {at} evaluations over "
              f"sa:heuristic's at {at}: {mean:.3f} in geometric mean, {worst:.3f} at worst: "
              f"**{'met' if met else 'not met'}** (at most {CONTINUING_SHARE:.2f}, and {CONTINUING_WORST:.2f} on "
              f"every kernel). A program at the roofline bound on every kernel would give {least:.3f}.", ""]
    key = f"{CONTINUING} {at} / sa:heuristic {at}"
    return lines, {key: mean, f"{key}, worst": worst, f"roofline bound / sa:heuristic {at}": least}


def draw(runs: dict[Key, Run], kernels: list[str], methods: list[str], seeds: list[int], top: int,
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(kernels), figsize=(4 * len(kernels), 3.2), squeeze=False)
    xs = list(range(top + 1))
    for axis, name in zip(axes[0], kernels, strict=True):
        for method, colour in zip(methods, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False):
            curves = []
            for seed in seeds:
                run = runs[name, method, seed]
                costs = [best_within(run, x).cost for x in xs]
                curves.append([c / costs[0] for c in costs])
                axis.step(xs, curves[-1], where="post", color=colour, alpha=0.25, linewidth=0.8)
            axis.step(xs, [statistics.median(column) for column in zip(*curves, strict=True)], where="post",
                      color=colour, linewidth=1.8, label=method)
        axis.set_title(name)
        axis.set_xlabel("evaluations")
        axis.set_yscale("log")
    axes[0][0].set_ylabel("best time / spec time")
    axes[0][-1].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
