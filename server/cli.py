"""`dojo`: the command line.

Every subcommand reads `.dojo` files, reports bad input as
`FILE:LINE:COL: error: MESSAGE` and exits 1, and never overwrites a file it
could not fully process. This module builds the parser from the command
groups of server/commands and runs the command asked for.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import runner.affinity  # noqa: F401  (the process's CPUs, read before anything loads OpenMP)
from dojo_ir.collector import for_long_kernels

from .commands import agent, costmodel, importing, library, model, moves, program, run, tune
from .commands.shared import CommandError

# in the order `dojo --help` lists them
GROUPS = (program, moves, run, tune, agent, costmodel, library, importing, model)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dojo", description="PerfDojo: optimise ML kernels one legal move at a time.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_to(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for_long_kernels()
    try:
        return args.run(args)
    except CommandError as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`dojo moves FILE | head`): the rest of the output has nowhere to go,
        # and Python's flush of stdout at exit must not fail on the closed pipe again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as error:  # a file named on the command line that cannot be read or written
        where = f"{error.filename}: " if error.filename else ""
        print(f"dojo {args.command}: error: {where}{error.strerror or error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
