"""`make demo`: the main job on its embedded default, the library's softmax.

The job: take the spec from the kernel library, check it, and play the
moves of `examples/softmax.dojo` (the paper's Figure 5: fuse, accumulate in
registers, reuse storage, tile, vectorize, parallelize), each one among the
legal moves listed at that point; prove the result equal to the spec with
`replay` and with the reference interpreter; then generate C for this
machine, build, time and verify both programs with the runner and show the
speedup. Then the learned agent that comes with PerfDojo (its cost model,
agent/costmodel/trained) continues the spec for a few moves: at each it ranks
every candidate, measures the best few, plays the fastest and learns from their
times; the best program it met is timed again in turn with the spec. Last, what the checker
says about a broken copy.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

from dojo_ir import diagnose, interpret, load, random_inputs, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import record, verify
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find
from dojo_ir.tree import Program
from runner.local import LocalRunner
from runner.measure import measure
from runner.result import RunResult, format_time

KERNEL = "softmax"
ROWS, COLS = 4096, 512
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "softmax.dojo"


def main() -> int:
    kernel = KERNELS[KERNEL]
    print(f"The kernel library holds {len(KERNELS)} kernels (`dojo kernels` lists them).\n")
    spec = load(kernel.text(m=ROWS, n=COLS))
    print(f"{KERNEL} at {ROWS}x{COLS}, the spec:\n\n{to_text(spec)}")

    moves = load(EXAMPLE.read_text()).derivation.moves
    print(f"Playing the {len(moves)} moves of examples/softmax.dojo, each a legal move at its point:\n")
    program = spec
    started = time.perf_counter()
    for number, move in enumerate(moves, start=1):
        analysis = Analysis(program)
        legal = [str(m) for m in find(program, analysis)]
        if move not in legal:
            print(f"move {number} `{move}` is not legal here")
            return 1
        program = apply(program, move, analysis)
        print(f"  {number:>2}. {move:<46} (one of {len(legal)} legal moves)")
    elapsed = time.perf_counter() - started
    print(f"\nListing and applying took {elapsed * 1000:.0f} ms in all. The result:\n")
    print(to_text(program))

    derived = record(program, list(moves), "softmax.dojo")
    replayed = "replays exactly" if not verify(derived, spec) else "does NOT replay"
    inputs = random_inputs(spec, seed=0)
    expected, actual = interpret(spec, inputs)["y"], interpret(program, inputs)["y"]
    error = float(np.max(np.abs(actual.astype(np.float64) - expected)))
    print(f"The derivation {replayed}; the reference interpreter gives the spec's outputs "
          f"to within {error:.1e}.\n")

    print("Generating C for this machine (`native`), building and timing both (`dojo run`):\n")
    runner = LocalRunner()
    before = measure(runner, spec, target="native")
    after = measure(runner, program, target="native", spec=spec)
    for name, result in (("spec", before), ("optimised", after)):
        print(f"  {name:<10} {_report(result)}")
    if before.ok and after.ok:
        print(f"\n  speedup: {before.median_s / after.median_s:.2f}x\n")

    _agent(spec, runner)

    broken = to_text(spec).replace("m[{0}] max= x[{0},{1}]", "m[{0}] max= x[{0},{1}+1]").replace("s f32", "s f16")
    print("A broken copy of the spec (an index off by one, an unknown dtype), as `dojo check` reports it:")
    for diagnostic in diagnose(broken)[1]:
        print("  " + diagnostic.format("softmax-broken.dojo"))
    return 0 if error < 1e-5 and replayed == "replays exactly" and before.ok and after.ok else 1


AGENT_STEPS = 10
PAIRED_ROUNDS = 3  # of timing the spec and the agent's best program in turn


def _agent(spec, runner: LocalRunner) -> None:
    """The shipped agent plays a few moves from the spec; its packages come with `make test`."""
    try:
        from agent.evaluate import Evaluator
        from agent.learned import continue_agent
        from agent.perfllm.play import Step
    except ImportError as error:
        print(f"(The learned agent needs torch, which `make test` installs: {error}.)\n")
        return
    print(f"The learned agent that comes with PerfDojo (its cost model, agent/costmodel/trained) continues the "
          f"spec for {AGENT_STEPS} moves (`dojo agent continue`). At each it ranks every candidate by the model, "
          "measures the best few, the one its roofline bound expects fastest and two of other kinds, and plays the "
          "fastest; from 30 programs measured on, it refits the model on their times:\n")

    def show(step: Step) -> None:
        time_s = "failed" if step.time_s is None else format_time(step.time_s)
        print(f"  {step.index}. {step.move or 'stop':<46} {time_s}")

    evaluator = Evaluator(spec, runner=runner)
    result = continue_agent(spec, AGENT_STEPS, evaluator, on_step=show)
    if result.speedup is None:
        return
    print(f"\n  best program met: {len(result.moves)} moves, {result.speedup:.2f}x the spec as the search timed "
          f"them, {evaluator.evaluations} programs measured")
    paired = _in_turn(runner, spec, result.program)
    if paired is not None:
        print(f"  timed again, in turn with the spec ({PAIRED_ROUNDS} rounds, medians): {paired:.2f}x")
    print()


def _in_turn(runner: LocalRunner, spec: Program, program: Program) -> float | None:
    """The spec's median time over `program`'s, the two measured in alternating rounds (None when a
    run fails): the search timed the spec once, at its start, and a shared machine's load can
    change by its end."""
    spec_times, times = [], []
    for _ in range(PAIRED_ROUNDS):
        results = measure(runner, spec, target="native"), measure(runner, program, target="native", spec=spec)
        if not all(r.ok for r in results):
            return None
        spec_times.append(results[0].median_s)
        times.append(results[1].median_s)
    return statistics.median(spec_times) / statistics.median(times)


def _report(result: RunResult) -> str:
    if result.error:
        return f"failed: {result.error}"
    verified = "verified" if result.verified else "NOT verified"
    return (f"median {format_time(result.median_s)} over {result.repeats} runs, compiled in {result.compile_s:.2f} s, "
            f"{verified} (max error {result.max_error:.1e})")


if __name__ == "__main__":
    sys.exit(main())
