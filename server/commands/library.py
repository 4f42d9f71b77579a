"""`dojo library build`: tune kernels into a library for C, numpy and PyTorch (docs/library.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runner.measure import MIN_TIME_S

from .shared import CommandError, add_runner_options, runner_for
from .tune import AGENT_CHECKPOINT_HELP, add_method_options


def add_to(commands: argparse._SubParsersAction) -> None:
    library = commands.add_parser("library", help="tune kernels into a library for C, numpy and PyTorch")
    library_commands = library.add_subparsers(dest="library_command", required=True, metavar="COMMAND")
    build_ = library_commands.add_parser("build", help="tune each kernel (skipping those already tuned in DIR), "
                                         "then write the library, its header, Python module and manifest")
    build_.add_argument("kernels", nargs="+", metavar="KERNEL",
                        help="library kernels, .dojo files or directories of them")
    add_method_options(build_)
    build_.add_argument("--budget", type=int, default=100, metavar="N", help="evaluations per kernel (default: 100)")
    build_.add_argument("--out", "-o", required=True, metavar="DIR", help="the library's directory")
    build_.add_argument("--name", default="dojo", metavar="NAME", help="libNAME.so, NAME.h, NAME.py, the C "
                        "functions' prefix and the torch.ops namespace (default: dojo)")
    build_.add_argument("--shape", nargs="*", default=[], metavar="[KERNEL.]PARAM=SIZE",
                        help="sizes for the library kernels instead of the paper's")
    base = build_.add_mutually_exclusive_group()
    base.add_argument("--quick", action="store_true", help="the library kernels at their quick shapes (specs of "
                      "tens to hundreds of microseconds)")
    base.add_argument("--small", action="store_true", help="the library kernels at the small shapes of the tests")
    build_.add_argument("--time-limit", type=float, metavar="S", help="stop each kernel's search after S seconds")
    build_.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                        help=f"time the finalists of each kernel for at least S seconds (default: {MIN_TIME_S:g})")
    build_.add_argument("--checkpoint", metavar="PATH", help=AGENT_CHECKPOINT_HELP)
    build_.add_argument("--peers", nargs="*", metavar="PEER", help="also time the peers (libgen/peers) on each "
                        "library kernel (default: numpy torch torch.compile onnxruntime)")
    build_.add_argument("--ray", metavar="auto|local|ADDRESS", help="tune on a Ray cluster: a running one (auto "
                        "starts one on this machine when there is none), a new local one, or the one at ADDRESS")
    build_.add_argument("--ray-cores", type=int, default=1, metavar="C", help="CPUs of a node for each evaluation "
                        "(default: 1)")
    build_.add_argument("--workers", type=int, metavar="N", help="tune at most N kernels at once on the cluster "
                        "(default: as many as it has room for)")
    build_.add_argument("--json", action="store_true", help="the result summary as JSON")
    add_runner_options(build_, target="a C target")
    build_.set_defaults(run=cmd_library_build)


def cmd_library_build(args: argparse.Namespace) -> int:
    # imported here: the other commands start without the tuner, and Ray loads only with --ray
    from libgen import BuildEvent, BuildOptions, KernelTuneOptions, LibraryError, build_library, resolve
    from libgen.peers import DEFAULT as DEFAULT_PEERS
    from runner.client import RunnerError

    out = Path(args.out)
    tty = sys.stderr.isatty()
    if args.ray and args.runner:
        raise CommandError("dojo library build: error: --ray and --runner exclude each other: the cluster's nodes "
                           "run the evaluations")

    def event(e: BuildEvent) -> None:
        if e.kind == "progress":
            if tty:
                print(f"\r{e.message:<70}", end="", file=sys.stderr, flush=True)
            return
        print(f"\r{e.message:<70}" if tty else e.message, file=sys.stderr, flush=True)

    try:
        tuning = KernelTuneOptions(args.method, args.budget, graph=args.graph, target=args.target, seed=args.seed,
                                   time_limit_s=args.time_limit, final_min_time_s=args.min_time,
                                   checkpoint=args.checkpoint and Path(args.checkpoint))
        options = BuildOptions(tuning, name=args.name, workers=args.workers,
                               peers=(args.peers or DEFAULT_PEERS) if args.peers is not None else ())
        kernels = resolve(args.kernels, args.shape, "small" if args.small else "quick" if args.quick else "paper")
        if args.ray:
            from libgen.cluster import Cluster

            with Cluster(args.ray, cores=args.ray_cores) as cluster:
                result = build_library(kernels, out, options, cluster=cluster, on_event=event)
        else:
            with runner_for(args) as runner:
                result = build_library(kernels, out, options, runner=runner, on_event=event)
    except LibraryError as error:
        message = str(error)
        raise CommandError(message if ": error: " in message else f"dojo library build: error: {message}") from None
    except (RunnerError, ValueError) as error:
        raise CommandError(f"dojo library build: error: {error}") from None
    except KeyboardInterrupt:
        print(f"\ndojo library build: interrupted; the kernels tuned so far are recorded in {out / 'kernels'} and "
              f"every evaluation in {out / 'logs'}: the same command goes on from there", file=sys.stderr)
        return 130
    manifest = result.manifest
    if args.json:
        print(json.dumps({"out": str(out), "tuned": list(result.tuned), "skipped": list(result.skipped),
                          **{k: manifest[k] for k in ("library", "shared_library", "header", "module")},
                          "kernels": [{k: e[k] for k in ("name", "symbol", "time_s", "spec_s", "evaluations", "peers")}
                                      for e in manifest["kernels"]]}))
    else:
        print(f"{out}: {len(manifest['kernels'])} kernels ({len(result.tuned)} tuned, {len(result.skipped)} already "
              f"tuned) in {manifest['shared_library']}, {manifest['header']}, {manifest['module']}")
    return 0
