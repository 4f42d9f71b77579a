"""The convolutions and fully connected layers of ResNet-50, SqueezeNet and ShuffleNet, one node at a
time: PerfDojo's heuristic library against ONNX Runtime, and against the fraction of the FMA peak.

    python bench/conv_shapes.py                        # every case, this machine's vectors
    python bench/conv_shapes.py --target x86-avx2 --cases s2-3x3-512 pw-7-512
    python bench/conv_shapes.py --rounds 3 --repeats 5 --out build/conv_shapes_quick --report /tmp/r.md

Each case is a single-node ONNX model at the shape the model has it (seeded random weights and bias
as initializers, batch 1). It is imported by `dojo import` (libgen.onnx.importer, in this process)
and each kernel built by `dojo library build --method heuristic --budget 1 --target T` (the
heuristic pass, no search); then `dojo model run`'s ModelRunner and one ONNX Runtime session of the
node (its default graph optimisations, as many intra-op threads as the cores) are timed in the same
process, in alternating rounds, holding the runner's whole-machine lock. Every Conv is imported
twice: as the import writes it (a Conv of constant weights with a vector of output channels a
group takes libgen/onnx/channels_last.py's form, a depthwise one libgen/onnx/depthwise.py's, a
3-row one Winograd's) and in the direct form that every Conv had before (channels_last.fits and
depthwise.fits patched to refuse, in the import and the runner alike),
so that the step is measured in the same run. GFLOP/s count the direct form's multiply-adds (2 per
tap); the peak is the FMA peak for the target's vectors: the largest of `dojo machine`'s (when its
vectors are the target's) and two measured at the start and the end of the run. Writes
bench/results/conv_shapes.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.sections import bind_openmp_threads, machine  # noqa: E402

bind_openmp_threads()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from bench.onnx_models import dojo, rounds  # noqa: E402
from bench.pairing import geometric_mean  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from libgen.onnx import channels_last, depthwise  # noqa: E402
from libgen.onnx.importer import import_model, write_import  # noqa: E402
from libgen.onnx.run import ModelRunner  # noqa: E402
from libgen.peers import machine_lock  # noqa: E402
from runner.affinity import cores, on_cpus  # noqa: E402
from runner.roofline import machine_record, peak_flops  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# name: (model, what, (channels in, channels out, image, kernel, stride, pads, group)) for a Conv;
# (model, what, (features in, features out)) for a Gemm (y = x W' + b, W as the models store it)
CASES: dict[str, tuple[str, str, tuple[int, ...]]] = {
    "stem-7x7": ("ResNet-50", "7x7 stride 2 stem", (3, 64, 224, 7, 2, 3, 1)),
    "s2-3x3-128": ("ResNet-50", "3x3 stride 2, 56 -> 28", (128, 128, 56, 3, 2, 1, 1)),
    "s2-3x3-256": ("ResNet-50", "3x3 stride 2, 28 -> 14", (256, 256, 28, 3, 2, 1, 1)),
    "s2-3x3-512": ("ResNet-50", "3x3 stride 2, 14 -> 7", (512, 512, 14, 3, 2, 1, 1)),
    "s2-1x1-512": ("ResNet-50", "1x1 stride 2 projection, 56 -> 28", (256, 512, 56, 1, 2, 0, 1)),
    "s2-1x1-1024": ("ResNet-50", "1x1 stride 2 projection, 28 -> 14", (512, 1024, 28, 1, 2, 0, 1)),
    "s2-1x1-2048": ("ResNet-50", "1x1 stride 2 projection, 14 -> 7", (1024, 2048, 14, 1, 2, 0, 1)),
    "pw-56-256": ("ResNet-50", "pointwise at 56x56", (64, 256, 56, 1, 1, 0, 1)),
    "pw-28-512": ("ResNet-50", "pointwise at 28x28", (128, 512, 28, 1, 1, 0, 1)),
    "pw-14-1024": ("ResNet-50", "pointwise at 14x14", (256, 1024, 14, 1, 1, 0, 1)),
    "pw-14-256": ("ResNet-50", "pointwise at 14x14, reducing", (1024, 256, 14, 1, 1, 0, 1)),
    "pw-7-2048": ("ResNet-50", "pointwise at 7x7", (512, 2048, 7, 1, 1, 0, 1)),
    "pw-7-512": ("ResNet-50", "pointwise at 7x7, reducing", (2048, 512, 7, 1, 1, 0, 1)),
    "w-3x3-56": ("ResNet-50", "3x3 at 56x56", (64, 64, 56, 3, 1, 1, 1)),
    "w-3x3-28": ("ResNet-50", "3x3 at 28x28", (128, 128, 28, 3, 1, 1, 1)),
    "w-3x3-14": ("ResNet-50", "3x3 at 14x14", (256, 256, 14, 3, 1, 1, 1)),
    "w-3x3-7": ("ResNet-50", "3x3 at 7x7", (512, 512, 7, 3, 1, 1, 1)),
    "fc-2048": ("ResNet-50", "fully connected 2048 -> 1000", (2048, 1000)),
    "sq-stem": ("SqueezeNet", "3x3 stride 2 stem, 224 -> 111", (3, 64, 224, 3, 2, 0, 1)),
    "sq-squeeze-55": ("SqueezeNet", "pointwise 128 -> 16 at 55x55", (128, 16, 55, 1, 1, 0, 1)),
    "sq-expand-55": ("SqueezeNet", "pointwise 16 -> 64 at 55x55", (16, 64, 55, 1, 1, 0, 1)),
    "sq-expand-13": ("SqueezeNet", "pointwise 48 -> 192 at 13x13", (48, 192, 13, 1, 1, 0, 1)),
    "sq-expand3-55": ("SqueezeNet", "3x3 16 -> 64 at 55x55", (16, 64, 55, 3, 1, 1, 1)),
    "sq-expand3-27": ("SqueezeNet", "3x3 32 -> 128 at 27x27", (32, 128, 27, 3, 1, 1, 1)),
    "sq-expand3-13": ("SqueezeNet", "3x3 64 -> 256 at 13x13", (64, 256, 13, 3, 1, 1, 1)),
    "sq-classifier": ("SqueezeNet", "pointwise 512 -> 1000 at 13x13", (512, 1000, 13, 1, 1, 0, 1)),
    "sh-stem": ("ShuffleNet", "3x3 stride 2 stem, 224 -> 112", (3, 24, 224, 3, 2, 1, 1)),
    "sh-g1x1-28": ("ShuffleNet", "grouped 1x1 (4 groups) at 28x28", (136, 136, 28, 1, 1, 0, 4)),
    "sh-g1x1-14": ("ShuffleNet", "grouped 1x1 (4 groups) at 14x14", (272, 272, 14, 1, 1, 0, 4)),
    "sh-g1x1-7": ("ShuffleNet", "grouped 1x1 (4 groups) at 7x7", (544, 544, 7, 1, 1, 0, 4)),
    "sh-dw-28": ("ShuffleNet", "depthwise 3x3 at 28x28", (136, 136, 28, 3, 1, 1, 136)),
    "sh-dw-s2-56": ("ShuffleNet", "depthwise 3x3 stride 2, 56 -> 28", (112, 112, 56, 3, 2, 1, 112)),
    "sh-dw-s2-14": ("ShuffleNet", "depthwise 3x3 stride 2, 14 -> 7", (272, 272, 14, 3, 2, 1, 272)),
    "sh-dw-14": ("ShuffleNet", "depthwise 3x3 at 14x14, 136 channels", (136, 136, 14, 3, 1, 1, 136)),
    "sh-dw-7": ("ShuffleNet", "depthwise 3x3 at 7x7", (272, 272, 7, 3, 1, 1, 272)),
    "sh-fc": ("ShuffleNet", "fully connected 544 -> 1000", (544, 1000)),
}
FORMS = ("direct", "imported")  # the Conv's direct form, and the form the import chooses


def model_of(shape: tuple[int, ...]) -> tuple[onnx.ModelProto, np.ndarray, int]:
    """The single-node model of a case, an input for it, and its direct form's FLOPs."""
    rng = np.random.default_rng(0)
    if len(shape) == 2:
        features_in, features_out = shape
        x = rng.standard_normal((1, features_in)).astype(np.float32)
        w = (rng.standard_normal((features_out, features_in)) / np.sqrt(features_in)).astype(np.float32)
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
        out, flops = (1, features_out), 2 * features_in * features_out
    else:
        channels_in, channels_out, image, kernel, stride, pads, group = shape
        x = rng.standard_normal((1, channels_in, image, image)).astype(np.float32)
        per_in = channels_in // group
        w = (rng.standard_normal((channels_out, per_in, kernel, kernel)) / np.sqrt(per_in * kernel * kernel)
             ).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel], strides=[stride] * 2,
                                pads=[pads] * 4, group=group)
        size = (image + 2 * pads - kernel) // stride + 1
        out, flops = (1, channels_out, size, size), 2 * channels_out * size * size * per_in * kernel * kernel
    b = rng.standard_normal(out[1]).astype(np.float32)
    graph = helper.make_graph([node], "case", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x, flops


@contextlib.contextmanager
def form(name: str) -> Iterator[None]:
    """The import as it is, or with every Conv in the direct form."""
    if name == "imported":
        yield
        return
    with mock.patch.object(channels_last, "fits", lambda *_: False), \
            mock.patch.object(depthwise, "fits", lambda *_: False):
        yield


def library(model: Path, out: Path, form_name: str, target: str) -> tuple[ModelRunner, str]:
    """The model's import in `form_name`, built by the heuristic pass for `target` (kept when built
    before), its runner, and which form its Conv took."""
    files, built = out / f"{model.stem}.{form_name}", out / f"{model.stem}.{form_name}.{target}_lib"
    with form(form_name):
        imported = import_model(model)
        write_import(imported, files)
        if not built.exists():
            dojo("library", "build", *map(str, sorted(files.glob("*.dojo"))), "--method", "heuristic", "--budget",
                 "1", "--target", target, "--out", str(built), "--name", model.stem.replace("-", "_"))
        runner = ModelRunner(model, built)
    (text,) = imported.kernels.values()
    return runner, kind_of(text)


def kind_of(text: str) -> str:
    """How a kernel computes its node: Winograd, channels as lanes (depthwise or not), the direct
    form (its strided rows read by phases or not), or a Gemm."""
    if "kernel gemm(" in text:
        return "Gemm"
    if "+= u[" in text:
        return "Winograd"
    return "depthwise, channels as lanes" if "+= xb[" in text else "channels as lanes" if "* wb[" in text \
        else "direct, rows by phases" if "* wp[" in text else "direct"


def bench_case(name: str, out: Path, target: str, count: int, repeats: int) -> dict:
    _, _, shape = CASES[name]
    model, x, flops = model_of(shape)
    path = out / f"{name}.onnx"
    onnx.save(model, str(path))
    forms = FORMS if len(shape) > 2 else ("imported",)
    runners = {f: library(path, out, f, target) for f in forms}
    options = ort.SessionOptions()
    options.intra_op_num_threads = cores()
    with on_cpus():
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {"x": x}
    (expected,) = session.run(None, feeds)
    for f, (runner, _) in runners.items():
        got = runner.run(feeds)["y"]
        worst = float(np.abs(got - expected).max())
        if worst > 1e-3 * max(1.0, float(np.abs(expected).max())):
            raise SystemExit(f"{name} {f}: differs from ONNX Runtime by {worst}")
    runs = {"onnxruntime": lambda: session.run(None, feeds),
            **{f: (lambda runner=runner: runner.run(feeds)) for f, (runner, _) in runners.items()}}
    with machine_lock():
        times = rounds(runs, count, repeats)
    per_round = {k: [statistics.median(v[r:r + repeats]) for r in range(0, len(v), repeats)] for k, v in times.items()}
    return {"name": name, "flops": flops, "kinds": {f: kind for f, (_, kind) in runners.items()},
            "medians": {k: statistics.median(v) for k, v in times.items()},
            "best": {k: min(v) for k, v in times.items()},
            "paired": {k: statistics.median(o / t for o, t in zip(per_round["onnxruntime"], v, strict=True))
                       for k, v in per_round.items() if k != "onnxruntime"}}


def report(rows: list[dict], peak: float, args: argparse.Namespace, load: tuple[float, float]) -> str:
    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.3f} ms"

    lines = ["# Convolutions and fully connected layers of real models, one node at a time", "",
             f"`python bench/conv_shapes.py --target {args.target}` on {machine()} (load average {load[0]:.1f} "
             f"before, {load[1]:.1f} after). Each case is one node at the "
             "shape its model has, batch 1, imported by `dojo import` and built by `dojo library build --method "
             f"heuristic --budget 1 --target {args.target}`, then timed by `dojo model run`'s ModelRunner against "
             f"one ONNX Runtime session of the node ({cores()} intra-op threads) in {args.rounds} alternating rounds "
             f"of {args.repeats} calls, under the runner's machine lock. `direct` is every Conv's form before "
             "libgen/onnx/channels_last.py and depthwise.py (output rows as the vector), `imported` the form the "
             "import now "
             "chooses (Winograd for 3-row stride-1 kernels, channels as lanes for constant weights with 16 or more "
             "output channels a group or depthwise in blocks of 16 channels, else direct). GFLOP/s count 2 per "
             "multiply-add of the direct form; the "
             f"FMA peak for {args.target}'s vectors (the largest of `dojo machine`'s and two measured in this run) is "
             f"{peak / 1e9:.0f} GFLOP/s. "
             "`vs ORT` is ONNX Runtime's time over ours paired by round (the median of the rounds' ratios): "
             "above 1, ours is faster. A call that another process interrupts "
             "waits for it (more so for our OpenMP threads, bound one per core, than for ONNX Runtime's): "
             "the `best` columns give each runtime's fastest call, what it does on a quiet machine.", "",
             "| case | model: what | form | ONNX Runtime (best) | direct (best) | vs ORT | imported (best) | "
             "GFLOP/s (best) | of peak (best) | vs ORT |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        model, what, _ = CASES[row["name"]]
        medians, best, paired = row["medians"], row["best"], row["paired"]
        both = {run: f"{ms(medians[run])} ({ms(best[run])})" for run in medians}
        direct = f"{both['direct']} | {paired['direct']:.2f}" if "direct" in medians else "- | -"
        speed, fastest = row["flops"] / medians["imported"], row["flops"] / best["imported"]
        lines.append(f"| {row['name']} | {model}: {what} | {row['kinds']['imported']} | {both['onnxruntime']} | "
                     f"{direct} | {both['imported']} | {speed / 1e9:.0f} ({fastest / 1e9:.0f}) | "
                     f"{speed / peak:.0%} ({fastest / peak:.0%}) | **{paired['imported']:.2f}** |")
    ratios = [row["paired"]["imported"] for row in rows]
    steps = [row["medians"]["direct"] / row["medians"]["imported"] for row in rows if "direct" in row["medians"]]
    fastest = [row["best"]["onnxruntime"] / row["best"]["imported"] for row in rows]
    lines += ["", f"Geometric mean of `vs ORT` over the {len(rows)} cases: {geometric_mean(ratios):.2f} (of the "
              f"best calls: {geometric_mean(fastest):.2f}); of direct over imported over the {len(steps)} Conv "
              f"cases: {geometric_mean(steps):.2f}x."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--target", default="native")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "conv_shapes",
                        help="where the models, imports and libraries go (libraries built before are kept)")
    parser.add_argument("--report", type=Path, default=RESULTS / "conv_shapes.md")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    target = get_target(args.target)
    peaks = [peak_flops(target)]
    record = machine_record()  # `dojo machine`'s, measured on a quieter machine than a shared one often is
    if record["detail"].get("vector_bytes") == target.vector_bytes:
        peaks.append(record["peak_flops"])
    rows = []
    for name in args.cases:
        started = time.perf_counter()
        row = bench_case(name, args.out, args.target, args.rounds, args.repeats)
        rows.append(row)
        m = row["medians"]
        print(f"{name}: {row['kinds']['imported']}, ORT {m['onnxruntime'] * 1e3:.3f} ms, "
              + ", ".join(f"{f} {m[f] * 1e3:.3f} ms ({row['paired'][f]:.2f}x)" for f in FORMS if f in m)
              + f" [{time.perf_counter() - started:.0f} s]", flush=True)
    peaks.append(peak_flops(target))
    args.report.write_text(report(rows, max(peaks), args, (load, os.getloadavg()[0])))
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
