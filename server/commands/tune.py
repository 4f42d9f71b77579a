"""`dojo tune`: optimise a kernel with a pass or a search, timing every candidate."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from agent.methods import GRAPH, GRAPHS, METHODS
from dojo_ir import to_text
from dojo_ir.derivation import record
from runner.files import write_atomically
from runner.measure import MIN_TIME_S
from runner.result import format_time

from .shared import CommandError, add_runner_options, load_file, not_the_spec, runner_for, start

GRAPH_HELP = (f"the graph random and sa search: {GRAPH} (default), whole candidate sequences that the passes' "
              "heuristics propose, far better within a small budget; or edges, one legal move at a time, the "
              "uninformed game (for research, and what the agent plays)")

AGENT_CHECKPOINT_HELP = ("the learned agent (--method agent): a cost model's file (.npz, `dojo costmodel train`) or a "
                         "PerfLLM checkpoint (`dojo agent train`); default: the cost model shipped with PerfDojo")


def add_method_options(parser: argparse.ArgumentParser) -> None:
    """--method, --graph and --seed: how a command tunes (`dojo tune`, `dojo library build`)."""
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--graph", default=GRAPH, choices=GRAPHS, help=GRAPH_HELP)
    parser.add_argument("--seed", type=int, default=0, metavar="S")


def add_to(commands: argparse._SubParsersAction) -> None:
    tune_ = commands.add_parser("tune", help="optimise a kernel with a pass or a search, timing every candidate")
    tune_.add_argument("file", metavar="FILE", help="the spec (or a derived file: its moves are kept as a prefix)")
    add_method_options(tune_)
    tune_.add_argument("--checkpoint", metavar="PATH", help=AGENT_CHECKPOINT_HELP)
    tune_.add_argument("--budget", type=int, default=100, metavar="N",
                       help="evaluations after the spec's (default: 100)")
    tune_.add_argument("--time-limit", type=float, metavar="S", help="stop searching after S seconds")
    tune_.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                       help=f"final measurement of the best candidates: at least S s each (default: {MIN_TIME_S:g})")
    tune_.add_argument("--out", "-o", required=True, metavar="OUT.dojo", help="the best program; log in OUT.dojo.jsonl")
    tune_.add_argument("--resume", action="store_true", help="continue from OUT.dojo.jsonl")
    tune_.add_argument("--json", action="store_true", help="the result summary as JSON")
    add_runner_options(tune_)
    tune_.set_defaults(run=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    # imported here so that the commands that do not tune start without the searches
    from agent.evaluate import replay_moves
    from agent.tune import KernelTuneOptions, TuneProgress, tune
    from runner.client import RunnerError

    program = load_file(args.file)
    out = Path(args.out)
    log = out.with_name(out.name + ".jsonl")
    if not out.resolve().parent.is_dir():
        raise CommandError(f"{out}: error: cannot write: the directory {out.parent} does not exist")
    spec, prefix, spec_file = start(program, args.file)
    not_the_spec(out, spec_file, "tune")
    relative = os.path.relpath(spec_file, out.resolve().parent)
    tty = sys.stderr.isatty()

    def write(moves) -> None:
        best, _ = replay_moves(spec, list(moves))
        write_atomically(out, to_text(record(best, list(moves), relative)).encode())

    def progress(p: TuneProgress) -> None:
        if p.improved:
            write(p.best_moves)
        speedup = "" if p.speedup is None else f" ({p.speedup:.2f}x)"
        eta = "" if p.eta_s is None else f", eta {p.eta_s:.0f} s"
        line = f"{p.evaluations}/{p.budget} evaluations, best {format_time(p.best_s)}{speedup}{eta}"
        print(f"\r{line:<70}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    try:
        options = KernelTuneOptions(args.method, args.budget, graph=args.graph, target=args.target, seed=args.seed,
                                    time_limit_s=args.time_limit, resume=args.resume, final_min_time_s=args.min_time,
                                    checkpoint=args.checkpoint and Path(args.checkpoint))
        with runner_for(args) as runner:
            result = tune(spec, options, spec_path=relative, prefix=prefix, log=log, runner=runner,
                          on_progress=progress)
    except (RunnerError, ValueError) as error:
        raise CommandError(f"dojo tune: error: {error}") from None
    except KeyboardInterrupt:
        if tty:
            print(file=sys.stderr)
        print(f"dojo tune: interrupted; the best program so far is in {out}, every evaluation in {log} "
              "(--resume continues)", file=sys.stderr)
        return 130
    if tty:
        print(file=sys.stderr)
    write_atomically(out, to_text(result.program).encode())
    summary = {"out": str(out), "log": str(log), **{k: v for k, v in result.to_json().items() if k != "history"}}
    if args.json:
        print(json.dumps(summary))
    else:
        speedup = "" if result.speedup is None else f", {result.speedup:.2f}x"
        print(f"{program.name}: {args.method}: {len(result.moves)} moves, {format_time(result.spec_s)} -> "
              f"{format_time(result.time_s)}{speedup} after {result.evaluations} evaluations; wrote {out}")
    return 0
