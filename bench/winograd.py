"""Convolutions imported direct and by Winograd's F(4, 3) along the rows, heuristic pass alone.

    python bench/winograd.py              # every case, 5 alternating rounds
    python bench/winograd.py --rounds 3 --cases block2

For each case (a 3x3 Conv with pads 1 at a model's shape): the catalogue's kernel of the node with
its weights as constants (Winograd, when `libgen.onnx.winograd.fits`) and as a run-time input
(direct), each given the heuristic pass for this machine (`agent.passes.heuristic`), then built,
verified against its spec and timed by the runner (`runner.measure.measure`, at least 1 s) in
alternating rounds, each round starting with the other form. Medians over the rounds, the ratio
per round and its median, and the direct form's GFLOP/s beside the FMA peak measured in the same
run. Writes bench/results/winograd.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from agent.passes import heuristic  # noqa: E402
from bench.sections import machine  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from libgen.onnx.catalogue import kernel_for  # noqa: E402
from libgen.onnx.nodes import Node, Value  # noqa: E402
from runner.local import LocalRunner  # noqa: E402
from runner.measure import measure  # noqa: E402
from runner.roofline import peak_flops  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# name: (batch, channels in, channels out, image size, what it is)
CASES = {
    "block2": (8, 16, 32, 16, "examples/onnx_models.py's conv block, second convolution"),
    "block2-64": (8, 32, 64, 32, "the conv block at 64 x 64 with 32/64 features, second convolution"),
    "resnet": (1, 64, 64, 56, "a ResNet stage's 3x3 convolution, one image"),
    "narrow": (8, 6, 8, 16, "6 channels in, 8 out: the smallest reductions Winograd takes"),
    "rows-14": (4, 16, 16, 14, "14 rows: three tiles of 4 and one of 2"),
}


def kernels(batch: int, channels_in: int, channels_out: int, size: int) -> dict[str, str]:
    """The Conv node's kernel by Winograd (its weights constant) and direct (its weights an input)."""
    weights = np.random.default_rng(0).standard_normal((channels_out, channels_in, 3, 3)).astype(np.float32)
    x = Value("x", "f32", (batch, channels_in, size, size))
    y = Value("y", "f32", (batch, channels_out, size, size))
    made = {}
    for form, constant in (("winograd", weights), ("direct", None)):
        w = Value("w", "f32", weights.shape, constant)
        kernel = kernel_for(Node("conv", "Conv", (x, w), (y,), {"pads": [1, 1, 1, 1]}))
        made[form] = kernel.render()
    assert "+= u[" in made["winograd"], "the case is not one Winograd's rule takes"
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    target = get_target("native")
    peaks = [peak_flops(target)]
    runner = LocalRunner()
    rows = []
    for name in args.cases:
        batch, channels_in, channels_out, size, what = CASES[name]
        programs = {}
        for form, text in kernels(batch, channels_in, channels_out, size).items():
            spec = load(text)
            programs[form] = (advance(spec, heuristic(spec, target)), spec)
        times: dict[str, list[float]] = {form: [] for form in programs}
        for round_ in range(args.rounds):
            order = list(programs) if round_ % 2 == 0 else list(reversed(programs))
            for form in order:
                program, spec = programs[form]
                result = measure(runner, program, target="native", repeats=3, warmup=1, spec=spec)
                if result.error is not None or not result.verified:
                    raise SystemExit(f"{name} {form}: {result.error or 'does not match its spec'}")
                times[form].append(result.median_s)
        flops = 2 * batch * channels_out * size * size * channels_in * 9
        ratios = [d / w for d, w in zip(times["direct"], times["winograd"], strict=True)]
        rows.append({"name": name, "what": what, "shape": (batch, channels_in, channels_out, size),
                     "direct": statistics.median(times["direct"]), "winograd": statistics.median(times["winograd"]),
                     "ratio": statistics.median(ratios), "range": (min(ratios), max(ratios)), "flops": flops})
        print(f"{name}: direct {rows[-1]['direct'] * 1e6:.1f} us, winograd {rows[-1]['winograd'] * 1e6:.1f} us, "
              f"{rows[-1]['ratio']:.2f}x", flush=True)
    peaks.append(peak_flops(target))
    (RESULTS / "winograd.md").write_text(report(rows, max(peaks), args.rounds))
    print(f"wrote {RESULTS / 'winograd.md'}")
    return 0


def report(rows: list[dict], peak: float, rounds: int) -> str:
    lines = ["# Convolutions by Winograd's F(4, 3) along the rows, against the direct form", "",
             f"`python bench/winograd.py` on {machine()}. Each case is a 3x3 Conv with pads 1, imported with its "
             "weights constant (Winograd) and as an input (direct), each given the heuristic pass for this machine "
             f"and timed by the runner (at least 1 s, verified against its spec) in {rounds} alternating rounds. "
             "Medians over the rounds; the ratio is direct over Winograd, per round, its median and range. "
             f"GFLOP/s count the direct form's multiply-adds (2 per tap); the FMA peak measured in the same run is "
             f"{peak / 1e9:.0f} GFLOP/s.", "",
             "| case | N x Cin -> Cout x size | direct | direct GFLOP/s | Winograd | speed-up |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        batch, channels_in, channels_out, size = row["shape"]
        low, high = row["range"]
        lines.append(f"| {row['name']}: {row['what']} | {batch} x {channels_in} -> {channels_out} x {size}x{size} | "
                     f"{row['direct'] * 1e6:.1f} µs | {row['flops'] / row['direct'] / 1e9:.0f} | "
                     f"{row['winograd'] * 1e6:.1f} µs | **{row['ratio']:.2f}x** ({low:.2f}-{high:.2f}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
