"""The library benchmark: PerfDojo's kernels (the paper's Table 3) against numpy, PyTorch eager, torch.compile,
ONNX Runtime and TVM MetaSchedule, each against the roofline bound of this machine.

    python bench/library.py                       # every kernel and peer at the paper's shapes
    python bench/library.py --quick               # small shapes, 8 TVM trials: a smoke run
    python bench/library.py --tuned DIR           # PerfDojo's times from DIR/<kernel>.dojo (`dojo tune` results)
    python bench/library.py --kernels softmax relu --peers torch tvm --tvm-trials 64 --scale 4
    python bench/library.py --kernels conv2 matmul --peers numpy torch onnxruntime --heuristic --rounds 5
                                                  # the heuristic pass alone, 5 alternating rounds, paired ratios
    python bench/library.py --convergence a.jsonl b.jsonl    # also plot best time against evaluations

The machine's limits are measured again at the start (`runner.roofline.machine_limits(refresh=True)`). Per
kernel: the roofline bound of the spec (`work`, `bound_s`), each peer's time (libgen/peers: warm-up, then
repetitions on preallocated inputs until 0.5 s are timed, median, holding the runner's `bench.lock` as `dojo
run` does; inputs `dojo_ir.random_inputs(spec, 0)`, as the runner's; the output checked against numpy in
float64 within a relative 1e-3, else "wrong numbers") and PerfDojo's: the tuned program `DIR/<kernel>.dojo`
measured by `runner.measure.measure(LocalRunner(), program, spec=spec)` (at least 1 s timed, verified
against the spec), or the spec itself, marked "untuned", when there is none. Every peer runs in a forked
child with a time limit, so a crash, a hang or an exception is a recorded failure, not the end of the run.
Results: bench/results/library.md and the plots bench/results/library_speedup_<peer>.png (Figure 1b/14
style) and, with --convergence, bench/results/library_convergence.png (Figure 13 style)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import multiprocessing
import os
import signal
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.library_plots import best_so_far, plot_convergence, plot_speedups  # noqa: E402,F401
from bench.pairing import geometric_mean  # noqa: E402
from codegen.targets import host_caches  # noqa: E402
from dojo_ir import DojoError, load, random_inputs  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from libgen.peers import PEERS, Outcome, evaluate, machine_lock, reference, spec_of  # noqa: E402
from runner.result import format_time  # noqa: E402
from runner.roofline import bound_s, machine_limits, work  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SEED = 0


def shape_of(kernel: str, scale: int = 1, quick: bool = False) -> tuple[dict[str, int], str]:
    """The shape to run and how it differs from the paper's: the paper's, or its outermost dimension larger
    than 1 divided by `scale` (swiglu's batch is 1, so its tokens), or the library's quick shape (--quick)."""
    if quick:
        return dict(KERNELS[kernel].quick_params), "quick"
    params = dict(KERNELS[kernel].params)
    if scale == 1:
        return params, ""
    outer = next(name for name, size in params.items() if size > 1)
    params[outer] = max(1, params[outer] // scale)
    return params, f"{outer} {KERNELS[kernel].params[outer]} -> {params[outer]}"


def reread_bytes(kernel: str, shape: dict[str, int], cache_bytes: int) -> tuple[int, str]:
    """Bytes a kernel must read again beyond the roofline's each-byte-once, and why: a batch norm reads
    each channel three times (its mean, its variance around the mean, the output), which stays in
    the last-level cache only when a channel fits in it."""
    if kernel.startswith("batchnorm"):
        channel = shape["n"] * shape["h"] * shape["w"] * 4
        if channel > cache_bytes:
            return 2 * channel * shape["c"], (f"{kernel}: a channel ({channel / 1e6:.0f} MB) does not fit in the "
                                              f"{cache_bytes / 1e6:.0f} MB last-level cache, so the bound reads x "
                                              "three times (mean, variance, output)")
    return 0, ""


# The bars: the groups of kernels and how close to their bound each must come.
MEMORY_BOUND = ("add", "mul", "relu", "softmax", "layernorm1", "layernorm2", "rmsnorm", "reducemean", "batchnorm1",
                "batchnorm2")
COMPUTE_BOUND = ("matmul", "bmm", "conv1", "conv2", "swiglu")
BAR = {**dict.fromkeys(MEMORY_BOUND, 1.25), **dict.fromkeys(COMPUTE_BOUND, 1.5)}
FRAMEWORKS = ("numpy", "torch", "torch.compile", "onnxruntime")  # the best of these is what a kernel must beat


def shape_words(shape: dict[str, int]) -> str:
    return "x".join(str(v) for v in shape.values())


# -- running the peers, each in a forked child ------------------------------------------------


def reuse_heap() -> None:
    """Make glibc's malloc keep and reuse freed memory instead of mapping every large block afresh and
    unmapping it on free (blocks over 32 MB always are): else numpy, torch and torch.compile pay a page
    fault per 4 KiB of every output on every call, which on this virtual machine costs them up to 2x on the
    memory-bound kernels. The same as the jemalloc or tcmalloc that PyTorch recommends on the CPU; ONNX
    Runtime, TVM and PerfDojo write into preallocated outputs anyway."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_max = -1, -4
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2**31 - 1)


