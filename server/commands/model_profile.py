"""`dojo model profile`: where a model's time goes when it runs on its library
(libgen/onnx/profile.py, docs/model.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from runner.files import read_arrays

from .shared import CommandError, add_model_import_options, input_shapes


def add_profile_parser(model_commands: argparse._SubParsersAction) -> None:
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
    add_model_import_options(profile)
    profile.add_argument("--against-onnxruntime", action="store_true", help="also run the model on ONNX Runtime "
                         "alone, in turn with the library, and give its time for each row's nodes")
    profile.add_argument("--warm", action="store_true", help="also time each kernel with its data in cache (each "
                         "call right after one of its own, in runs of their own): its time in the model over that "
                         "is what the model around it costs")
    profile.add_argument("--json", action="store_true", help="the profile as JSON")
    profile.set_defaults(run=cmd_model_profile)


def read_feeds(path: str, command: str) -> dict[str, np.ndarray]:
    """The arrays of the `.npz` file at `path`, or a CommandError of `dojo model COMMAND` naming it."""
    try:
        return read_arrays(Path(path))
    except FileNotFoundError:
        raise CommandError(f"dojo model {command}: error: {path}: no such file") from None
    except ValueError as error:
        raise CommandError(f"dojo model {command}: error: {path}: {error}") from None


def cmd_model_profile(args: argparse.Namespace) -> int:
    # imported here: onnx and ONNX Runtime load only for this command
    from libgen.onnx.profile import bind_openmp_threads, format_profile, profile_model, random_feeds
    from libgen.onnx.reference import onnxruntime_reference, profiled_session, run_in_turn
    from libgen.onnx.run import ModelRunner, RunError
    from libgen.onnx.shapes import ShapeError

    bind_openmp_threads()

    if args.repeats < 1:
        raise CommandError(f"dojo model profile: error: --repeats must be at least 1, not {args.repeats}")
    feeds = read_feeds(args.inputs, "profile") if args.inputs else None
    try:
        runner = ModelRunner(args.model, args.library, fuse=args.fuse, input_shapes=input_shapes(args, "model profile"))
        feeds = feeds if feeds is not None else random_feeds(runner.inputs, args.seed)
        session = profiled_session(runner) if args.against_onnxruntime else None
        report = profile_model(runner, feeds, args.repeats,
                               beside=None if session is None else run_in_turn(session, feeds), warm=args.warm)
        reference = None if session is None else onnxruntime_reference(report, runner, session, args.repeats)
    except (RunError, ShapeError) as error:
        raise CommandError(f"dojo model profile: error: {error}") from None
    if args.json:
        print(json.dumps({**report.to_json(), **({} if reference is None else
                                                   {"onnxruntime_alone": reference.to_json()})}))
    else:
        print(format_profile(report, reference))
    return 0
