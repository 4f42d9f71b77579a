"""The heuristic pass, the agent's compound steps and the C backend on kernels nobody here chose:
random nodes of the ONNX catalogue (`dojo costmodel kernels`), each scheduled by the heuristic
pass for the host and for x86-avx2, built, run and verified against its spec by the runner, as
`dojo library build` does; and for each target the first `--compound` compound steps of its spec
(agent/compound/: register tiles, fused nests), the programs the ranked search measures first.

    python bench/fuzz_random_kernels.py [--seeds 40] [--kernels 20] [--compound 2]

Writes a section of bench/results/fuzz.md. A kernel whose program fails to build, run or verify
prints its draw (operator, shapes, attributes), target and program, and the script exits 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.compound import compound_steps  # noqa: E402
from agent.passes import heuristic  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen import get_target  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from dojo_ir.paths import without_comments  # noqa: E402
from libgen.onnx.random_kernels import KiB, random_kernels  # noqa: E402
from runner.local import LocalRunner  # noqa: E402

SIZES = {"smallest": 256, "largest": 1024 * KiB, "max_flops": 8e6}  # the interpreter gives the references
TARGETS = ("native", "x86-avx2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--kernels", type=int, default=20, help="kernels of each seed")
    parser.add_argument("--compound", type=int, default=2, help="compound steps of each spec and target run too")
    parser.add_argument("--out", default="bench/results/fuzz.md")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    ops: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    failures = []
    with tempfile.TemporaryDirectory(prefix="dojo-fuzz-") as cache:
        runner = LocalRunner(cache_dir=Path(cache))
        for seed in range(args.seeds):
            for kernel in random_kernels(args.kernels, seed=seed, **SIZES):
                ops[kernel.draw.op] += 1
                spec = load(kernel.text)
                for target in TARGETS:
                    facts = get_target(target)
                    steps = islice(compound_steps(without_comments(spec), facts), args.compound)
                    programs = [("the heuristic pass", "the heuristic pass", advance(spec, heuristic(spec, facts))),
                                *(("compound steps", step.text, step.program) for step in steps)]
                    for source, what, program in programs:
                        runs[source] += 1
                        result = runner.run(program, target=target, repeats=1, warmup=0, spec=spec)
                        if not result.ok:
                            failures.append(f"seed {seed}, {target}, {what}: {kernel.draw.describe()}: "
                                            f"{result.error or f'differs by {result.max_error}'}")
                            print(failures[-1], flush=True)
    seconds = time.perf_counter() - started
    lines = [
        "# The heuristic pass's and the compound steps' C on random kernels of the ONNX catalogue",
        "",
        f"`python bench/fuzz_random_kernels.py --seeds {args.seeds} --kernels {args.kernels} "
        f"--compound {args.compound}` on {machine()}: "
        f"{sum(ops.values())} random nodes (`dojo costmodel kernels`, seeds 0 to {args.seeds - 1}, "
        f"{SIZES['smallest']} B to {SIZES['largest'] // KiB} KiB of tensors, products under "
        f"{SIZES['max_flops'] / 1e6:.0f} MFLOP), each scheduled by the heuristic pass for {' and '.join(TARGETS)}, "
        f"and for each target the first {args.compound} compound steps of its spec (register tiles, fused nests), "
        "built, run and verified against its spec by the runner.",
        "",
        f"- programs run: {sum(runs.values())} ({', '.join(f'{n} of {what}' for what, n in runs.items())})",
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
