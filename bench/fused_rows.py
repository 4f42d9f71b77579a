"""Elementwise lines that fusion joins into one row: the heuristic pass against its old blind spot.

    python bench/fused_rows.py              # 5 alternating rounds
    python bench/fused_rows.py --rounds 3

The kernel is examples/bias_gelu.dojo (a bias add and tanh-GELU at 512 x 768). Three schedules of
it: the spec; the one the heuristic pass played before it kept fused rows' temporaries (both lines
joined, the temporary folded to one element, the loop parallel and scalar: `FOLDED`); and the
heuristic pass's now (`agent.passes.heuristic` for this machine). Each is built, verified against
the spec and timed by the runner (`runner.measure.measure`, at least 1 s) in alternating rounds, the
order rotating each round. Medians over the rounds and each schedule's speed-up over the spec,
paired by round. Writes its section of bench/results/fused_rows.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.passes import heuristic  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.derivation import advance  # noqa: E402
from runner.local import LocalRunner  # noqa: E402
from runner.measure import measure  # noqa: E402

RESULTS = ROOT / "bench" / "results"
KERNEL = ROOT / "examples" / "bias_gelu.dojo"
FOLDED = ["join_scopes(op=t, depth=0)", "join_scopes(op=t, depth=1)", "reuse_dims(buffer=t, dim=0)",
          "reuse_dims(buffer=t, dim=1)", "set_location(buffer=t, location=stack)", "parallelize_scope(op=t, depth=0)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    spec = load(KERNEL.read_text())
    moves = heuristic(spec, get_target("native"))
    programs = {"spec": spec, "fused, folded to a scalar (before)": advance(spec, FOLDED),
                "heuristic pass (now)": advance(spec, moves)}
    runner = LocalRunner()
    times: dict[str, list[float]] = {name: [] for name in programs}
    for round_ in range(args.rounds):
        names = list(programs)
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            result = measure(runner, programs[name], target="native", repeats=3, warmup=1, spec=spec)
            if result.error is not None or not result.verified:
                raise SystemExit(f"{name}: {result.error or 'does not match its spec'}")
            times[name].append(result.median_s)
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {t[-1] * 1e6:.0f} us" for n, t in times.items()), flush=True)
    write_section(RESULTS / "fused_rows.md", report(times, moves, args.rounds))
    print(f"wrote {RESULTS / 'fused_rows.md'}")
    return 0


def report(times: dict[str, list[float]], moves: list[str], rounds: int) -> str:
    lines = ["# Bias + tanh-GELU at 512 x 768: fused rows kept vectorised", "",
             f"`python bench/fused_rows.py` on {machine()}, a machine shared with other work. examples/bias_gelu.dojo "
             f"timed by the runner (at least 1 s each, verified against the spec) in {rounds} rounds, the order "
             "rotating. Medians over the rounds; the speed-up is the spec's time over the schedule's, per round, "
             "its median and range.", "",
             "| schedule | median | speed-up over the spec |", "|---|---|---|"]
    for name, measured in times.items():
        ratios = [s / t for s, t in zip(times["spec"], measured, strict=True)]
        lines.append(f"| {name} | {statistics.median(measured) * 1e6:.0f} µs | **{statistics.median(ratios):.1f}x** "
                     f"({min(ratios):.1f}-{max(ratios):.1f}) |")
    lines += ["", "The heuristic pass's moves: " + ", ".join(f"`{m}`" for m in moves) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
