"""`dojo model run`: run an ONNX model on a tuned library, ONNX Runtime doing the nodes it lacks
(libgen/onnx/run.py); `dojo model profile` and `dojo model tune` are in modules of their own."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from runner.files import write_arrays

from .model_profile import add_profile_parser, read_feeds
from .model_tune import add_tune_parser
from .shared import CommandError, add_model_import_options, input_shapes


def add_to(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="run an ONNX model on a tuned library")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    run_ = model_commands.add_parser("run", help="run the model: each node on the library's kernel when the library "
                                     "holds it, built from the same spec, and on ONNX Runtime otherwise")
    run_.add_argument("model", metavar="MODEL.onnx", help="the model")
    run_.add_argument("--library", required=True, metavar="LIBDIR", help="a library `dojo library build` wrote from "
                      "the files `dojo import` made of this model. A library is code: loading it runs its shared "
                      "library, so give only one you built or trust (docs/library.md)")
    run_.add_argument("--inputs", required=True, metavar="IN.npz", help="the model's inputs, by name (numpy.savez)")
    run_.add_argument("--out", "-o", required=True, metavar="OUT.npz", help="where to write the model's outputs")
    add_model_import_options(run_)
    run_.add_argument("--json", action="store_true", help="where each node ran, as JSON")
    run_.set_defaults(run=cmd_model_run)
    add_profile_parser(model_commands)
    add_tune_parser(model_commands)


def cmd_model_run(args: argparse.Namespace) -> int:
    # imported here: onnx and ONNX Runtime load only for this command
    from libgen.onnx.run import ModelRunner, RunError
    from libgen.onnx.shapes import ShapeError

    feeds = read_feeds(args.inputs, "run")
    try:
        runner = ModelRunner(args.model, args.library, fuse=args.fuse, input_shapes=input_shapes(args, "model run"))
        outputs = runner.run(feeds)
    except (RunError, ShapeError) as error:
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
