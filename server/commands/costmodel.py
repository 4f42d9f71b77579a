"""`dojo costmodel train`, `dojo costmodel moves` and `dojo costmodel kernels`: the learned cost model
that ranks programs without running them (agent/costmodel), trained from evaluation logs; its ratings
of a file's moves, as the editor's quick-fixes show them; and random kernels of the ONNX catalogue
for searches to log, so that it learns from more than the library's kernels."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .shared import CommandError, load_file


def add_to(commands: argparse._SubParsersAction) -> None:
    costmodel = commands.add_parser("costmodel", help="the learned cost model: train it on evaluation logs, "
                                    "or rate a file's moves with it")
    costmodel_commands = costmodel.add_subparsers(dest="costmodel_command", required=True, metavar="COMMAND")
    train = costmodel_commands.add_parser("train", help="train a cost model on the logs of searches, "
                                          "`dojo library build`, `dojo model tune` and `dojo agent`")
    train.add_argument("--logs", nargs="+", required=True, metavar="LOG",
                       help="evaluation logs (a directory: every *.jsonl and *.jsonl.gz under it)")
    train.add_argument("--out", "-o", required=True, metavar="FILE", help="the model file to write (.npz)")
    train.add_argument("--hold-out", nargs="*", default=[], metavar="K", help="library kernels never to train on, at "
                       "any of the library's shapes (those a held-out benchmark measures)")
    train.add_argument("--steps", type=int, default=1500, metavar="N", help="gradient steps (default: 1500)")
    train.add_argument("--seed", type=int, default=0, metavar="S")
    train.set_defaults(run=cmd_costmodel_train)

    moves = costmodel_commands.add_parser("moves", help="every legal move of FILE with the cost model's "
                                          "predicted speed-up, best first")
    moves.add_argument("file", metavar="FILE")
    moves.add_argument("--model", metavar="FILE", help="a model `dojo costmodel train` wrote (default: the "
                       "one shipped with PerfDojo)")
    moves.add_argument("--target", default="native", metavar="T", help="the target (default: native)")
    moves.add_argument("--json", action="store_true", help="a JSON list of {move, speedup}")
    moves.set_defaults(run=cmd_costmodel_moves)

    kernels = costmodel_commands.add_parser("kernels", help="write random kernels of the ONNX catalogue, from "
                                            "L1-resident to DRAM-bound, for searches whose logs train the model")
    kernels.add_argument("--count", type=int, default=24, metavar="N", help="how many kernels (default: 24)")
    kernels.add_argument("--seed", type=int, default=0, metavar="S", help="the same seed, the same kernels")
    kernels.add_argument("--out", "-o", required=True, metavar="DIR", help="where DIR/NAME.dojo go")
    kernels.set_defaults(run=cmd_costmodel_kernels)


def _host(target: str):
    from agent.costmodel.features import Host
    from codegen.targets import get_target
    from runner.roofline import measured_machine

    try:
        return Host.of(measured_machine(), get_target(target))
    except ValueError as error:
        raise CommandError(f"dojo costmodel: error: {error}") from None


def cmd_costmodel_train(args: argparse.Namespace) -> int:
    # imported here: torch is slow to load
    from agent.costmodel.data import log_paths, read_groups
    from agent.costmodel.model import CostModel, Training
    from agent.evaluate import text_hash
    from dojo_ir import load
    from dojo_ir.library import KERNELS

    paths = [Path(p) for p in args.logs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise CommandError(f"dojo costmodel train: error: no such log or directory: {', '.join(missing)}")
    unknown = [k for k in args.hold_out if k not in KERNELS]
    if unknown:
        raise CommandError(f"dojo costmodel train: error: unknown kernel {', '.join(unknown)}; "
                           f"the library has {', '.join(KERNELS)}")
    held = {text_hash(load(shaped(KERNELS[k]))) for k in args.hold_out for shaped in (
        lambda kernel: kernel.text(), lambda kernel: kernel.quick(), lambda kernel: kernel.small())}
    started = time.monotonic()
    groups = [g for g in read_groups(paths, _host("native")) if g.spec_hash not in held]
    if not groups:
        raise CommandError(f"dojo costmodel train: error: none of the {len(log_paths(paths))} logs has two "
                           "programs that ran and can be rebuilt from their spec")
    read_s = time.monotonic() - started
    model = CostModel.train(groups, Training(steps=args.steps, seed=args.seed))
    model.save(Path(args.out))
    print(f"{args.out}: trained on {sum(len(g) for g in groups)} programs in {len(groups)} logs of "
          f"{len({g.spec_hash for g in groups})} specs (read in {read_s:.0f} s, trained in "
          f"{time.monotonic() - started - read_s:.0f} s)", file=sys.stderr)
    return 0


def cmd_costmodel_moves(args: argparse.Namespace) -> int:
    from agent.costmodel.model import SHIPPED, CostModel, CostModelError
    from agent.costmodel.rank import rate_moves
    from agent.legal import legal_moves

    program = load_file(args.file)
    try:
        model = CostModel.load(Path(args.model) if args.model else SHIPPED)
    except CostModelError as error:
        raise CommandError(f"dojo costmodel moves: error: {error}") from None
    host = _host(args.target)
    rated = sorted(rate_moves(model, host, program, legal_moves(program, args.target)).items(),
                   key=lambda item: -item[1])
    if args.json:
        print(json.dumps([{"move": move, "speedup": round(speedup, 4)} for move, speedup in rated]))
    else:
        for move, speedup in rated:
            print(f"×{speedup:5.2f}  {move}")
    return 0


def cmd_costmodel_kernels(args: argparse.Namespace) -> int:
    from libgen.onnx.random_kernels import random_kernels
    from runner.files import write_atomically

    if args.count < 1:
        raise CommandError(f"dojo costmodel kernels: error: --count must be at least 1, not {args.count}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for kernel in random_kernels(args.count, args.seed):
        write_atomically(out / f"{kernel.name}.dojo", kernel.text.encode())
        print(f"{out / kernel.name}.dojo  {kernel.draw.describe()}")
    return 0
