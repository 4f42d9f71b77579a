"""`dojo model run`: run an ONNX model on a tuned library, ONNX Runtime doing the nodes it lacks
(libgen/onnx/run.py); `dojo model profile`: where its time goes (libgen/onnx/profile.py); `dojo
model tune`: its library, the budget spent where the time goes (libgen/onnx/model_tune.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from runner.files import read_arrays, write_arrays

from .model_tune import add_tune_parser
from .shared import CommandError


def add_to(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="run an ONNX model on a tuned library")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    run_ = model_commands.add_parser("run", help="run the model: each node on the library's kernel when the library "
                                     "holds it, built from the same spec, and on ONNX Runtime otherwise")
    run_.add_argument("model", metavar="MODEL.onnx", help="the model")
    run_.add_argument("--library", required=True, metavar="LIBDIR", help="a library `dojo library build` wrote from "
                      "the files `dojo import` made of this model")
    run_.add_argument("--inputs", required=True, metavar="IN.npz", help="the model's inputs, by name (numpy.savez)")
    run_.add_argument("--out", "-o", required=True, metavar="OUT.npz", help="where to write the model's outputs")
    add_fuse_options(run_)
    run_.add_argument("--json", action="store_true", help="where each node ran, as JSON")
    run_.set_defaults(run=cmd_model_run)

    profile = model_commands.add_parser("profile", help="run the model on its library and say where the time goes: "
                                        "each kernel's time, share, GFLOP/s and roofline fraction, and ONNX "
                                        "Runtime's parts")
    profile.add_argument("model", metavar="MODEL.onnx", help="the model")
    profile.add_argument("--library", required=True, metavar="LIBDIR", help="its library (as for `dojo model run`)")
    feeds = profile.add_mutually_exclusive_group()
    feeds.add_argument("--inputs", metavar="IN.npz", help="the model's inputs, by name (default: random ones)")
    feeds.add_argument("--seed", type=int, default=0, metavar="S", help="random inputs of seed S: floats from a "
                       "standard normal, integers and booleans 0 or 1 (default: 0)")
    profile.add_argument("--repeats", type=int, default=20, metavar="N", help="timed runs, after one warm-up run; "
                         "each time is the median (default: 20)")
    add_fuse_options(profile)
    profile.add_argument("--json", action="store_true", help="the profile as JSON")
    profile.set_defaults(run=cmd_model_profile)
    add_tune_parser(model_commands)


def add_fuse_options(parser: argparse.ArgumentParser) -> None:
    fusing = parser.add_mutually_exclusive_group()
    fusing.add_argument("--fuse", action="store_true", default=None, help="the model as `dojo import --fuse` imports "
                        "it (default: the import, fused or not, whose kernels the library holds more of)")
    fusing.add_argument("--no-fuse", action="store_false", dest="fuse", help="the model as `dojo import` imports it")


def _feeds(path: str, command: str) -> dict:
    try:
        return read_arrays(Path(path))
    except FileNotFoundError:
        raise CommandError(f"dojo model {command}: error: {path}: no such file") from None
    except ValueError as error:
        raise CommandError(f"dojo model {command}: error: {path}: {error}") from None


def cmd_model_profile(args: argparse.Namespace) -> int:
    from libgen.onnx.profile import format_profile, profile_model, random_feeds
    from libgen.onnx.run import ModelRunner, RunError

    if args.repeats < 1:
        raise CommandError(f"dojo model profile: error: --repeats must be at least 1, not {args.repeats}")
    feeds = _feeds(args.inputs, "profile") if args.inputs else None
    try:
        runner = ModelRunner(args.model, args.library, fuse=args.fuse)
        report = profile_model(runner, feeds if feeds is not None else random_feeds(runner.inputs, args.seed),
                               args.repeats)
    except RunError as error:
        raise CommandError(f"dojo model profile: error: {error}") from None
    print(json.dumps(report.to_json()) if args.json else format_profile(report))
    return 0


def cmd_model_run(args: argparse.Namespace) -> int:
    # imported here: onnx and ONNX Runtime load only for this command
    from libgen.onnx.run import ModelRunner, RunError

    feeds = _feeds(args.inputs, "run")
    try:
        runner = ModelRunner(args.model, args.library, fuse=args.fuse)
        outputs = runner.run(feeds)
    except RunError as error:
        raise CommandError(f"dojo model run: error: {error}") from None
    out = Path(args.out)
    try:
        write_arrays(out, outputs)
    except (OSError, ValueError) as error:
        raise CommandError(f"dojo model run: error: {out}: cannot write: {error}") from None
    counts = Counter(runner.placement.values())
    print(f"{runner.model}: {counts['library']} nodes on the library, {counts['onnxruntime']} on ONNX Runtime, "
          f"{counts['view']} as views, {counts['constant']} constants folded, {counts['unused']} unused; "
          f"outputs in {out}", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": runner.model, "out": str(out), "placement": runner.placement,
                          "outputs": {name: {"dtype": str(a.dtype), "shape": list(a.shape)}
                                      for name, a in outputs.items()}}))
    return 0
