"""`dojo agent train` and `dojo agent continue`: the learned agent (PerfLLM)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dojo_ir import load, to_text
from dojo_ir.derivation import record
from dojo_ir.library import KERNELS, Kernel
from dojo_ir.paths import without_comments
from runner.files import write_atomically
from runner.result import format_time

from .shared import CommandError, add_runner_options, load_file, not_the_spec, runner_for, start
from .tune import AGENT_CHECKPOINT_HELP


def add_to(commands: argparse._SubParsersAction) -> None:
    agent = commands.add_parser("agent", help="train the learned agent (PerfLLM), or let it continue a kernel")
    agent_commands = agent.add_subparsers(dest="agent_command", required=True, metavar="COMMAND")
    train_ = agent_commands.add_parser("train", help="deep Q-learning on library kernels (and files), measuring")
    train_.add_argument("--kernels", nargs="*", default=[], metavar="K", help="library kernels (default: all)")
    train_.add_argument("--hold-out", nargs="*", default=[], metavar="K", help="library kernels never to train on")
    train_.add_argument("--files", nargs="*", default=[], metavar="FILE", help="more specs to train on")
    train_.add_argument("--shapes", choices=["quick", "small", "paper"], default="quick",
                        help="the library kernels' shapes: quick (default; specs of tens to hundreds of "
                        "microseconds), small (the tests' tiny ones) or the paper's")
    train_.add_argument("--episodes", type=int, required=True, metavar="N", help="episodes in all (a resumed run "
                        "counts those done)")
    train_.add_argument("--max-steps", type=int, default=10, metavar="K", help="moves per episode (default: 10)")
    train_.add_argument("--out", "-o", required=True, metavar="DIR", help="checkpoint, curve and evaluation logs")
    train_.add_argument("--resume", action="store_true", help="continue the run in DIR")
    train_.add_argument("--from-logs", nargs="*", default=[], metavar="LOG", help="before the episodes, learn "
                        "offline from these evaluation logs of `dojo tune`, `dojo agent` or `dojo library build` "
                        "(a directory: every *.jsonl under it); only heuristic-free searches are read")
    train_.add_argument("--pretrain-updates", type=int, default=3000, metavar="N", help="gradient steps on the "
                        "logged experience (default: 3000)")
    train_.add_argument("--epsilon-start", type=float, metavar="E", help="the first episode's exploration rate, "
                        "falling to 0.05 over half the episodes (default: 1; lower after learning from logs)")
    train_.add_argument("--seed", type=int, default=0, metavar="S")
    add_runner_options(train_)
    train_.set_defaults(run=cmd_agent_train)

    continue__ = agent_commands.add_parser("continue", help="play N of the agent's moves from FILE, measuring, "
                                           "and keep the best program")
    continue__.add_argument("file", metavar="FILE", help="a spec or a derived file (its moves are kept)")
    continue__.add_argument("--checkpoint", metavar="PATH", help=AGENT_CHECKPOINT_HELP)
    continue__.add_argument("--steps", type=int, default=10, metavar="N", help="moves to play (default: 10)")
    where = continue__.add_mutually_exclusive_group()
    where.add_argument("--write", action="store_true", help="rewrite FILE with the best program")
    where.add_argument("--out", "-o", metavar="OUT", help="write the best program to OUT (default: print it, "
                       "and the summary on standard error)")
    continue__.add_argument("--json", action="store_true", help="print the result summary as JSON instead (and "
                            "not the program)")
    add_runner_options(continue__)
    continue__.set_defaults(run=cmd_agent_continue)


def cmd_agent_train(args: argparse.Namespace) -> int:
    # imported here: torch and the embedding model are slow to load
    from agent.perfllm.learner import LearnerConfig
    from agent.perfllm.train import TrainOptions, measured, train
    from runner.client import RunnerError

    unknown = [k for k in [*args.kernels, *args.hold_out] if k not in KERNELS]
    if unknown:
        raise CommandError(f"dojo agent train: error: unknown kernel {', '.join(unknown)}; "
                           f"the library has {', '.join(KERNELS)}")
    names = [k for k in (args.kernels or list(KERNELS)) if k not in args.hold_out]
    shaped = {"paper": Kernel.text, "quick": Kernel.quick, "small": Kernel.small}[args.shapes]
    kernels = [(name, load(shaped(KERNELS[name]))) for name in names]
    kernels += [(Path(f).stem, load_file(f)) for f in args.files]
    out = Path(args.out)

    def progress(row: dict) -> None:
        speedup = "-" if row["best_speedup"] is None else f"{row['best_speedup']:.2f}x"
        loss = "-" if row["loss"] is None else f"{row['loss']:.3g}"
        print(f"episode {row['episode']}/{args.episodes} {row['kernel']}: {row['steps']} moves, best {speedup}, "
              f"epsilon {row['epsilon']:.2f}, loss {loss}", file=sys.stderr, flush=True)

    try:
        with runner_for(args) as runner:
            options = TrainOptions(episodes=args.episodes, max_steps=args.max_steps, target=args.target,
                                   seed=args.seed, resume=args.resume, experience=tuple(_logs(args.from_logs)),
                                   pretrain_updates=args.pretrain_updates,
                                   config=None if args.epsilon_start is None else LearnerConfig(
                                       epsilon_start=args.epsilon_start))
            result = train(kernels, out, options, on_progress=progress,
                           evaluate=measured(out, target=args.target, runner=runner),
                           on_pretrain=lambda line: print(line, file=sys.stderr, flush=True))
    except (ValueError, FileExistsError, RunnerError) as error:
        raise CommandError(f"dojo agent train: error: {error}") from None
    except KeyboardInterrupt:
        print(f"dojo agent train: interrupted; {out} holds every finished episode (--resume continues)",
              file=sys.stderr)
        return 130
    print(f"trained {result.episodes} episodes on {', '.join(name for name, _ in kernels)}; checkpoint, curve.jsonl "
          f"and curve.png in {out}")
    return 0


def _logs(paths: list[str]) -> list[Path]:
    """The files of `paths`, a directory standing for every *.jsonl under it, in a stable order."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if not path.exists():
            raise CommandError(f"dojo agent train: error: {name}: no such file or directory")
        found += sorted([*path.rglob("*.jsonl"), *path.rglob("*.jsonl.gz")]) if path.is_dir() else [path]
    return found


