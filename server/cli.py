"""`dojo`: the command line.

Every subcommand reads `.dojo` files, reports bad input as
`FILE:LINE:COL: error: MESSAGE` and exits 1, and never overwrites a file it
could not fully process.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from dojo_ir import DojoError, diagnose, interpret, load, random_inputs, to_text
from dojo_ir.derivation import record, spec_path, verify, without_comments
from dojo_ir.fuzz import fuzz
from dojo_ir.library import KERNELS, Kernel
from dojo_ir.moves import KINDS, Analysis, apply, find, parse_move
from runner.files import write_atomically
from runner.measure import MIN_TIME_S, measure
from runner.result import RunResult


class CommandError(Exception):
    """A problem outside the kernel's text (a missing file, a bad option)."""


def _read(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"{path}: error: cannot read: {error}") from None


def _load(path: str):
    try:
        return load(_read(path))
    except DojoError as error:
        raise CommandError(error.format(path)) from None


def cmd_check(args: argparse.Namespace) -> int:
    errors = 0
    for path in args.files:
        try:
            _, diagnostics = diagnose(_read(path))
        except CommandError as error:
            print(error, file=sys.stderr)
            errors += 1
            continue
        for d in diagnostics:
            print(d.format(path))
        errors += len(diagnostics)
    files = len(args.files)
    print(f"checked {files} file{'s' * (files != 1)}: {errors or 'no'} error{'s' * (errors != 1)}", file=sys.stderr)
    return 1 if errors else 0


def cmd_fmt(args: argparse.Namespace) -> int:
    text = _read(args.file)
    try:
        formatted = to_text(load(text))
    except DojoError as error:
        raise CommandError(error.format(args.file)) from None
    if args.check:
        if formatted != text:
            print(f"{args.file}: not in canonical form", file=sys.stderr)
            return 1
        return 0
    if args.write and args.file != "-":
        if formatted != text:
            write_atomically(Path(args.file), formatted.encode())
        return 0
    sys.stdout.write(formatted)
    return 0


def cmd_interp(args: argparse.Namespace) -> int:
    program = _load(args.file)
    if args.inputs:
        try:
            with np.load(args.inputs) as archive:
                inputs = {name: archive[name] for name in archive.files}
        except (OSError, ValueError) as error:
            raise CommandError(f"{args.inputs}: error: cannot read inputs: {error}") from None
    try:
        if not args.inputs:
            inputs = random_inputs(program, args.seed)  # refused, like interpret, beyond its memory limit
        started = time.perf_counter()
        outputs = interpret(program, inputs)
    except DojoError as error:
        raise CommandError(error.format(args.file)) from None
    elapsed = time.perf_counter() - started
    out = Path(args.out)
    archive = io.BytesIO()
    np.savez(archive, **(outputs | ({} if args.inputs else inputs)))
    write_atomically(out, archive.getvalue())
    for name, value in outputs.items():
        print(f"{name}: {value.dtype} {list(value.shape)}", file=sys.stderr)
    print(f"interpreted {program.name} in {elapsed:.3f} s; wrote {out}", file=sys.stderr)
    return 0


def _shape(pairs: Sequence[str]) -> dict[str, int]:
    shape = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise CommandError(f"dojo kernels: error: --shape takes NAME=SIZE, not `{pair}`")
        shape[name.strip()] = int(value)
    return shape


def cmd_kernels(args: argparse.Namespace) -> int:
    if not args.name:
        width = max(len(n) for n in KERNELS)
        described = max(len(k.description) for k in KERNELS.values())
        for kernel in KERNELS.values():
            shape = " ".join(f"{k}={v}" for k, v in kernel.params.items())
            print(f"{kernel.name:<{width}}  {kernel.description:<{described}}  {shape}")
        return 0
    kernel = KERNELS.get(args.name)
    if kernel is None:
        raise CommandError(f"dojo kernels: error: no kernel `{args.name}`; expected one of {', '.join(KERNELS)}")
    try:
        text = kernel.small() if args.small else kernel.quick() if args.quick else kernel.text(**_shape(args.shape))
    except ValueError as error:
        raise CommandError(f"dojo kernels: error: {error}") from None
    if args.out:
        write_atomically(Path(args.out), text.encode())
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _moves_json(program, moves, analysis) -> list[dict]:
    rows = []
    for move in moves:
        lines = analysis.lines(move)
        rows.append({"move": str(move), "name": move.name, "title": KINDS[move.name].TITLE,
                     "line": lines[0] if lines else None, "end_line": lines[1] if lines else None})
    return rows


