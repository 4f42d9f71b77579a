"""ONNX models end to end: `dojo import`, `dojo library build --method heuristic`, `dojo model run`'s
runner against ONNX Runtime running the whole model.

    python bench/onnx_models.py            # the encoder layer and the conv block at examples/onnx_models.py's sizes
    python bench/onnx_models.py --quick    # the tests' sizes: a smoke run (report in build/onnx_models/)

For each model of examples/onnx_models.py (the transformer encoder layer and the conv block): the
model is imported as is and with --fuse, each import built into its library by the heuristic pass
alone (`--budget 1`, no search; kernels already built in build/onnx_models/ are kept), then three
runs of the model are timed in the same process (and that in `--processes` fresh processes, 3 by
default: the times differ more between processes than within one), in alternating rounds of
repetitions, holding the
runner's whole-machine lock (runner/local.py) so that no other benchmark times at once: ModelRunner
on the unfused library, ModelRunner on the fused one, and one ONNX Runtime session of the whole model
(its default graph optimisations, as many intra-op threads as the runner's sessions: the cores).
Each run's outputs are compared with ONNX Runtime's. Writes the medians and ratios to
bench/results/onnx_models.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
from bench.pairing import paired, round_medians  # noqa: E402
from bench.sections import bind_openmp_threads, machine  # noqa: E402

bind_openmp_threads()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx_models  # noqa: E402

from libgen.onnx.reference import SETTLE_S, onnxruntime_session  # noqa: E402
from libgen.onnx.run import ModelRunner  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402
from runner.affinity import cores  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODELS = ("encoder", "conv_block")
RUNS = {False: "library", True: "fused"}  # the runner of each import, by --fuse


def dojo(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"dojo {' '.join(args)} failed:\n{done.stderr}")


def build(model: Path, out: Path, fuse: bool, budget: int) -> Path:
    """The model imported by `dojo import` (with --fuse or not) into OUT/NAME[_fused]/ and built
    into the library beside it."""
    name = f"{model.stem}{'_fused' if fuse else ''}"
    files, library = out / name, out / f"{name}_lib"
    dojo("import", str(model), "--out", str(files), *(["--fuse"] if fuse else []))
    dojo("library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic", "--budget", str(budget),
         "--out", str(library), "--name", name)
    return library


def rounds(runs: dict[str, Callable[[], object]], count: int, repeats: int) -> dict[str, list[float]]:
    """Times of each run: `count` rounds, in each `repeats` calls of every run in turn (each round
    starting with another), after a few calls of each to warm up."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        for _ in range(3):
            run()
    for round_ in range(count):
        names = list(runs)
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # each goes first in turn
            run = runs[name]
            time.sleep(SETTLE_S)  # ONNX Runtime's idle threads stop spinning before another runtime's start
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def bench_model(name: str, out: Path, quick: bool, count: int, repeats: int, budget: int) -> dict:
    model = out / f"{name}.onnx"
    onnx.save(onnx_models.MODELS[name](**(onnx_models.SMALL[name] if quick else {})), str(model))
    started = time.perf_counter()
    libraries = {fuse: build(model, out, fuse, budget) for fuse in (False, True)}
    build_s = time.perf_counter() - started
    runners = {fuse: ModelRunner(model, library, fuse=fuse) for fuse, library in libraries.items()}
    session = onnxruntime_session(str(model))
    graph_input = session.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(graph_input.shape).astype(np.float32)
    feeds = {graph_input.name: x}
    expected = session.run(None, feeds)[0]
    differences = {RUNS[fuse]: float(np.abs(next(iter(r.run(feeds).values())) - expected).max())
                   for fuse, r in runners.items()}
    load = os.getloadavg()[0]
    with machine_lock():
        times = rounds({"onnxruntime": lambda: session.run(None, feeds), "library": lambda: runners[False].run(feeds),
                        "fused": lambda: runners[True].run(feeds)}, count, repeats)
    per_round = round_medians(times, repeats)
    return {"name": name, "shape": list(x.shape), "build_s": build_s, "load": (load, os.getloadavg()[0]),
            "medians": {k: statistics.median(v) for k, v in times.items()}, "calls": len(times["library"]),
            "paired": {k: paired(per_round, "onnxruntime", k) for k in per_round if k != "onnxruntime"},
            "differences": differences,
            "placement": {RUNS[fuse]: dict(Counter(r.placement.values())) for fuse, r in runners.items()},
            "planned": {RUNS[fuse]: r.planned_bytes for fuse, r in runners.items()}}


