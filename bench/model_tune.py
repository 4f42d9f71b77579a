"""`dojo model tune` on the example models: the model's time on the heuristic library and on the
tuned one, and what profiling costs a run.

    python bench/model_tune.py                 # examples/onnx_models.py's encoder layer and conv block
    python bench/model_tune.py --quick         # the tests' sizes: a smoke run (report in build/model_tune/)

For each model (imported with --fuse): `dojo model tune MODEL --out DIR --budget N --fuse` (timed;
a DIR already tuned is resumed, which spends nothing more), then in each of `--processes` fresh
processes the model is profiled on the tuned library and on the heuristic one that the tune kept
(DIR/heuristic/), their runs taken in turn (`python -m libgen.onnx.profile`): the ratio of their
model times is paired by run within a process. Then, in this process, `ModelRunner.run` against
`run_timed` on the tuned encoder, in alternating rounds: the cost of timing every step. Writes
bench/results/model_tune.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
from bench.sections import bind_openmp_threads, machine  # noqa: E402

bind_openmp_threads()

import onnx  # noqa: E402
import onnx_models  # noqa: E402

from libgen.onnx.profile import profile_in_subprocess, random_feeds  # noqa: E402
from libgen.onnx.run import ModelRunner  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODELS = ("encoder", "conv_block")


def tune(name: str, out: Path, quick: bool, budget: int) -> tuple[Path, Path, float, str]:
    """The model saved in OUT and tuned into OUT/NAME[_small] (resumed when it is there): its path,
    the library, the seconds the tune took in all and its summary."""
    stem = f"{name}_small" if quick else name
    model = out / f"{stem}.onnx"
    onnx.save(onnx_models.MODELS[name](**(onnx_models.SMALL[name] if quick else {})), str(model))
    library = out / stem
    command = [sys.executable, "-m", "server.cli", "model", "tune", str(model), "--out", str(library), "--budget",
               str(budget), "--fuse", *(["--resume"] if (library / "tune.json").exists() else [])]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    state = json.loads((library / "tune.json").read_text())
    return model, library, state["summary"]["elapsed_s"], (library / "tune.txt").read_text()


def compared(model: Path, library: Path, processes: int, repeats: int) -> list[tuple[float, float]]:
    """(heuristic, tuned) model times in each process, their runs in turn (each process holds the
    runner's timing locks while it times)."""
    pairs = []
    for _ in range(processes):
        tuned, heuristic = profile_in_subprocess(model, [library, library / "heuristic"], True, repeats)
        pairs.append((heuristic.total_s, tuned.total_s))
    return pairs


def overhead(model: Path, library: Path, rounds: int, repeats: int) -> dict[str, float]:
    """The median and the fastest call of `run` and of `run_timed`, and the median over rounds of
    their ratio: what timing adds is a fixed cost, which the fastest calls show best on a busy
    machine, whose hiccups only add."""
    runner = ModelRunner(model, library, fuse=True)
    feeds = random_feeds(runner.inputs, 0)
    calls = {"run": lambda: runner.run(feeds), "run_timed": lambda: runner.run_timed(feeds)}
    times: dict[str, list[list[float]]] = {name: [] for name in calls}
    with machine_lock():
        for call in calls.values():
            call()
        for round_ in range(rounds):
            for name in (list(calls) if round_ % 2 == 0 else list(calls)[::-1]):
                taken = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    calls[name]()
                    taken.append(time.perf_counter() - started)
                times[name].append(taken)
    per_round = {name: [statistics.median(r) for r in rounds_] for name, rounds_ in times.items()}
    every = {name: [t for r in rounds_ for t in r] for name, rounds_ in times.items()}
    return {"run": statistics.median(every["run"]), "run_timed": statistics.median(every["run_timed"]),
            "run_min": min(every["run"]), "run_timed_min": min(every["run_timed"]),
            "paired": statistics.median(t / p for t, p in zip(per_round["run_timed"], per_round["run"], strict=True)),
            "steps": len(ModelRunner(model, library, fuse=True).steps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tests' small sizes: a smoke run")
    parser.add_argument("--budget", type=int, default=48, help="evaluations of each model's tune (default: 48)")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=50, help="runs of each profile (default: 50)")
    parser.add_argument("--out", type=Path, help="where the models and libraries go (default: build/model_tune)")
    args = parser.parse_args()
    out = args.out or ROOT / "build" / "model_tune"
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# `dojo model tune` on the example models", "",
             f"`python bench/model_tune.py{' --quick' if args.quick else ''}` on {machine()}; the machine was shared "
             "with other work. Each model of examples/onnx_models.py at "
             f"{'the small sizes of the tests' if args.quick else 'its default sizes'}, imported with `--fuse`, "
             "tuned by `dojo "
             f"model tune --budget {args.budget}` (simulated annealing on the heuristic graph, rounds of 8 "
             f"evaluations), then profiled on the tuned library and on the heuristic one in each of "
             f"{args.processes} fresh processes, {args.repeats} runs of each taken in turn (the model's time: the "
             "sum of its steps' medians). `tune` is the tune's own time, import and heuristic pass included.", "",
             "| model | tune | heuristic library | tuned | speedup (range over the processes) |",
             "|---|---|---|---|---|"]
    summaries, tuned = [], {}
    for name in MODELS:
        model, library, seconds, summary = tune(name, out, args.quick, args.budget)
        tuned[name] = model, library
        pairs = compared(model, library, args.processes, args.repeats)
        ratios = sorted(h / t for h, t in pairs)
        lines.append(f"| {name} | {seconds:.0f} s | {statistics.median(h for h, _ in pairs) * 1e3:.3f} ms | "
                     f"{statistics.median(t for _, t in pairs) * 1e3:.3f} ms | **{statistics.median(ratios):.2f}x** "
                     f"({ratios[0]:.2f}-{ratios[-1]:.2f}) |")
        summaries += ["", f"`{name}`'s tune summary (DIR/tune.txt):", "", "```", summary.rstrip(), "```"]
    # at the tests' size, where a run takes microseconds, so that what timing adds shows
    small, small_library, _, _ = tune("encoder", out, True, 0)
    cost = overhead(small, small_library, rounds=10, repeats=200)
    lines += ["", f"What timing every step costs (`run_timed` against `run`, the encoder at the tests' size, its "
              f"{cost['steps']} steps on its heuristic library, 10 alternating rounds of 200 calls in one process): "
              "medians run "
              f"{cost['run'] * 1e6:.1f} µs, run_timed {cost['run_timed'] * 1e6:.1f} µs ({cost['paired']:.3f}x paired "
              f"by round); fastest calls {cost['run_min'] * 1e6:.1f} µs and {cost['run_timed_min'] * 1e6:.1f} µs "
              f"(**{(cost['run_timed_min'] - cost['run_min']) / cost['steps'] * 1e6:.2f} µs a step**).", *summaries]
    report = out / "model_tune.md" if args.quick else RESULTS / "model_tune.md"
    report.write_text("\n".join(lines) + "\n")
    print(report.read_text(), end="")
    print(f"load average {os.getloadavg()[0]:.1f} at the end", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