def cmd_moves(args: argparse.Namespace) -> int:
    program = _load(args.file)
    analysis = Analysis(program)
    rows = _moves_json(program, find(program, analysis), analysis)
    if args.line is not None:
        rows = [r for r in rows if r["line"] is not None and r["line"] <= args.line <= r["end_line"]]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{r['line']:>4}  {r['move']:<48}  {r['title']}")
        print(f"{len(rows)} legal move{'s' * (len(rows) != 1)}", file=sys.stderr)
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    program = _load(args.file)
    moved = program
    for k, text in enumerate(args.moves, start=1):
        try:
            moved = apply(moved, parse_move(text))
        except DojoError as error:
            raise CommandError(f"{args.file}: error: move {k} {error.diagnostics[0].message}") from None
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
        program = _load(file)
        if program.derivation is None:
            print(f"{file}: error: no derivation to replay (no `spec` line after the kernel line)", file=sys.stderr)
            failed += 1
            continue
        spec_file = spec_path(program, Path(file))
        diagnostics = verify(program, _load(str(spec_file)))
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


def cmd_codegen(args: argparse.Namespace) -> int:
    # imported here so that the commands that do not compile start without the backends
    from codegen import generate
    from codegen.targets import get_target

    program = _load(args.file)
    try:
        source = generate(program, get_target(args.target))
    except ValueError as error:
        raise CommandError(f"{args.file}: error: {error}") from None
    sys.stdout.write(source)
    return 0


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value * 1e9:.3g} ns"


def _summary(name: str, result: RunResult) -> str:
    where = f"{name} on {result.target}"
    if result.median_s is None:
        return f"{where}: failed: {result.error}"
    line = (f"{where}: median {_seconds(result.median_s)} (min {_seconds(result.min_s)}, max "
            f"{_seconds(result.max_s)}, {result.repeats} run{'s' * (result.repeats != 1)}), "
            f"compiled in {result.compile_s:.2f} s, ")
    error = "" if result.max_error is None else f" (max error {result.max_error:.2g})"
    line += {True: f"verified{error}", False: f"NOT verified: outputs differ from the spec's{error}",
             None: "not verified"}[result.verified]
    return line if result.error is None else f"{line}: {result.error}"


def cmd_run(args: argparse.Namespace) -> int:
    from runner.client import RunnerError  # imported here, as the build machinery is where it runs

    program = _load(args.file)
    spec = None if program.derivation is None else _load(str(spec_path(program, Path(args.file))))
    options = {"target": args.target, "repeats": args.repeats, "warmup": args.warmup, "spec": spec,
               "min_time_s": args.min_time}
    try:
        with _runner_for(args, "run") as runner:
            result = measure(runner, program, **options)
    except (RunnerError, ValueError) as error:
        raise CommandError(f"dojo run: error: {error}") from None
    # Every repetition's time is in the runner's record; one line of summary is what a script wants here.
    summary = {k: v for k, v in result.to_json().items() if k != "times"}
    print(json.dumps(summary) if args.json else _summary(program.name, result))
    return 0 if result.ok else 1


def cmd_machine(args: argparse.Namespace) -> int:
    # imported here so that the commands that do not measure start without the build machinery
    from runner.roofline import MachineError, machine_record

    try:
        record = machine_record(refresh=args.refresh)
    except MachineError as error:
        raise CommandError(f"dojo machine: error: {error}") from None
    if args.json:
        print(json.dumps(record, indent=1))
        return 0
    detail = record["detail"]
    print(f"bandwidth {record['bandwidth_Bps'] / 1e9:.1f} GB/s (read {detail['read_Bps'] / 1e9:.1f}, "
          f"triad {detail['triad_Bps'] / 1e9:.1f}), peak {record['peak_flops'] / 1e9:.0f} GFLOP/s f32 FMA, "
          f"{record['cores']} core{'s' * (record['cores'] != 1)}, {record['cpu']}")
    return 0