def report(results: list[list[dict]], args: argparse.Namespace) -> str:
    """The report of each model's runs, one a process: the median of their medians, and the range of
    the ratios over the processes."""
    def ms(value: float) -> str:
        return f"{value * 1e3:.3f} ms"

    def where(counts: dict) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))

    def ratios(runs: list[dict], name: str) -> str:
        each = sorted(r["medians"]["onnxruntime"] / r["medians"][name] for r in runs)
        middle = statistics.median(r["medians"]["onnxruntime"] for r in runs) / statistics.median(
            r["medians"][name] for r in runs)
        return f"**{middle:.2f}x**" + (f" ({each[0]:.2f}-{each[-1]:.2f})" if len(each) > 1 else "")

    sizes = "the tests' small sizes (--quick)" if args.quick else "examples/onnx_models.py's default sizes"
    lines = ["# ONNX models end to end: PerfDojo's library against ONNX Runtime", "",
             f"`python bench/onnx_models.py{' --quick' if args.quick else ''}` on {machine()}. Each model at "
             f"{sizes}, imported by `dojo import` as is and with `--fuse`, each import built by `dojo library build "
             f"--method heuristic --budget {args.budget}` (the heuristic pass, no search), then run by `dojo model "
             "run`'s ModelRunner against one ONNX Runtime session of the whole model (default graph optimisations, "
             f"{cores()} intra-op threads, as the runner's sessions): in each of {args.processes} processes, "
             f"{args.rounds} alternating rounds of {args.repeats} calls each, each round starting with another, and "
             "50 ms of rest before each run's calls (ONNX Runtime's idle threads spin after a call and, timed right "
             "after it, the library ran 1.8x slower). A process's medians; the table gives the median of those over "
             "the processes, and in brackets the range of the ratio: the times differ from one process to the next "
             "more than within one (ONNX Runtime's conv block took 0.14 ms in some, 0.25 ms in others).", "",
             "| model | input | ONNX Runtime | library | vs ORT | fused library | vs ORT | max abs diff (library, "
             "fused) |", "|---|---|---|---|---|---|---|---|"]
    for runs in results:
        first = runs[0]
        median = {k: statistics.median(r["medians"][k] for r in runs) for k in first["medians"]}
        lines.append(f"| {first['name']} | {' x '.join(map(str, first['shape']))} | {ms(median['onnxruntime'])} | "
                     f"{ms(median['library'])} | {ratios(runs, 'library')} | {ms(median['fused'])} | "
                     f"{ratios(runs, 'fused')} | {max(r['differences']['library'] for r in runs):.2g}, "
                     f"{max(r['differences']['fused'] for r in runs):.2g} |")
    lines += ["", "`vs ORT` is ONNX Runtime's median over the library's: above 1, the library is faster. The "
              "machine's speed drifts over seconds, more than between two runtimes' rounds a tenth of a second "
              "apart; paired by round (each round's ONNX Runtime median over the library's, the median of those "
              "over a process's rounds), the ratios are, as median (range) over the processes:", ""]
    for runs in results:
        paired = {k: sorted(r["paired"][k] for r in runs) for k in ("library", "fused")}
        lines.append(f"- {runs[0]['name']}: library {statistics.median(paired['library']):.2f}x "
                     f"({paired['library'][0]:.2f}-{paired['library'][-1]:.2f}), fused "
                     f"{statistics.median(paired['fused']):.2f}x ({paired['fused'][0]:.2f}-{paired['fused'][-1]:.2f})")
    lines += ["", "Where the nodes ran, and the rest:", ""]
    for runs in results:
        r = runs[0]
        loads = [load for run in runs for load in run["load"]]
        lines.append(f"- {r['name']}: unfused {where(r['placement']['library'])}; fused "
                     f"{where(r['placement']['fused'])}; the values' buffers {r['planned']['library'] / 2**20:.2f} "
                     f"MiB unfused, {r['planned']['fused'] / 2**20:.2f} MiB fused (shared between values that do not "
                     f"live at once); {r['calls']} calls of each in each of {len(runs)} processes; "
                     f"load average {min(loads):.1f} to {max(loads):.1f} while timing; importing and building both "
                     f"libraries took {r['build_s']:.0f} s (kernels already built are kept).")
    return "\n".join(lines) + "\n"


def in_processes(name: str, args: argparse.Namespace, out: Path) -> list[dict]:
    """`bench_model` of `name` in `args.processes` fresh processes, one after another."""
    runs = []
    for process in range(args.processes):
        result = out / f"{name}.{process}.json"
        command = [sys.executable, __file__, "--models", name, "--child", str(result), "--out", str(out),
                   "--budget", str(args.budget), "--rounds", str(args.rounds), "--repeats", str(args.repeats),
                   *(["--quick"] if args.quick else [])]
        subprocess.run(command, check=True)
        runs.append(json.loads(result.read_text()))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tests' small sizes: a smoke run")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--budget", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, help="where the models, imports and libraries go (default: "
                        "build/onnx_models, build/onnx_models_quick with --quick)")
    parser.add_argument("--report", type=Path, help="default: bench/results/onnx_models.md, "
                        "build/onnx_models_quick/onnx_models.md with --quick")
    parser.add_argument("--processes", type=int, default=3, help="time each model in this many processes")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one process's run, as JSON to this file
    args = parser.parse_args()
    out = args.out or ROOT / "build" / ("onnx_models_quick" if args.quick else "onnx_models")
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        (name,) = args.models
        args.child.write_text(json.dumps(bench_model(name, out, args.quick, args.rounds, args.repeats, args.budget)))
        return 0
    path = args.report or (out / "onnx_models.md" if args.quick else RESULTS / "onnx_models.md")
    results = [in_processes(name, args, out) for name in args.models]
    path.write_text(report(results, args))
    for runs in results:
        for r in runs:
            m = r["medians"]
            each = ", ".join(f"{k} {m[k] * 1e3:.3f} ms ({m['onnxruntime'] / m[k]:.2f}x, paired {r['paired'][k]:.2f}x)"
                             for k in ("library", "fused"))
            print(f"{r['name']}: ONNX Runtime {m['onnxruntime'] * 1e3:.3f} ms, {each}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
