"""`dojo moves`, `apply`, `replay`, `fuzz`: the legal moves of a program, playing them, and proving
that a derived file is what its moves make of its spec."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from dojo_ir import DojoError, Program, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.derivation import record, spec_path, verify
from dojo_ir.errors import LIMITS
from dojo_ir.fuzz import fuzz
from dojo_ir.library import KERNELS
from dojo_ir.moves import KINDS, Move, apply, find, move_lines, parse_move
from runner.files import write_atomically

from .shared import CommandError, load_file, reporting


def add_to(commands: argparse._SubParsersAction) -> None:
    moves = commands.add_parser("moves", help="list every legal move in a file")
    moves.add_argument("file", metavar="FILE")
    moves.add_argument("--line", type=int, metavar="L", help="only moves whose node covers line L")
    moves.add_argument("--json", action="store_true", help="a JSON list of {move, name, title, line, end_line}")
    moves.set_defaults(run=cmd_moves)

    apply_ = commands.add_parser("apply", help="apply moves and print (or write) the new canonical text")
    apply_.add_argument("file", metavar="FILE")
    apply_.add_argument("moves", nargs="+", metavar="MOVE", help="e.g. 'join_scopes(op=e, depth=0)'")
    where = apply_.add_mutually_exclusive_group()
    where.add_argument("--write", action="store_true", help="rewrite FILE in place")
    where.add_argument("--out", "-o", metavar="OUT", help="write the result to OUT")
    apply_.add_argument("--record", action="store_true", help="keep the moves in the file's derivation")
    apply_.set_defaults(run=cmd_apply)

    replay_ = commands.add_parser("replay", help="re-derive files from their spec and check they match")
    replay_.add_argument("files", nargs="+", metavar="FILE")
    replay_.set_defaults(run=cmd_replay)

    fuzz_ = commands.add_parser("fuzz", help="random walks of legal moves, each result checked against the spec")
    fuzz_.add_argument("kernels", nargs="*", metavar="KERNEL", help="library kernels (default: all)")
    fuzz_.add_argument("--walks", type=int, default=16)
    fuzz_.add_argument("--steps", type=int, default=20)
    fuzz_.add_argument("--seed", type=int, default=0)
    fuzz_.add_argument("--json", action="store_true")
    fuzz_.set_defaults(run=cmd_fuzz)


def _moves_json(moves: list[Move], analysis: Analysis) -> list[dict]:
    rows = []
    for move in moves:
        lines = move_lines(analysis, move)
        rows.append({"move": str(move), "name": move.name, "title": KINDS[move.name].TITLE,
                     "line": lines[0] if lines else None, "end_line": lines[1] if lines else None})
    return rows


def cmd_moves(args: argparse.Namespace) -> int:
    program = load_file(args.file)
    with reporting(args.file, program.span):
        analysis = Analysis(program)
        rows = _moves_json(find(program, analysis), analysis)
    if args.line is not None:
        rows = [r for r in rows if r["line"] is not None and r["line"] <= args.line <= r["end_line"]]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{r['line']:>4}  {r['move']:<48}  {r['title']}")
        print(f"{len(rows)} legal move{'s' * (len(rows) != 1)}", file=sys.stderr)
    return 0


def _applied(program: Program, path: str, moves: list[str]) -> Program:
    """`program` after `moves`; the error names the first move that does not apply (its position is
    on the command line, not in the file)."""
    for k, text in enumerate(moves, start=1):
        try:
            program = apply(program, parse_move(text))
        except DojoError as error:
            raise CommandError(f"{path}: error: move {k} {error.diagnostics[0].message}") from None
        except LIMITS as error:
            raise CommandError(f"{path}: error: move {k} `{text}`: {error or type(error).__name__}") from None
    return program


def cmd_apply(args: argparse.Namespace) -> int:
    program = load_file(args.file)
    moved = _applied(program, args.file, args.moves)
    target = Path(args.out) if args.out else Path(args.file) if args.write else None
    if args.record:
        if program.derivation is None and target is not None and target.resolve() == Path(args.file).resolve():
            raise CommandError(f"{args.file}: error: --record needs a spec: this file has no derivation, so it "
                               "is the spec; write the result to another file with --out")
        spec = None
        if program.derivation is None:
            base = target.resolve().parent if target is not None else Path.cwd()
            spec = os.path.relpath(Path(args.file).resolve(), base)
        elif target is not None:
            moved = replace(moved, derivation=replace(program.derivation, spec=os.path.relpath(
                spec_path(program, Path(args.file)), target.resolve().parent)))
        moved = record(moved, args.moves, spec)
    text = to_text(moved)
    if target is None:
        sys.stdout.write(text)
    else:
        write_atomically(target, text.encode())
        print(f"applied {len(args.moves)} move{'s' * (len(args.moves) != 1)}; wrote {target}", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    failed = 0
    for file in args.files:
        program = load_file(file)
        if program.derivation is None:
            print(f"{file}: error: no derivation to replay (no `spec` line after the kernel line)", file=sys.stderr)
            failed += 1
            continue
        spec_file = spec_path(program, Path(file))
        spec = load_file(str(spec_file))
        with reporting(file, program.span):
            diagnostics = verify(program, spec)
        for d in diagnostics:
            print(d.format(file))
        if diagnostics:
            failed += 1
        else:
            count = len(program.derivation.moves)
            print(f"{file}: {count} move{'s' * (count != 1)} from {program.derivation.spec} replay exactly",
                  file=sys.stderr)
    return 1 if failed else 0


def cmd_fuzz(args: argparse.Namespace) -> int:
    names = args.kernels or list(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        raise CommandError(f"dojo fuzz: error: no kernel {', '.join(unknown)}; expected names from `dojo kernels`")
    started = time.perf_counter()

    def progress(done: int, total: int, moves: int) -> None:
        print(f"\r{done}/{total} walks, {moves} moves", end="", file=sys.stderr, flush=True)

    report = fuzz(names, args.walks, args.steps, args.seed, progress=progress if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    for failure in report.failures:
        print(f"FAIL {failure.kernel}: {failure.problem}")
        print(f"  reproduce: dojo kernels {failure.kernel} --shape {failure.shape} -o k.dojo && "
              f"dojo apply k.dojo {' '.join(repr(m) for m in failure.moves)}")
    summary = {"walks": report.walks, "moves": report.moves, "failures": len(report.failures),
               "seconds": round(time.perf_counter() - started, 2), "seed": args.seed}
    print(json.dumps(summary) if args.json else
          f"{report.walks} walks, {report.moves} moves, {len(report.failures)} changes of meaning "
          f"in {summary['seconds']} s (seed {args.seed})")
    return 1 if report.failures else 0