def _start(program, path: str) -> tuple:
    """Where a search or the agent starts from the file at `path`: its spec, the moves already
    played (a derived file's, kept as the prefix of every candidate) and the spec's file."""
    if program.derivation is None:
        return program, [], Path(path).resolve()
    spec_file = spec_path(program, Path(path))
    return _load(str(spec_file)), list(program.derivation.moves), spec_file


def _not_the_spec(out: Path | None, spec_file: Path, command: str) -> None:
    """Refuse to write a derived program over the spec its derivation names: the spec would be lost
    and the file would no longer replay."""
    if out is not None and out.resolve() == spec_file:
        raise CommandError(f"{out}: error: dojo {command}: this file is the spec of the result; write the result to "
                           "another file with --out")


def cmd_tune(args: argparse.Namespace) -> int:
    # imported here so that the commands that do not tune start without the agent
    from agent.tune import TuneProgress, tune
    from runner.client import RunnerError

    program = _load(args.file)
    out = Path(args.out)
    log = out.with_name(out.name + ".jsonl")
    if not out.resolve().parent.is_dir():
        raise CommandError(f"{out}: error: cannot write: the directory {out.parent} does not exist")
    spec, prefix, spec_file = _start(program, args.file)
    _not_the_spec(out, spec_file, "tune")
    relative = os.path.relpath(spec_file, out.resolve().parent)
    tty = sys.stderr.isatty()

    def write(moves) -> None:
        from agent.evaluate import replay_moves

        best, _ = replay_moves(spec, list(moves))
        write_atomically(out, to_text(record(best, list(moves), relative)).encode())

    def progress(p: TuneProgress) -> None:
        if p.improved:
            write(p.best_moves)
        best = "-" if p.best_s is None else _seconds(p.best_s)
        speedup = "" if p.speedup is None else f" ({p.speedup:.2f}x)"
        eta = "" if p.eta_s is None else f", eta {p.eta_s:.0f} s"
        line = f"{p.evaluations}/{p.budget} evaluations, best {best}{speedup}{eta}"
        print(f"\r{line:<70}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    options = {"graph": args.graph, "target": args.target, "time_limit_s": args.time_limit, "log": log,
               "resume": args.resume, "seed": args.seed, "on_progress": progress, "prefix": prefix,
               "final_min_time_s": args.min_time, "checkpoint": args.checkpoint and Path(args.checkpoint)}
    try:
        with _runner_for(args, "tune") as runner:
            result = tune(spec, args.method, args.budget, spec_path=relative, runner=runner, **options)
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
        spec_s = "-" if result.spec_s is None else _seconds(result.spec_s)
        best_s = "-" if result.time_s is None else _seconds(result.time_s)
        speedup = "" if result.speedup is None else f", {result.speedup:.2f}x"
        print(f"{program.name}: {args.method}: {len(result.moves)} moves, {spec_s} -> {best_s}{speedup} "
              f"after {result.evaluations} evaluations; wrote {out}")
    return 0


def _runner_for(args: argparse.Namespace, command: str):
    """The runner `--runner`/$DOJO_RUNNER_URL names, or this machine's; a context manager."""
    from runner.client import RunnerError, connect

    try:
        return connect(args.runner or os.environ.get("DOJO_RUNNER_URL"), args.token_file)
    except RunnerError as error:
        raise CommandError(f"dojo {command}: error: {error}") from None


