"""`dojo codegen`, `run`, `machine`: a program's code for a target, its measured time, and the
machine's limits that bound it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dojo_ir.derivation import spec_path
from runner.measure import MIN_TIME_S, measure
from runner.result import RunResult, format_time

from .shared import CommandError, add_runner_options, load_file, reporting, runner_for


def add_to(commands: argparse._SubParsersAction) -> None:
    codegen = commands.add_parser("codegen", help="print the source generated for a target")
    codegen.add_argument("file", metavar="FILE")
    codegen.add_argument("--target", default="native", metavar="T", help="a target (default: native)")
    codegen.set_defaults(run=cmd_codegen)

    run = commands.add_parser("run", help="build, time and verify a kernel against its spec")
    run.add_argument("file", metavar="FILE")
    run.add_argument("--repeats", type=int, default=10, metavar="N", help="timed runs (default: 10)")
    run.add_argument("--warmup", type=int, default=2, metavar="W", help="untimed runs first (default: 2)")
    run.add_argument("--min-time", type=float, default=MIN_TIME_S, metavar="S",
                     help=f"time more runs until they add up to S seconds (default: {MIN_TIME_S:g}; 0: exactly N)")
    run.add_argument("--json", action="store_true", help="the result as JSON")
    add_runner_options(run)
    run.set_defaults(run=cmd_run)

    machine = commands.add_parser("machine",
                                  help="this machine's bandwidth of memory and caches and peak FLOP/s (the roofline)")
    machine.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    machine.add_argument("--json", action="store_true", help="the limits and how they were measured, as JSON")
    machine.set_defaults(run=cmd_machine)


def cmd_codegen(args: argparse.Namespace) -> int:
    # imported here so that the commands that do not compile start without the backends
    from codegen import generate
    from codegen.targets import get_target

    program = load_file(args.file)
    try:
        target = get_target(args.target)
    except ValueError as error:
        raise CommandError(f"dojo codegen: error: {error}") from None
    with reporting(args.file, program.span):
        source = generate(program, target)
    sys.stdout.write(source)
    return 0


def summary(name: str, result: RunResult) -> str:
    """One line about a run for people."""
    where = f"{name} on {result.target}"
    if result.median_s is None:
        return f"{where}: failed: {result.error}"
    line = (f"{where}: median {format_time(result.median_s)} (min {format_time(result.min_s)}, max "
            f"{format_time(result.max_s)}, {result.repeats} run{'s' * (result.repeats != 1)}), "
            f"compiled in {result.compile_s:.2f} s, ")
    error = "" if result.max_error is None else f" (max error {result.max_error:.2g})"
    line += {True: f"verified{error}", False: f"NOT verified: outputs differ from the spec's{error}",
             None: "not verified"}[result.verified]
    return line if result.error is None else f"{line}: {result.error}"


def cmd_run(args: argparse.Namespace) -> int:
    from runner.client import RunnerError  # imported here, as the build machinery is where it runs

    program = load_file(args.file)
    spec = None if program.derivation is None else load_file(str(spec_path(program, Path(args.file))))
    options = {"target": args.target, "repeats": args.repeats, "warmup": args.warmup, "spec": spec,
               "min_time_s": args.min_time}
    try:
        with runner_for(args) as runner:
            result = measure(runner, program, **options)
    except (RunnerError, ValueError) as error:
        raise CommandError(f"dojo run: error: {error}") from None
    # Every repetition's time is in the runner's record; one line of summary is what a script wants here.
    record = {k: v for k, v in result.to_json().items() if k != "times"}
    print(json.dumps(record) if args.json else summary(program.name, result))
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
    caches = "".join(f"{level} {record[key] / 1e9:.0f} GB/s, " for level, key in (("L2", "l2_Bps"), ("L3", "l3_Bps"))
                     if record.get(key))
    print(f"bandwidth {record['bandwidth_Bps'] / 1e9:.1f} GB/s (read {detail['read_Bps'] / 1e9:.1f}, "
          f"triad {detail['triad_Bps'] / 1e9:.1f}), {caches}peak {record['peak_flops'] / 1e9:.0f} GFLOP/s f32 FMA, "
          f"{record['cores']} core{'s' * (record['cores'] != 1)}, {record['cpu']}")
    return 0
