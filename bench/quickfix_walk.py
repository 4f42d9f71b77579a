"""Speed-up of a kernel taken from its spec by quick-fixes alone: examples/matmul.dojo.

The editor offers every legal move as a quick-fix, so a walk of legal moves is all a user needs to
make a library kernel fast. examples/matmul.dojo is such a walk: the library's matmul (768 x 1024
times 1024 x 1024) and 13 moves that tile, interchange, vectorize and unroll it into a blocked
program on one core (parallelizing the outer scope is legal too, but on this 2-core machine, with
other work on it, it made the result slower and far noisier, so the walk leaves it out).

The derivation is first replayed from the spec (`dojo_ir.derivation.verify`), and each move is
looked up where the editor offers it: among the legal moves (`moves.find`) of the program before
it, printed and parsed again, whose node covers the first line of the node the move acts on (as
`dojo moves --line L` lists them). Then the spec and the result are measured alternately, ROUNDS
rounds, each with `runner.measure.measure(LocalRunner(), ...)` on the native target (2 warm-up,
10 timed repetitions on fresh inputs, more until 1 s is timed), the result verified against the
spec. The speed-up is the median of the per-round ratios spec median / result median; the goal is
>= 3x. The load average is recorded, as other work on the machine is the main source of noise.
Results in bench/results/quickfix_walk.md.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from dojo_ir import load, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import replay, spec_path, verify
from dojo_ir.moves import find, move_lines, parse_move
from runner.local import LocalRunner
from runner.measure import measure

ROUNDS = 5
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "matmul.dojo"


def offered(before, move: str) -> int:
    """The line at which the editor offers `move` as a quick-fix in `before`; fails if it does not."""
    program = load(to_text(before))  # as the editor sees it: parsed from text, with lines
    analysis = Analysis(program)
    lines = move_lines(analysis, parse_move(move))
    if lines is None:
        raise SystemExit(f"`{move}` names no node of the program before it")
    at_line = [str(m) for m in find(program, analysis)
               if (span := move_lines(analysis, m)) is not None and span[0] <= lines[0] <= span[1]]
    if move not in at_line:
        raise SystemExit(f"`{move}` is not among the {len(at_line)} quick-fixes at line {lines[0]}")
    return lines[0]


def main() -> None:
    program = load(EXAMPLE.read_text())
    spec_file = spec_path(program, EXAMPLE)
    spec = load(spec_file.read_text())
    problems = verify(program, spec)
    if problems:
        raise SystemExit(f"{EXAMPLE.name} does not replay: {problems[0]}")
    states = replay(program, spec).states
    moves = list(program.derivation.moves)
    lines = [offered(state, move) for state, move in zip(states, moves, strict=False)]

    runner = LocalRunner()
    rounds = []
    load_before = os.getloadavg()[0]
    for k in range(ROUNDS):
        slow = measure(runner, spec, spec=spec)
        fast = measure(runner, program, spec=spec)
        for name, result in (("spec", slow), ("result", fast)):
            if not (result.error is None and result.verified):
                raise SystemExit(f"round {k + 1}: the {name} failed: {result}")
        rounds.append((slow.median_s, fast.median_s, len(slow.times), len(fast.times)))
        print(f"round {k + 1}: spec {slow.median_s * 1e3:.1f} ms, result {fast.median_s * 1e3:.2f} ms, "
              f"{slow.median_s / fast.median_s:.2f}x", flush=True)
    load_after = os.getloadavg()[0]

    ratios = [s / f for s, f, _, _ in rounds]
    speedup = statistics.median(ratios)
    rel = spec_file.relative_to(ROOT)
    report = ["# A quick-fix walk: matmul from its spec", "",
              f"`python bench/quickfix_walk.py`: `{EXAMPLE.relative_to(ROOT)}`, {len(moves)} moves from "
              f"`{rel}` (768 x 1024 times 1024 x 1024, f32), replayed exactly, each move among the editor's "
              "quick-fixes at the line of the node it acts on. Spec and result measured alternately, "
              f"{ROUNDS} rounds, with `measure(LocalRunner(), ...)` on the native target (2 warm-up, fresh inputs, "
              f"at least 1 s timed), both verified against the spec, on this {os.cpu_count()}-core machine "
              f"(load average {load_before:.2f} before, {load_after:.2f} after). Speed-up = median of the "
              "per-round ratios spec / result; the goal is >= 3x.", "",
              "| round | spec median | result median | spec / result | repetitions (spec, result) |",
              "|---|---|---|---|---|"]
    for k, (s, f, ns, nf) in enumerate(rounds):
        report.append(f"| {k + 1} | {s * 1e3:.1f} ms | {f * 1e3:.2f} ms | {s / f:.2f}x | {ns}, {nf} |")
    report += ["", f"Medians over the rounds: spec {statistics.median(r[0] for r in rounds) * 1e3:.1f} ms, "
               f"result {statistics.median(r[1] for r in rounds) * 1e3:.2f} ms; **speed-up {speedup:.2f}x** "
               f"(per-round ratios {min(ratios):.2f}x to {max(ratios):.2f}x).", "",
               "The walk (line = the first line of the node the move acts on, in the program before it as "
               "printed):", "",
               "| # | line | move |", "|---|---|---|",
               *(f"| {k + 1} | {line} | `{move}` |"
                 for k, (line, move) in enumerate(zip(lines, moves, strict=True))),
               "", "The result:", "", "```",
               *to_text(program).split("\n\n")[-1].strip().splitlines(), "```"]
    out = Path(__file__).parent / "results" / "quickfix_walk.md"
    out.write_text("\n".join(report) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