def cmd_agent_train(args: argparse.Namespace) -> int:
    # imported here: torch and the embedding model are slow to load
    from agent.perfllm.learner import LearnerConfig
    from agent.perfllm.train import measured, train
    from runner.client import RunnerError

    unknown = [k for k in [*args.kernels, *args.hold_out] if k not in KERNELS]
    if unknown:
        raise CommandError(f"dojo agent train: error: unknown kernel {', '.join(unknown)}; "
                           f"the library has {', '.join(KERNELS)}")
    names = [k for k in (args.kernels or list(KERNELS)) if k not in args.hold_out]
    shaped = {"paper": Kernel.text, "quick": Kernel.quick, "small": Kernel.small}[args.shapes]
    kernels = [(name, load(shaped(KERNELS[name]))) for name in names]
    kernels += [(Path(f).stem, _load(f)) for f in args.files]
    out = Path(args.out)

    def progress(row: dict) -> None:
        speedup = "-" if row["best_speedup"] is None else f"{row['best_speedup']:.2f}x"
        loss = "-" if row["loss"] is None else f"{row['loss']:.3g}"
        print(f"episode {row['episode']}/{args.episodes} {row['kernel']}: {row['steps']} moves, best {speedup}, "
              f"epsilon {row['epsilon']:.2f}, loss {loss}", file=sys.stderr, flush=True)

    try:
        with _runner_for(args, "agent train") as runner:
            result = train(kernels, out, episodes=args.episodes, max_steps=args.max_steps, target=args.target,
                           seed=args.seed, resume=args.resume, on_progress=progress,
                           evaluate=measured(out, target=args.target, runner=runner),
                           experience=_logs(args.from_logs), pretrain_updates=args.pretrain_updates,
                           config=None if args.epsilon_start is None else LearnerConfig(
                               epsilon_start=args.epsilon_start),
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
        found += sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    return found


def cmd_agent_continue(args: argparse.Namespace) -> int:
    from agent.evaluate import Evaluator
    from agent.perfllm.checkpoint import SHIPPED
    from agent.perfllm.play import Step, continue_
    from runner.client import RunnerError

    program = _load(args.file)
    spec, prefix, spec_file = _start(program, args.file)
    out = Path(args.file) if args.write else Path(args.out) if args.out else None
    _not_the_spec(out, spec_file, "agent continue")

    def step(s: Step) -> None:
        time_s = "failed" if s.time_s is None else _seconds(s.time_s)
        print(f"{s.index}: {s.move or 'stop'} -> {time_s}", file=sys.stderr, flush=True)

    try:
        with _runner_for(args, "agent continue") as runner:
            evaluator = Evaluator(spec, prefix=prefix, runner=runner, target=args.target)
            result = continue_(evaluator.start, Path(args.checkpoint) if args.checkpoint else SHIPPED, args.steps,
                               evaluator, target=args.target, on_step=step)
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
        start = "-" if result.start_s is None else _seconds(result.start_s)
        time_s = "-" if result.time_s is None else _seconds(result.time_s)
        speedup = "" if result.speedup is None else f", {result.speedup:.2f}x"
        where = f"; wrote {out}" if out is not None else f"; {args.file} unchanged" if args.write else ""
        # like `dojo apply`: standard output carries the program alone, so that it can be redirected to a file
        print(f"{program.name}: agent: {len(result.steps)} steps ({result.ended}), best {len(result.moves)} moves, "
              f"{start} -> {time_s}{speedup}{where}", file=sys.stderr)
        if out is None and not args.write:
            sys.stdout.write(to_text(best))
    return 0


def cmd_library_build(args: argparse.Namespace) -> int:
    # imported here: the other commands start without the tuner, and Ray loads only with --ray
    from libgen import BuildEvent, LibraryError, build_library, resolve
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

    options = {"method": args.method, "budget": args.budget, "name": args.name, "target": args.target,
               "graph": args.graph, "seed": args.seed, "min_time_s": args.min_time, "time_limit_s": args.time_limit,
               "checkpoint": args.checkpoint and Path(args.checkpoint), "workers": args.workers,
               "peers": (args.peers or list(DEFAULT_PEERS)) if args.peers is not None else (), "on_event": event}
    try:
        kernels = resolve(args.kernels, args.shape, "small" if args.small else "quick" if args.quick else "paper")
        if args.ray:
            from libgen.cluster import Cluster

            with Cluster(args.ray, cores=args.ray_cores) as cluster:
                result = build_library(kernels, out, cluster=cluster, **options)
        else:
            with _runner_for(args, "library build") as runner:
                result = build_library(kernels, out, runner=runner, **options)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dojo", description="PerfDojo: optimise ML kernels one legal move at a time.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="report every error in .dojo files")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(run=cmd_check)

    fmt = commands.add_parser("fmt", help="print a file in canonical form")
    fmt.add_argument("file", metavar="FILE", help="a .dojo file, or - for standard input")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the file in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if the file is not in canonical form")
    fmt.set_defaults(run=cmd_fmt)

    interp = commands.add_parser("interp", help="run a kernel with the reference interpreter")
    interp.add_argument("file", metavar="FILE")
    source = interp.add_mutually_exclusive_group(required=True)
    source.add_argument("--inputs", metavar="IN.npz", help="the kernel's inputs, arrays by name")
    source.add_argument("--seed", type=int, help="generate random inputs with this seed (saved with the outputs)")
    interp.add_argument("--out", required=True, metavar="OUT.npz", help="where to write the outputs, by name")
    interp.set_defaults(run=cmd_interp)

    kernels = commands.add_parser("kernels", help="list the kernel library, or write one kernel at a chosen shape")
    kernels.add_argument("name", nargs="?", metavar="NAME")
    kernels.add_argument("--shape", nargs="*", default=[], metavar="PARAM=SIZE", help="override the paper's shape")
    sized = kernels.add_mutually_exclusive_group()
    sized.add_argument("--small", action="store_true", help="the small shape the tests use")
    sized.add_argument("--quick", action="store_true", help="the quick shape (a spec of tens to hundreds of "
                       "microseconds) the agent trains on")
    kernels.add_argument("--out", "-o", metavar="FILE", help="write to FILE instead of standard output")
    kernels.set_defaults(run=cmd_kernels)

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

    codegen = commands.add_parser("codegen", help="print the source generated for a target")
    codegen.add_argument("file", metavar="FILE")
    codegen.add_argument("--target", default="native", metavar="T", help="a target (default: native)")
    codegen.set_defaults(run=cmd_codegen)

    run = commands.add_parser("run", help="build, time and verify a kernel against its spec")
    run.add_argument("file", metavar="FILE")
    run.add_argument("--target", default="native", metavar="T", help="a target (default: native)")
    run.add_argument("--repeats", type=int, default=10, metavar="N", help="timed runs (default: 10)")
    run.add_argument("--warmup", type=int, default=2, metavar="W", help="untimed runs first (default: 2)")
    run.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                     help=f"time more runs until they add up to S seconds (default: {MIN_TIME_S:g}; 0: exactly N)")
    run.add_argument("--json", action="store_true", help="the result as JSON")
    run.add_argument("--runner", metavar="URL", help="a runner service (default: $DOJO_RUNNER_URL, else this machine)")
    run.add_argument("--token-file", metavar="F", help="the service's token (default: $DOJO_RUNNER_TOKEN)")
    run.set_defaults(run=cmd_run)

    machine = commands.add_parser("machine", help="this machine's memory bandwidth and peak FLOP/s (the roofline)")
    machine.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    machine.add_argument("--json", action="store_true", help="the limits and how they were measured, as JSON")
    machine.set_defaults(run=cmd_machine)
    tune_ = commands.add_parser("tune", help="optimise a kernel with a pass or a search, timing every candidate")
    tune_.add_argument("file", metavar="FILE", help="the spec (or a derived file: its moves are kept as a prefix)")
    tune_.add_argument("--method", required=True, choices=["naive", "greedy", "heuristic", "random", "sa", "agent"])
    tune_.add_argument("--checkpoint", metavar="DIR", help="the learned agent's (--method agent): what "
                       "`dojo agent train` wrote (default: the agent shipped with PerfDojo)")
    tune_.add_argument("--graph", default="edges", choices=["edges", "heuristic"],
                       help="search graph: one move at a time, or whole candidate sequences (default: edges)")
    tune_.add_argument("--budget", type=int, default=100, metavar="N",
                       help="evaluations after the spec's (default: 100)")
    tune_.add_argument("--time-limit", type=float, metavar="S", help="stop searching after S seconds")
    tune_.add_argument("--target", default="native", metavar="T", help="a target (default: native)")
    tune_.add_argument("--seed", type=int, default=0, metavar="S")
    tune_.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                       help=f"final measurement of the best candidates: at least S s each (default: {MIN_TIME_S:g})")
    tune_.add_argument("--out", "-o", required=True, metavar="OUT.dojo", help="the best program; log in OUT.dojo.jsonl")
    tune_.add_argument("--resume", action="store_true", help="continue from OUT.dojo.jsonl")
    tune_.add_argument("--json", action="store_true", help="the result summary as JSON")
    tune_.add_argument("--runner", metavar="URL",
                       help="a runner service (default: $DOJO_RUNNER_URL, else this machine)")
    tune_.add_argument("--token-file", metavar="F", help="the service's token (default: $DOJO_RUNNER_TOKEN)")
    tune_.set_defaults(run=cmd_tune)

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
    train_.set_defaults(run=cmd_agent_train)
    continue__ = agent_commands.add_parser("continue", help="play N of the agent's moves from FILE, measuring, "
                                           "and keep the best program")
    continue__.add_argument("file", metavar="FILE", help="a spec or a derived file (its moves are kept)")
    continue__.add_argument("--checkpoint", metavar="DIR", help="what `dojo agent train` wrote (default: the "
                            "agent shipped with PerfDojo)")
    continue__.add_argument("--steps", type=int, default=10, metavar="N", help="moves to play (default: 10)")
    where = continue__.add_mutually_exclusive_group()
    where.add_argument("--write", action="store_true", help="rewrite FILE with the best program")
    where.add_argument("--out", "-o", metavar="OUT", help="write the best program to OUT (default: print it, "
                       "and the summary on standard error)")
    continue__.add_argument("--json", action="store_true", help="print the result summary as JSON instead (and "
                            "not the program)")
    for sub in (train_, continue__):
        sub.add_argument("--target", default="native", metavar="T", help="a target (default: native)")
        sub.add_argument("--runner", metavar="URL", help="a runner service (default: $DOJO_RUNNER_URL, else this "
                         "machine)")
        sub.add_argument("--token-file", metavar="F", help="the service's token (default: $DOJO_RUNNER_TOKEN)")
    continue__.set_defaults(run=cmd_agent_continue)
    library = commands.add_parser("library", help="tune kernels into a library for C, numpy and PyTorch")
    library_commands = library.add_subparsers(dest="library_command", required=True, metavar="COMMAND")
    build_ = library_commands.add_parser("build", help="tune each kernel (skipping those already tuned in DIR), "
                                         "then write the library, its header, Python module and manifest")
    build_.add_argument("kernels", nargs="+", metavar="KERNEL", help="library kernels or .dojo files")
    build_.add_argument("--method", required=True, choices=["naive", "greedy", "heuristic", "random", "sa", "agent"])
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
    build_.add_argument("--graph", default="edges", choices=["edges", "heuristic"], help="the searches' graph")
    build_.add_argument("--seed", type=int, default=0, metavar="S")
    build_.add_argument("--time-limit", type=float, metavar="S", help="stop each kernel's search after S seconds")
    build_.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                        help="time the finalists of each kernel for at least S seconds (default: 1)")
    build_.add_argument("--checkpoint", metavar="DIR", help="the learned agent's (--method agent)")
    build_.add_argument("--peers", nargs="*", metavar="PEER", help="also time the peers of bench/ on each library "
                        "kernel (default: numpy torch torch.compile onnxruntime)")
    build_.add_argument("--ray", metavar="auto|local|ADDRESS", help="tune on a Ray cluster: a running one (auto "
                        "starts one on this machine when there is none), a new local one, or the one at ADDRESS")
    build_.add_argument("--ray-cores", type=int, default=1, metavar="C", help="CPUs of a node for each evaluation "
                        "(default: 1)")
    build_.add_argument("--workers", type=int, metavar="N", help="tune at most N kernels at once on the cluster "
                        "(default: as many as it has room for)")
    build_.add_argument("--target", default="native", metavar="T", help="a C target (default: native)")
    build_.add_argument("--runner", metavar="URL", help="a runner service (default: $DOJO_RUNNER_URL, else this "
                        "machine)")
    build_.add_argument("--token-file", metavar="F", help="the service's token (default: $DOJO_RUNNER_TOKEN)")
    build_.add_argument("--json", action="store_true", help="the result summary as JSON")
    build_.set_defaults(run=cmd_library_build)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommandError as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