def _child(connection: Any, peer: str, kernel: str, shape: dict[str, int], inputs: Any, expected: Any,
           options: dict[str, Any], system_malloc: bool = False) -> None:
    os.setpgid(0, 0)  # a group of its own, so that run_peer can end it with whatever it started
    try:
        if not system_malloc:
            reuse_heap()
        # the runner's lock: no other benchmark times while a peer does
        outcome = evaluate(peer, kernel, shape, inputs, expected, lock=machine_lock, **options)
        outcome.notes = {k: v for k, v in outcome.notes.items() if k in ("trials", "traceback")}
    except BaseException as error:  # noqa: BLE001
        outcome = Outcome(peer, kernel, failure=f"exception: {type(error).__name__}: {str(error)[:160]}")
    connection.send(outcome)
    connection.close()


def run_peer(peer: str, kernel: str, shape: dict[str, int], inputs: Any, expected: Any, timeout_s: float,
             options: dict[str, Any], system_malloc: bool = False) -> Outcome:
    """`evaluate` in a forked child (inputs and reference shared copy-on-write), killed after `timeout_s`
    together with the processes it started."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    started = time.perf_counter()
    process = context.Process(target=_child, args=(send, peer, kernel, shape, inputs, expected, options,
                                                               system_malloc))
    process.start()
    send.close()
    outcome: Outcome | None = None
    if receive.poll(timeout_s):
        try:
            outcome = receive.recv()
        except EOFError:
            outcome = None
    process.join(5)
    try:  # the child and what it started (TVM's measuring workers outlive it otherwise)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.join()
    if outcome is None:
        elapsed = time.perf_counter() - started
        if elapsed >= timeout_s:
            return Outcome(peer, kernel, setup_s=elapsed, failure=f"timeout: no result in {timeout_s:.0f} s")
        return Outcome(peer, kernel, setup_s=elapsed, failure=f"crashed: exit code {process.exitcode}")
    return outcome


def peer_options(peer: str, args: argparse.Namespace) -> dict[str, Any]:
    if peer == "tvm":
        return {"trials": args.tvm_trials}
    return {}


# -- PerfDojo ---------------------------------------------------------------------------------


def perfdojo(kernel: str, spec: Any, tuned_dir: Path | None, heuristic: bool = False) -> dict[str, Any]:
    """PerfDojo's time: the heuristic pass's program for this machine (`heuristic`), else the tuned program if
    there is one, else the spec ("untuned")."""
    from agent.passes import heuristic as heuristic_pass
    from dojo_ir.derivation import advance
    from runner.local import LocalRunner
    from runner.measure import measure

    program, source = spec, "untuned"
    if heuristic:
        program, source = advance(spec, heuristic_pass(spec, "native")), "heuristic"
    elif tuned_dir is not None and (tuned_dir / f"{kernel}.dojo").exists():
        path = tuned_dir / f"{kernel}.dojo"
        try:
            program, source = load(path.read_text()), "tuned"
        except DojoError as error:
            return {"source": "tuned", "failure": f"invalid {path.name}: {str(error).splitlines()[0][:120]}"}
    try:
        result = measure(LocalRunner(), program, repeats=3, warmup=1, spec=spec)
    except Exception as error:  # noqa: BLE001
        return {"source": source, "failure": f"exception: {type(error).__name__}: {str(error)[:160]}"}
    if result.error is not None:
        return {"source": source, "failure": result.error.splitlines()[0][:160]}
    if result.verified is False:
        return {"source": source, "failure": f"wrong numbers: max error {result.max_error:.2g}"}
    return {"source": source, "median_s": result.median_s, "min_s": result.min_s, "repeats": result.repeats,
            "compile_s": result.compile_s, "verified": result.verified}


def measure_rounds(row: dict[str, Any], kernel: str, spec: Any, shape: dict[str, int], inputs: Any, expected: Any,
                   args: argparse.Namespace) -> None:
    """Each peer's and PerfDojo's time into `row`, in `args.rounds` rounds whose order alternates: the median of
    the rounds' medians, the least minimum, and (`row["paired"]`) PerfDojo's time over the fastest peer's of the
    same round, one per round."""
    names = [*args.peers, *([] if args.no_perfdojo else ["PerfDojo"])]
    medians: dict[str, list[float]] = {name: [] for name in names}
    minimums: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            if name in row["failures"]:
                continue
            if name == "PerfDojo":
                dojo = perfdojo(kernel, spec, args.tuned, args.heuristic)
                row["perfdojo"] = dojo
                row["setup"][name] = dojo.get("compile_s", 0.0)
                ok, median, least, failure = dojo.get("failure") is None, dojo.get("median_s"), dojo.get("min_s"), \
                    f"{dojo['source']}: {dojo.get('failure')}"
                shown = f"{format_time(median) if ok else dojo} ({dojo['source']})"
            else:
                outcome = run_peer(name, kernel, shape, inputs, expected, args.timeout, peer_options(name, args),
                                   args.system_malloc)
                row["setup"][name] = outcome.setup_s
                ok, median, least, failure = outcome.ok, outcome.median_s, outcome.min_s, outcome.failure or "no time"
                shown = f"{format_time(median) if ok else failure}  (setup {outcome.setup_s:.1f} s)"
            if ok:
                medians[name].append(median)
                minimums[name].append(least)
            else:
                row["failures"][name] = failure
            print(f"{kernel:11} {name:14} {shown}", flush=True)
    if args.no_perfdojo:
        row["perfdojo"] = {"source": "skipped"}
    for name in names:
        row["times"][name] = statistics.median(medians[name]) if medians[name] and name not in row["failures"] \
            else None
        row["min"][name] = min(minimums[name]) if row["times"][name] is not None else None
    peers = [name for name in args.peers if row["times"][name] is not None and name in FRAMEWORKS]
    if row["times"].get("PerfDojo") is not None and peers:
        row["paired"] = [dojo / min(medians[p][k] for p in peers) for k, dojo in enumerate(medians["PerfDojo"])]


# -- the report -------------------------------------------------------------------------------


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return geometric_mean(values) if values else None


def time_cells(row: dict[str, Any], key: str, columns: list[str], missing: str) -> list[str]:
    """`time (time / bound)` of each column's `row[key]` entry, `missing` where there is none."""
    cells = []
    for name in columns:
        t = row[key].get(name)
        cells.append(missing if t is None else f"{format_time(t)} ({t / row['bound_s']:.1f}x)")
    return cells


