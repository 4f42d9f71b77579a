"""`dojo import`: an ONNX model as `.dojo` specs and a map of its nodes (docs/onnx.md).

    dojo import encoder.onnx --out encoder/      # encoder/*.dojo, encoder/model.json
    dojo import --coverage                       # which ONNX operators the catalogue covers

Nodes without a kernel are listed on stderr as `MODEL: node NAME (OP): FEATURE: detail`; the rest
is written all the same, and only --strict makes them an error (exit 1, after writing).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .shared import CommandError, add_input_shape_option, input_shapes


def add_to(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("import", help="turn an ONNX model into one .dojo spec per node and model.json",
                                 description="Write one .dojo spec per node of MODEL whose operator the format "
                                 "can express, at the node's static shapes, and DIR/model.json mapping each node to "
                                 "its kernel. Nodes it cannot express are listed on stderr with the reason.")
    parser.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the ONNX model")
    parser.add_argument("--out", "-o", metavar="DIR", help="where the .dojo files and model.json go")
    parser.add_argument("--fuse", action="store_true", help="join elementwise chains, and reductions with the "
                        "elementwise nodes around them, into one kernel each")
    add_input_shape_option(parser)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a node has no kernel (after writing the "
                        "others)")
    parser.add_argument("--coverage", action="store_true", help="print which operators of the default ONNX domain "
                        "the catalogue covers, and why the others are not expressible")
    parser.add_argument("--json", action="store_true", help="the summary as JSON")
    parser.set_defaults(run=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    if args.coverage:
        if args.model or args.out:
            raise CommandError("dojo import: error: --coverage takes no model and no --out")
        return _print_coverage(args.json)
    if not args.model or not args.out:
        raise CommandError("dojo import: error: name a model and --out DIR (or ask for --coverage)")
    # imported here: onnx loads only for this command
    from libgen.onnx.importer import ModelError, import_model, write_import
    from libgen.onnx.shapes import ShapeError

    out = Path(args.out)
    try:
        imported = import_model(args.model, fuse=args.fuse, input_shapes=input_shapes(args, "import"))
    except ShapeError as error:
        raise CommandError(f"dojo import: error: {error}") from None
    except ModelError as error:
        raise CommandError(str(error)) from None
    try:
        write_import(imported, out)
    except OSError as error:
        raise CommandError(f"{out}: error: cannot write the import: {error}") from None
    for s in imported.skipped:
        print(f"{imported.model}: node {s.node} ({s.op}): {s.feature}: {s.detail}", file=sys.stderr)
    nodes = len(imported.nodes)
    if args.json:
        print(json.dumps({"out": str(out), "model": imported.model, "kernels": sorted(imported.kernels),
                          "calls": len(imported.calls), "nodes": nodes, "constants": list(imported.constants),
                          "skipped": [vars(s) for s in imported.skipped]}))
    else:
        covered = sum(len(c.nodes) for c in imported.calls)
        inside = sum(1 for record in imported.nodes if record.get("computed_in"))
        derived = f", derived weights in {out / 'constants.npz'}" if imported.constants else ""
        selects = f", {inside} computed inside the kernels that read them" if inside else ""
        print(f"{out}: {len(imported.kernels)} kernels for {covered} of {nodes} nodes of {imported.model} "
              f"({len(imported.skipped)} without a kernel, left to ONNX Runtime; "
              f"{nodes - covered - len(imported.skipped) - inside} folded at import{selects}); "
              f"map in {out / 'model.json'}{derived}")
    return 1 if args.strict and imported.skipped else 0


def _print_coverage(as_json: bool) -> int:
    from libgen.onnx.catalogue import coverage

    report = coverage()
    if as_json:
        print(json.dumps({"covered": list(report.covered), "folded": list(report.folded),
                          "not_written": list(report.not_written),
                          "not_expressible": [{"operator": op, "feature": feature, "why": why}
                                              for op, feature, why in report.not_expressible],
                          "deprecated": list(report.deprecated), "total": report.total,
                          "expressible": report.expressible, "percent": round(report.percent, 1)}))
        return 0
    lines = {op: "covered (folded at import)" if op in report.folded else "covered" for op in report.covered}
    lines |= {op: "not written" for op in report.not_written}
    lines |= {op: f"not expressible: {feature}: {why}" for op, feature, why in report.not_expressible}
    width = max(map(len, lines))
    for op in sorted(lines):
        print(f"{op:<{width}}  {lines[op]}")
    print(report.summary())
    return 0
