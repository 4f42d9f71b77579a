"""The heuristic pass and the C backend on kernels nobody here chose: random nodes of the ONNX
catalogue (`dojo costmodel kernels`), each scheduled by the heuristic pass for the host and for
x86-avx2, built, run and verified against its spec by the runner, as `dojo library build` does.

    python bench/fuzz_random_kernels.py [--seeds 40] [--kernels 20]

Writes a section of bench/results/fuzz.md. A kernel whose program fails to build, run or verify
prints its draw (operator, shapes, attributes) and target, and the script exits 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.passes import heuristic  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen import get_target  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from libgen.onnx.random_kernels import KiB, random_kernels  # noqa: E402
from runner.local import LocalRunner  # noqa: E402

SIZES = {"smallest": 256, "largest": 1024 * KiB, "max_flops": 8e6}  # the interpreter gives the references
TARGETS = ("native", "x86-avx2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--kernels", type=int, default=20, help="kernels of each seed")
    parser.add_argument("--out", default="bench/results/fuzz.md")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    ops: Counter[str] = Counter()
    failures = []
    with tempfile.TemporaryDirectory(prefix="dojo-fuzz-") as cache:
        runner = LocalRunner(cache_dir=Path(cache))
        for seed in range(args.seeds):
            for kernel in random_kernels(args.kernels, seed=seed, **SIZES):
                ops[kernel.draw.op] += 1
                spec = load(kernel.text)
                for target in TARGETS:
                    program = advance(spec, heuristic(spec, get_target(target)))
                    result = runner.run(program, target=target, repeats=1, warmup=0, spec=spec)
                    if not result.ok:
                        failures.append(f"seed {seed}, {target}: {kernel.draw.describe()}: "
                                        f"{result.error or f'differs by {result.max_error}'}")
                        print(failures[-1], flush=True)
    seconds = time.perf_counter() - started
    lines = [
        "# The heuristic pass's C on random kernels of the ONNX catalogue",
        "",
        f"`python bench/fuzz_random_kernels.py --seeds {args.seeds} --kernels {args.kernels}` on {machine()}: "
        f"{sum(ops.values())} random nodes (`dojo costmodel kernels`, seeds 0 to {args.seeds - 1}, "
        f"{SIZES['smallest']} B to {SIZES['largest'] // KiB} KiB of tensors, products under "
        f"{SIZES['max_flops'] / 1e6:.0f} MFLOP), each scheduled by the heuristic pass for {' and '.join(TARGETS)}, "
        "built, run and verified against its spec by the runner.",
        "",
        f"- programs run: {sum(ops.values()) * len(TARGETS)}",
        f"- failures (not built, crashed, or outputs unlike the spec's): {len(failures)}",
        f"- time: {seconds:.0f} s",
        "",
        *(f"- {failure}" for failure in failures[:20]),
        *([""] if failures else []),
        "| operator | kernels |",
        "|---|---|",
        *(f"| {op} | {count} |" for op, count in sorted(ops.items())),
        "",
    ]
    write_section(Path(args.out), "\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