def report(rows: list[dict[str, Any]], peers: list[str], machine: Any, meta: dict[str, Any]) -> str:
    out = ["# Library benchmark: PerfDojo against its peers", ""]
    out.append(f"`{meta['command']}`, {meta['date']}, {meta['elapsed_s']:.0f} s.")
    out.append("")
    out.append(f"Machine: {machine.cpu}, {machine.cores} cores, memory bandwidth "
               f"{machine.bandwidth_Bps / 1e9:.1f} GB/s, peak f32 {machine.peak_flops / 1e9:.0f} GFLOP/s "
               f"(`runner.roofline.machine_limits()`). Load average (1, 5, 15 min) before "
               f"{meta['load_before']}, after {meta['load_after']}: other work shared the 2 cores, so "
               "times are noisy.")
    out.append("")
    out.append(f"Peers: {meta['versions']}. All on the CPU with {2} threads. TVM: MetaSchedule with "
               f"{meta['tvm_trials']} trials ({meta.get('tvm_cost_model', 'random')} cost model), best "
               "schedule built with LLVM for this CPU; 0 trials means TVM's default schedule. torch.compile: "
               "inductor, static shapes. numpy and torch allocate their outputs per call; "
               + ("glibc's malloc as is (--system-malloc). " if meta["system_malloc"] else
                  "malloc set to reuse freed memory (`reuse_heap`), as jemalloc/tcmalloc would. ")
               + "Times: median after warm-up over at least 0.5 s of repetitions, every repetition on fresh "
               "inputs written just before it (untimed), as PerfDojo's runner does (the inputs alternate "
               "between `dojo_ir.random_inputs(spec, 0)` and `(spec, 1)`); every output checked "
               "against numpy in float64 (relative 1e-3). PerfDojo: `runner.measure.measure` on the tuned "
               "program (at least 1 s, verified against the spec by the runner), or on the spec itself "
               "(`untuned`: the unscheduled loop nests compiled by gcc).")
    out.append("")
    if meta["shape_note"]:
        out.append(meta["shape_note"])
        out.append("")

    columns = [*peers, "PerfDojo"]
    out.append("## Times (and time / roofline bound)")
    out.append("")
    out.append("| kernel | shape | bound | " + " | ".join(columns) + " |")
    out.append("|---|---|---|" + "---|" * len(columns))
    for row in rows:
        cells = time_cells(row, "times", columns, "fail")
        dojo = row["perfdojo"]
        if dojo.get("median_s") is not None and dojo["source"] != "tuned":
            cells[-1] += f" {dojo['source']}"
        shape = shape_words(row["shape"]) + (f" ({row['shape_change']})" if row["shape_change"] else "")
        out.append(f"| {row['kernel']} | {shape} | {format_time(row['bound_s'])} | " + " | ".join(cells) + " |")
    line = ["geomean time / bound", "", ""]
    for name in columns:
        g = geomean([row["times"][name] / row["bound_s"] for row in rows if row["times"].get(name)])
        line.append("-" if g is None else f"{g:.1f}x")
    out.append("| " + " | ".join(line) + " |")
    best = []
    for row in rows:
        found = [(t, n) for n, t in row["times"].items() if t is not None and n != "PerfDojo"]
        best.append(min(found) if found else None)
    out.append("")
    out.append("Best peer per kernel (what a tuned kernel must beat): " + ", ".join(
        f"{row['kernel']} {b[1]} {format_time(b[0])} ({b[0] / row['bound_s']:.1f}x bound)"
        for row, b in zip(rows, best, strict=True) if b is not None) + ".")
    out.append("")

    out.append("## Speedup of PerfDojo over each peer")
    out.append("")
    out.append("peer time / PerfDojo time; above 1 PerfDojo is faster.")
    out.append("")
    out.append("| kernel | PerfDojo | " + " | ".join(peers) + " |")
    out.append("|---|---|" + "---|" * len(peers))
    for row in rows:
        dojo = row["times"].get("PerfDojo")
        cells = []
        for peer in peers:
            t = row["times"].get(peer)
            cells.append("-" if t is None or dojo is None else f"{t / dojo:.2f}")
        out.append(f"| {row['kernel']} | {row['perfdojo'].get('source', '-')} | " + " | ".join(cells) + " |")
    line = ["geomean", ""]
    for peer in peers:
        g = geomean([row["times"][peer] / row["times"]["PerfDojo"] for row in rows
                     if row["times"].get(peer) and row["times"].get("PerfDojo")])
        line.append("-" if g is None else f"{g:.2f}")
    out.append("| " + " | ".join(line) + " |")
    out.append("")

    paired = [row for row in rows if row.get("paired")]
    if paired:
        out.append(f"PerfDojo's time over the fastest of {', '.join(p for p in FRAMEWORKS if p in peers)} measured in "
                   "the same round (paired by round; median and range over the rounds; below 1 PerfDojo is faster): "
                   + "; ".join(f"{row['kernel']} **{statistics.median(row['paired']):.2f}** "
                               f"({min(row['paired']):.2f}-{max(row['paired']):.2f}, {len(row['paired'])} rounds)"
                               for row in paired) + ".")
        out.append("")
    out.extend(bars(rows, peers))
    if meta["rereads"]:
        out.append("Bounds that count data read more than once: " + "; ".join(meta["rereads"]) + ".")
        out.append("")
    out.append("The bound is DRAM traffic and peak FMA rate (`runner.roofline`); inputs written just before each "
               "run (by PerfDojo's harness or a peer's refresh) are partly still in the last-level cache, "
               "so a small kernel can beat it (time / bound below 1x), and so can a peer that does fewer flops "
               "than the spec (oneDNN's Winograd convolution).")
    out.append("")
    out.append("## Minimum times")
    out.append("")
    out.append("The fastest repetition (time / bound). On this shared 2-core machine a thread of a parallel "
               "peer that loses its core waits for the next 4 ms scheduler tick, so medians come in multiples "
               "of 4 ms when other work runs; the minimum shows what the peer does when it has both cores.")
    out.append("")
    out.append("| kernel | " + " | ".join(columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    for row in rows:
        out.append(f"| {row['kernel']} | " + " | ".join(time_cells(row, "min", columns, "-")) + " |")
    line = ["geomean time / bound"]
    for name in columns:
        g = geomean([row["min"][name] / row["bound_s"] for row in rows if row["min"].get(name)])
        line.append("-" if g is None else f"{g:.1f}x")
    out.append("| " + " | ".join(line) + " |")
    out.append("")
    out.append("## Failures")
    out.append("")
    failures = [(row["kernel"], name, reason) for row in rows for name, reason in row["failures"].items()]
    if failures:
        out.append("| kernel | peer | reason |")
        out.append("|---|---|---|")
        out.extend(f"| {k} | {p} | {r.replace('|', '/')} |" for k, p, r in failures)
    else:
        out.append("None.")
    out.append("")

    out.append("## Set-up times")
    out.append("")
    out.append("Building, compiling (torch.compile's first call) or tuning (TVM), before timing; PerfDojo: "
               "the build of the measured program (near 0 when cached).")
    out.append("")
    out.append("| kernel | " + " | ".join(columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    for row in rows:
        out.append(f"| {row['kernel']} | " + " | ".join(
            f"{row['setup'].get(name, 0):.1f} s" for name in columns) + " |")
    out.append("")
    return "\n".join(out)


def bars(rows: list[dict[str, Any]], peers: list[str]) -> list[str]:
    """The issue's bars, each with what this run measured."""
    out = ["## The bars", ""]
    versus_best, behind = [], []
    for row in rows:
        dojo = row["times"].get("PerfDojo")
        found = [(t, n) for n, t in row["times"].items() if n in FRAMEWORKS and n in peers and t]
        if dojo and found:
            best, name = min(found)
            versus_best.append(best / dojo)
            if dojo > 1.1 * best:
                behind.append(f"{row['kernel']} ({best / dojo:.2f} of {name})")
    g = geomean(versus_best)
    if g is not None:
        out.append(f"- Against the fastest of {', '.join(p for p in FRAMEWORKS if p in peers)} on each kernel: "
                   f"**{g:.2f}x** in geometric mean (bar: above 1); more than 10% slower on "
                   f"{', '.join(behind) if behind else 'none'} (bar: none).")
    for group, limit in (("memory-bound", 1.25), ("compute-bound", 1.5)):
        members = [row for row in rows if BAR.get(row["kernel"]) == limit and row["times"].get("PerfDojo")]
        if not members:
            continue
        over = [f"{row['kernel']} {row['times']['PerfDojo'] / row['bound_s']:.2f}x" for row in members
                if row["times"]["PerfDojo"] > limit * row["bound_s"]]
        out.append(f"- {group.capitalize()} kernels within {limit}x of their bound: "
                   f"{len(members) - len(over)} of {len(members)}" + (f"; not {', '.join(over)}" if over else "")
                   + ".")
    tvm = geomean([row["times"]["tvm"] / row["times"]["PerfDojo"] for row in rows
                   if row["times"].get("tvm") and row["times"].get("PerfDojo")])
    if tvm is not None:
        out.append(f"- Against TVM MetaSchedule: **{tvm:.2f}x** in geometric mean (bar: above 1).")
    out.append("")
    return out


# -- main -------------------------------------------------------------------------------------


def versions(peers: list[str]) -> str:
    import importlib.metadata as md

    names = {"numpy": "numpy", "torch": "torch", "torch.compile": "torch", "onnxruntime": "onnxruntime",
             "tvm": "apache-tvm"}
    seen = {}
    for peer in peers:
        try:
            seen[names[peer]] = md.version(names[peer])
        except md.PackageNotFoundError:
            seen[names[peer]] = "not installed"
    return ", ".join(f"{k} {v}" for k, v in seen.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--tuned", type=Path, help="directory of tuned <kernel>.dojo files")
    parser.add_argument("--tvm-trials", type=int, default=64, help="MetaSchedule trials per kernel (0: default "
                        "schedule)")
    parser.add_argument("--scale", type=int, default=1, help="divide each kernel's outermost dimension by this")
    parser.add_argument("--quick", action="store_true", help="small shapes and 8 TVM trials: a smoke run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per peer and kernel")
    parser.add_argument("--system-malloc", action="store_true", help="leave glibc's malloc as it is (default: "
                        "the peers reuse freed memory, see reuse_heap)")
    parser.add_argument("--no-perfdojo", action="store_true", help="skip PerfDojo's measurement")
    parser.add_argument("--heuristic", action="store_true",
                        help="PerfDojo's program is the heuristic pass's for this machine (no --tuned files)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every peer and PerfDojo this many times, alternating the order")
    parser.add_argument("--convergence", nargs="*", type=Path, default=[],
                        help="JSONL tuning logs to plot as best time against evaluations")
    parser.add_argument("--out", type=Path, default=RESULTS / "library.md")
    args = parser.parse_args(argv)
    if args.quick and args.tvm_trials == parser.get_default("tvm_trials"):
        args.tvm_trials = 8

    started = time.perf_counter()
    load_before = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    machine = machine_limits(refresh=True)  # this run's own: a cached figure may date from a busy hour
    rows = []
    changes = []
    rereads: list[str] = []
    for kernel in args.kernels:
        shape, change = shape_of(kernel, args.scale, args.quick)
        if change and change != "quick":
            changes.append(f"{kernel} {change}")
        spec = spec_of(kernel, shape)
        extra, reason = reread_bytes(kernel, shape, host_caches().l3)
        spec_work = work(spec)
        bound = bound_s(replace(spec_work, bytes=spec_work.bytes + extra), machine)
        if reason:
            rereads.append(reason)
        inputs = random_inputs(spec, SEED)
        expected = reference(kernel, inputs)
        row = {"kernel": kernel, "shape": shape, "shape_change": change if change != "quick" else "",
               "bound_s": bound, "times": {}, "min": {}, "failures": {}, "setup": {}}
        measure_rounds(row, kernel, spec, shape, inputs, expected, args)
        rows.append(row)
        del inputs, expected

    shape_note = ""
    if args.quick:
        shape_note = "**Quick run: small shapes, not the paper's** (the shape column gives them)."
    elif changes:
        shape_note = "Shapes: the paper's (Table 3) except, scaled by --scale " + str(args.scale) + ": " + \
            "; ".join(changes) + "."
    else:
        shape_note = "Shapes: the paper's (Table 3)."
    meta = {
        "command": "python bench/library.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": time.perf_counter() - started,
        "load_before": load_before,
        "load_after": ", ".join(f"{v:.2f}" for v in os.getloadavg()),
        "versions": versions(args.peers),
        "tvm_trials": args.tvm_trials,
        "tvm_cost_model": "xgb" if importlib.util.find_spec("xgboost") else "random",
        "system_malloc": args.system_malloc,
        "shape_note": shape_note,
        "rereads": rereads,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = report(rows, args.peers, machine, meta)
    plots = [] if args.no_perfdojo else plot_speedups(rows, args.peers, args.out)
    if args.convergence:
        plots.append(plot_convergence({p.stem: p for p in args.convergence},
                                      args.out.parent / "library_convergence.png"))
    if plots:
        text += "\nPlots: " + ", ".join(f"`{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}`"
                                        for p in plots) + ".\n"
    tmp = args.out.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
