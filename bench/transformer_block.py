"""The transformer block of examples/transformer_block.py: PerfDojo's library against eager PyTorch.

    python bench/transformer_block.py                    # the heuristic pass
    python bench/transformer_block.py --method sa --graph heuristic --budget 30

Builds the block's library into build/transformer_block/ (kernels already tuned there the same way
are kept), checks that the block gives eager PyTorch's outputs, then times, in the same process and
in alternating rounds of repetitions, both blocks and each kernel against the PyTorch operators that
compute the same, holding the runner's whole-machine lock (runner/local.py) so that no other
benchmark times at once. Writes the medians and their ratios to bench/results/transformer_block.md.

The heuristic pass is the default because a search's choice is only as good as its timings: on a
2-core machine that other work shares, a program on 2 threads times far worse than it runs, and a
search then prefers programs on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
from bench.sections import bind_openmp_threads  # noqa: E402

bind_openmp_threads()  # PyTorch's OpenMP and the library's

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformer_block as example  # noqa: E402

from libgen.peers import machine_lock  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def rounds(blocks: dict[str, Callable[[torch.Tensor], object]], x: torch.Tensor, count: int,
           repeats: int) -> dict[str, list[float]]:
    """Times of each block's calls on `x`: `count` rounds, in each `repeats` calls of every block in
    turn, after a few calls of each to warm up."""
    times: dict[str, list[float]] = {name: [] for name in blocks}
    with torch.inference_mode():
        for block in blocks.values():
            for _ in range(5):
                block(x)
        for _ in range(count):
            for name, block in blocks.items():
                for _ in range(repeats):
                    start = time.perf_counter()
                    block(x)
                    times[name].append(time.perf_counter() - start)
    return times


def kernel_pairs(block: example.TorchBlock, ops: object) -> dict[str, tuple]:
    """For each kernel of the library: PyTorch's operators computing the same, and the kernel, on
    the block's shapes."""
    t, d, f = example.TOKENS, example.FEATURES, example.HIDDEN
    generator = torch.Generator().manual_seed(2)
    x, p, h = (torch.randn(*shape, generator=generator) for shape in ((t, d), (t, t), (t, f)))
    kt = x.T.contiguous()
    g, b = block.norm1_g, block.norm1_b
    return {
        "layernorm": (lambda: F.layer_norm(x, (d,), g, b, example.EPS), lambda: ops.layernorm(x, g, b)),
        "proj": (lambda: x @ block.wq, lambda: ops.proj(x, block.wq)),
        "scores": (lambda: x @ kt, lambda: ops.scores(x, kt)),
        "softmax": (lambda: torch.softmax(p, dim=-1), lambda: ops.softmax(p)),
        "attend": (lambda: p @ x, lambda: ops.attend(p, x)),
        "swiglu": (lambda: F.silu(x @ block.w1) * (x @ block.v1), lambda: ops.swiglu(x[None], block.w1, block.v1)),
        "down": (lambda: h @ block.w2, lambda: ops.down(h, block.w2)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="heuristic")
    parser.add_argument("--graph", default="edges")
    parser.add_argument("--budget", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "transformer_block")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--report", type=Path, default=RESULTS / "transformer_block.md")
    args = parser.parse_args()
    started = time.perf_counter()
    example.build(args.out, args.method, args.budget, graph=args.graph, min_time_s=0.5)
    build_s = time.perf_counter() - started
    reference = example.TorchBlock().eval()
    ours = example.DojoBlock(reference, getattr(torch.ops, example.NAME)).eval()
    x = torch.randn(example.TOKENS, example.FEATURES, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected, got = reference(x), ours(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    difference = float((got - expected).abs().max())
    load = os.getloadavg()[0]
    pairs = kernel_pairs(reference, getattr(torch.ops, example.NAME))
    with machine_lock():
        times = rounds({"eager": reference, "dojo": ours}, x, args.rounds, args.repeats)
        kernel_times = {name: rounds({"torch": lambda _, f=pair[0]: f(), "dojo": lambda _, f=pair[1]: f()}, x,
                                     args.rounds, args.repeats) for name, pair in pairs.items()}
    load_after = os.getloadavg()[0]
    eager, dojo = statistics.median(times["eager"]), statistics.median(times["dojo"])
    manifest = json.loads((args.out / "manifest.json").read_text())

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.3f} ms"

    lines = ["# A transformer block: PerfDojo's library against eager PyTorch", "",
             f"`python bench/transformer_block.py --method {args.method} --graph {args.graph} --budget "
             f"{args.budget}`: the pre-norm encoder block of examples/transformer_block.py ({example.TOKENS} tokens "
             f"of {example.FEATURES} features, one attention head, a SwiGLU feed-forward of {example.HIDDEN}), its 7 "
             f"kernels tuned by `{args.method}` ({args.budget} evaluations each) into a library and called through "
             "its PyTorch custom operators, against the same block in eager PyTorch "
             f"({torch.get_num_threads()} threads), both on this {os.cpu_count()}-core machine, in one process, "
             f"{args.rounds} alternating rounds of {args.repeats} calls each; medians. The library's outputs match "
             f"eager PyTorch's (largest difference {difference:.2g}). Load average {load:.1f} when timing began, "
             f"{load_after:.1f} when it ended; building took {build_s:.0f} s (kernels already in build/ are "
             "kept).", "",
             "| block | median | vs eager PyTorch |", "|---|---|---|",
             f"| eager PyTorch | {ms(eager)} | 1.00 |",
             f"| PerfDojo's library (torch.ops.{example.NAME}) | {ms(dojo)} | **{eager / dojo:.2f}x** |", "",
             "Each kernel: its spec and tuned program as the build measured them (the runner, fresh inputs each "
             "run), then the same rounds as the blocks' of the library's operator and of PyTorch's operators "
             "computing the same (matmul, F.layer_norm, softmax, silu(x @ w) * (x @ v)):", "",
             "| kernel | shape (first input) | spec | tuned | PyTorch | library operator | PyTorch / library |",
             "|---|---|---|---|---|---|---|"]
    for kernel in manifest["kernels"]:
        shape = " x ".join(str(n) for n in kernel["inputs"][0]["shape"])
        pair = kernel_times[kernel["name"]]
        torch_s, dojo_s = statistics.median(pair["torch"]), statistics.median(pair["dojo"])
        lines.append(f"| {kernel['name']} | {shape} | {ms(kernel['spec_s'])} | {ms(kernel['time_s'])} | "
                     f"{ms(torch_s)} | {ms(dojo_s)} | {torch_s / dojo_s:.2f} |")
    args.report.write_text("\n".join(lines) + "\n")
    print(f"eager {ms(eager)}, library {ms(dojo)}: {eager / dojo:.2f}x; wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
