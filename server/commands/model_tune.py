"""`dojo model tune`: import a model, build its library with the heuristic pass, then spend a budget
on its kernels by their share of the model's time (libgen/onnx/model_tune.py, docs/model.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.methods import AUTO, GRAPH, GRAPHS, METHODS

from .shared import CommandError, add_input_shape_option, input_shapes
from .tune import AGENT_CHECKPOINT_HELP, GRAPH_HELP

BAR = 24


def add_tune_parser(model_commands: argparse._SubParsersAction) -> None:
    tune = model_commands.add_parser("tune", help="import the model, build its library with the heuristic pass, "
                                     "then tune its kernels by their share of the model's time")
    tune.add_argument("model", metavar="MODEL.onnx", help="the model")
    tune.add_argument("--out", "-o", required=True, metavar="DIR", help="the library's directory (the import in "
                      "DIR/import, the state in DIR/tune.json, the summary in DIR/tune.txt)")
    tune.add_argument("--budget", type=int, metavar="N", help="evaluations of the searches, over all the kernels "
                      "(default: 20 per kernel, unless --time-limit is given)")
    tune.add_argument("--time-limit", type=float, metavar="S", help="stop starting rounds S seconds after the start")
    tune.add_argument("--method", default=AUTO, choices=(AUTO, *METHODS),
                      help="how each kernel is searched (default: auto, the faster on each kernel of sa and the "
                      "agent continuing the heuristic pass's program)")
    tune.add_argument("--graph", default=GRAPH, choices=GRAPHS, help=GRAPH_HELP)
    tune.add_argument("--seed", type=int, default=0, metavar="S")
    tune.add_argument("--checkpoint", metavar="PATH", help=AGENT_CHECKPOINT_HELP)
    tune.add_argument("--fuse", action="store_true", help="the model as `dojo import --fuse` imports it")
    add_input_shape_option(tune)
    tune.add_argument("--round", type=int, default=8, metavar="N", help="evaluations a kernel gets at a time "
                      "(default: 8)")
    tune.add_argument("--repeats", type=int, default=20, metavar="N", help="runs of each profile (default: 20)")
    tune.add_argument("--min-time", type=float, default=0.2, metavar="S", help="the final measurement of each "
                      "round's best programs: at least S s each (default: 0.2)")
    tune.add_argument("--name", default="dojo", metavar="NAME", help="libNAME.so, NAME.h and NAME.py (default: dojo)")
    tune.add_argument("--target", default="native", metavar="T", help="a C target (default: native)")
    tune.add_argument("--ray", metavar="auto|local|ADDRESS", help="tune on a Ray cluster, one round per free slot "
                      "at once: a running one (auto starts one here when there is none), a new local one, or the "
                      "one at ADDRESS")
    tune.add_argument("--ray-cores", type=int, default=1, metavar="C", help="CPUs of a node for each evaluation "
                      "(default: 1)")
    tune.add_argument("--resume", action="store_true", help="go on with the tune in DIR, where it stopped")
    tune.add_argument("--json", action="store_true", help="the summary as JSON")
    tune.set_defaults(run=cmd_model_tune)


def _progress(tty: bool):
    from libgen.onnx.model_tune import TuneEvent

    def show(event: TuneEvent) -> None:
        if event.kind != "progress":
            print(f"\r{event.message:<100}" if tty else event.message, file=sys.stderr, flush=True)
            return
        if not tty:
            return
        if event.budget:
            done = event.spent / event.budget
            count = f"{event.spent}/{event.budget}"
        else:
            done = min(1.0, event.elapsed_s / event.time_limit_s) if event.time_limit_s else 0.0
            count = f"{event.elapsed_s:.0f}/{event.time_limit_s:.0f} s" if event.time_limit_s else ""
        filled = int(done * BAR)
        line = f"[{'#' * filled}{'.' * (BAR - filled)}] {count} {event.message}"
        print(f"\r{line[:100]:<100}", end="", file=sys.stderr, flush=True)

    return show


def cmd_model_tune(args: argparse.Namespace) -> int:
    # imported here: the tuner, onnx and ONNX Runtime load only for this command, Ray only with --ray
    from libgen.kernels import LibraryError
    from libgen.onnx.model_tune import TuneError, TuneOptions, tune_model
    from runner.client import RunnerError

    out = Path(args.out)
    options = TuneOptions(method=args.method, graph=args.graph, seed=args.seed, fuse=args.fuse,
                          round_size=args.round, target=args.target, name=args.name, repeats=args.repeats,
                          min_time_s=args.min_time, checkpoint=args.checkpoint and Path(args.checkpoint),
                          input_shapes=tuple(input_shapes(args, "model tune").items()))
    settings = {"budget": args.budget, "time_limit_s": args.time_limit, "options": options, "resume": args.resume,
                "on_event": _progress(sys.stderr.isatty())}
    try:
        if args.ray:
            from libgen.cluster import Cluster

            with Cluster(args.ray, cores=args.ray_cores) as cluster:
                result = tune_model(Path(args.model), out, cluster=cluster, **settings)
        else:
            result = tune_model(Path(args.model), out, **settings)
    except (TuneError, LibraryError) as error:
        message = str(error)
        raise CommandError(message if ": error: " in message else f"dojo model tune: error: {message}") from None
    except (RunnerError, ValueError) as error:
        raise CommandError(f"dojo model tune: error: {error}") from None
    except KeyboardInterrupt:
        print(f"\ndojo model tune: interrupted; every finished round is in {out / 'tune.json'} and every "
              f"evaluation in {out / 'logs'}: the same command with --resume goes on from there", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({"out": str(out), "before_s": result.before.total_s, "after_s": result.after.total_s,
                          "speedup": result.speedup, "spent": result.spent, "budget": result.budget,
                          "elapsed_s": result.elapsed_s,
                          "kernels": [{"kernel": t.kernel, "evaluations": t.evaluations, "rounds": t.rounds,
                                       "best_s": t.best_s, "heuristic_s": t.history[0],
                                       "program": dict(result.programs).get(t.kernel)} for t in result.tasks],
                          "reverted": list(result.reverted)}))
    else:
        print(result.summary)
    return 0