def cmd_agent_continue(args: argparse.Namespace) -> int:
    from agent.evaluate import Evaluator
    from agent.learned import continue_agent
    from agent.perfllm.play import Step
    from runner.client import RunnerError

    program = load_file(args.file)
    spec, prefix, spec_file = start(program, args.file)
    out = Path(args.file) if args.write else Path(args.out) if args.out else None
    not_the_spec(out, spec_file, "agent continue")

    def step(s: Step) -> None:
        time_s = "failed" if s.time_s is None else format_time(s.time_s)
        print(f"{s.index}: {s.move or 'stop'} -> {time_s}", file=sys.stderr, flush=True)

    try:
        with runner_for(args) as runner:
            evaluator = Evaluator(spec, prefix=prefix, runner=runner, target=args.target)
            result = continue_agent(evaluator.start, args.steps, evaluator,
                                    checkpoint=Path(args.checkpoint) if args.checkpoint else None,
                                    target=args.target, prefix=prefix, on_step=step)
    except (ValueError, FileNotFoundError, RunnerError) as error:
        raise CommandError(f"dojo agent continue: error: {error}") from None
    if not result.moves:  # the file itself was the best program met: nothing to rewrite
        best, out = program, (None if args.write else out)
    else:
        best = record(without_comments(result.program), prefix + result.moves,
                      os.path.relpath(spec_file, (out or Path(args.file)).resolve().parent))
    if out is not None:
        write_atomically(out, to_text(best).encode())
    if args.json:
        print(json.dumps({"out": None if out is None else str(out), **result.to_json()}))
    else:
        speedup = "" if result.speedup is None else f", {result.speedup:.2f}x"
        where = f"; wrote {out}" if out is not None else f"; {args.file} unchanged" if args.write else ""
        # like `dojo apply`: standard output carries the program alone, so that it can be redirected to a file
        print(f"{program.name}: agent: {len(result.steps)} steps ({result.ended}), best {len(result.moves)} moves, "
              f"{format_time(result.start_s)} -> {format_time(result.time_s)}{speedup}{where}", file=sys.stderr)
        if out is None and not args.write:
            sys.stdout.write(to_text(best))
    return 0
