"""How much a register tile's shape and the order of its blocks matter: every tile that the ranked
search offers as one step (agent/compound/register_tile.py) of a kernel, with its outermost scope then made
parallel, timed against the spec.

    python bench/register_tiles.py                                  # MiniLM's feed-forward matmul
    python bench/register_tiles.py --kernel resnet50_pointwise --rounds 5

Only the tiles of at least `--accumulators` vector accumulators are timed (the smaller ones leave
the multiply-add pipeline idle, whatever their order). Each round times every program once (the
runner: fresh inputs before each of 5 repetitions), in an order that turns from round to round;
each cell is the median of the rounds. Where a tile leaves blocks of both its rows and its columns
outside it, it is offered in both orders, and the report gives their ratio. Writes its section of
bench/results/register_tiles.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.compound import register_tiles  # noqa: E402
from agent.evaluate import Evaluator  # noqa: E402
from agent.passes.state import State  # noqa: E402
from bench.sections import machine, write_section  # noqa: E402
from codegen.targets import get_target  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.paths import without_comments  # noqa: E402

KERNELS = ROOT / "bench" / "agent_kernels"
RESULTS = ROOT / "bench" / "results" / "register_tiles.md"


def parallel(moves: tuple[str, ...], program) -> list[str]:
    """The tile's moves, then its accumulator's outermost scope made parallel where that is legal."""
    state = State(program)
    label = next(s.label for s in state.analysis.sites if s.op.reduction and s.op.target.array.endswith("_acc"))
    state.play(f"parallelize_scope(op={label}, depth=0)")
    return [*moves, *state.moves]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", default="minilm_ffn_matmul", help="a kernel of bench/agent_kernels/")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--accumulators", type=int, default=8, help="the fewest accumulators of a tile timed")
    args = parser.parse_args()

    spec = without_comments(load((KERNELS / f"{args.kernel}.dojo").read_text()))
    target = get_target("native")
    tiles = [(tile, parallel(moves, program)) for tile, moves, program in register_tiles(spec, target)
             if tile.row_factor * tile.vectors >= args.accumulators]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    times: dict[str, list[float]] = {"spec": []}
    for round_ in range(args.rounds):
        evaluator = Evaluator(spec, repeats=5)  # a fresh cache: every round times every program
        order = [("spec", [])] + [(str(tile), moves) for tile, moves in tiles]
        shift = round_ % len(order)
        for name, moves in order[shift:] + order[:shift]:
            times.setdefault(name, []).append(evaluator.evaluate(moves))
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}

    lines = [f"# Register tiles of {args.kernel}", "",
             f"`python bench/register_tiles.py --kernel {args.kernel} --rounds {args.rounds} --accumulators "
             f"{args.accumulators}`, {started}.", "", f"Machine: {machine()}.", "",
             f"The spec: {median['spec'] * 1e6:.1f} us. Each tile is followed by its outermost scope made parallel; "
             "speed-ups over the spec, medians of the rounds.", "",
             "| tile | rows blocks outside | column blocks outside | ratio |", "|---|---:|---:|---:|"]
    ratios = []
    for tile, _ in tiles:
        if tile.columns_outside:
            continue
        swapped = replace(tile, columns_outside=True)
        mine = median["spec"] / median[str(tile)]
        other = median.get(str(swapped))
        if other is None:
            lines.append(f"| {tile} | {mine:.1f}x | | |")
            continue
        theirs = median["spec"] / other
        ratios.append(theirs / mine)
        lines.append(f"| {tile} | {mine:.1f}x | {theirs:.1f}x | {theirs / mine:.2f} |")
    if ratios:
        lines += ["", f"Column blocks outside over row blocks outside: {min(ratios):.2f} to {max(ratios):.2f}, "
                  f"median {statistics.median(ratios):.2f}, over {len(ratios)} shapes."]
    write_section(RESULTS, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
