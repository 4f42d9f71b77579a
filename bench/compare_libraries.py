"""Two or more libraries of one model, timed in turn with ONNX Runtime in one process: what a change to
the code generator or the passes does to a model, paired by round so that the host's load cancels.

    python bench/compare_libraries.py build/real_models/resnet50.onnx \\
        before=old/resnet50_fused_lib:fused after=build/real_models/resnet50_fused_lib:fused

Each NAME=DIR[:fused] is a library that `dojo library build` wrote for the model's import (`:fused`
for `dojo import --fuse`'s). In each of `--processes` fresh processes, one ONNX Runtime session (its
default optimisations, as many intra-op threads as the runner's cores) and `dojo model run`'s
ModelRunner on each library are timed in alternating rounds (bench/onnx_models.py's `rounds`, under
the runner's machine lock), each
library's outputs compared with ONNX Runtime's. Prints, and with `--report` writes, ORT / library a
library: each round's ONNX Runtime median over the library's, the median over a process's rounds,
then the median and range over the processes; each library's time over the first one's, paired by
round the same way (below 1, faster than the first); the medians of all calls; and the nodes each
runner left to ONNX Runtime. The runner imports the model with this checkout's `dojo import` and
takes a library's kernel only when it was built from the same spec, so a library built before a
change to the import runs the kernels that the change rewrote on ONNX Runtime: compare such
libraries from checkouts of their own code, each against ONNX Runtime, instead (a count above the
other library's says so).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.sections import bind_openmp_threads, machine  # noqa: E402

bind_openmp_threads()

import numpy as np  # noqa: E402

from bench.onnx_models import rounds  # noqa: E402
from bench.pairing import paired, round_medians  # noqa: E402
from libgen.onnx.profile import random_feeds  # noqa: E402
from libgen.onnx.reference import onnxruntime_session  # noqa: E402
from libgen.onnx.run import ModelRunner  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402


def parse_library(text: str) -> tuple[str, Path, bool]:
    """NAME=DIR[:fused] -> (name, directory, fused)."""
    name, sep, where = text.partition("=")
    if not sep or not name or not where:
        raise argparse.ArgumentTypeError(f"`{text}`: a library is NAME=DIR or NAME=DIR:fused")
    fused = where.endswith(":fused")
    return name, Path(where.removesuffix(":fused")), fused


def one_process(model: Path, libraries: list[tuple[str, Path, bool]], count: int, repeats: int) -> dict:
    """ORT / library for each library, the median over this process's rounds; and each one's times."""
    runners = {name: ModelRunner(model, directory, fuse=fused) for name, directory, fused in libraries}
    session = onnxruntime_session(str(model))
    feeds = random_feeds(next(iter(runners.values())).inputs, 0)
    expected = session.run(None, feeds)
    scale = max(float(np.max(np.abs(e))) for e in expected)
    differences = {}
    for name, runner in runners.items():
        got = runner.run(feeds)
        differences[name] = max(float(np.max(np.abs(np.asarray(got[o.name]) - e)))
                                for o, e in zip(session.get_outputs(), expected, strict=True)) / scale
    with machine_lock():
        times = rounds({"ort": lambda: session.run(None, feeds),
                        **{name: (lambda r=runner: r.run(feeds)) for name, runner in runners.items()}}, count, repeats)
    per_round = round_medians(times, repeats)
    first = next(iter(runners))
    return {"ratio": {name: paired(per_round, "ort", name) for name in runners},
            "to_first": {name: paired(per_round, name, first) for name in runners},
            "median_s": {k: statistics.median(v) for k, v in times.items()},
            "difference": differences,
            "onnxruntime_nodes": {name: len(runner.onnxruntime_nodes) for name, runner in runners.items()}}


def report(model: Path, results: list[dict], command: str) -> str:
    names = list(results[0]["ratio"])
    lines = [f"# {model.stem}: libraries against ONNX Runtime, in turn in one process", "",
             f"`{command}` on {machine()}.", "",
             f"| library | ORT / library (median, range over processes) | time / {names[0]}'s, same rounds | "
             "median time | ONNX Runtime | largest difference / largest output | nodes on ONNX Runtime |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        ratios = [r["ratio"][name] for r in results]
        to_first = [r["to_first"][name] for r in results]
        lines.append(f"| {name} | **{statistics.median(ratios):.3f}** ({min(ratios):.3f}-{max(ratios):.3f}) | "
                     f"{statistics.median(to_first):.3f} ({min(to_first):.3f}-{max(to_first):.3f}) | "
                     f"{statistics.median(r['median_s'][name] for r in results) * 1e3:.2f} ms | "
                     f"{statistics.median(r['median_s']['ort'] for r in results) * 1e3:.2f} ms | "
                     f"{max(r['difference'][name] for r in results):.1e} | {results[0]['onnxruntime_nodes'][name]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("libraries", nargs="+", type=parse_library, metavar="NAME=DIR[:fused]")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--report", type=Path, help="write the table there too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one process, JSON on stdout
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.model, args.libraries, args.rounds, args.repeats)))
        return 0
    results = []
    for _ in range(args.processes):
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child"], check=True,
                               capture_output=True, text=True)
        results.append(json.loads(child.stdout))
    command = "python bench/compare_libraries.py " + " ".join(sys.argv[1:])
    text = report(args.model, results, command)
    print(text, end="")
    if args.report:
        args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
