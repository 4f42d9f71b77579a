"""What the commands share: reading `.dojo` files, turning bad input into `FILE:LINE:COL: error:
MESSAGE`, the runner's options, and where a search starts from a file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dojo_ir import DojoError, Program, load
from dojo_ir.derivation import spec_path
from dojo_ir.errors import LIMITS, NOWHERE, beyond_limits
from dojo_ir.source import decode, read_source
from dojo_ir.tree import Span


class CommandError(Exception):
    """A problem to print and exit 1 with: bad input, a missing file, a bad option."""


@contextmanager
def reporting(path: str, where: Span | None = None) -> Iterator[None]:
    """Turn what goes wrong with the input `path` inside the block into a CommandError: a DojoError
    at its own position, anything else of LIMITS at `where` (default line 1, column 1)."""
    try:
        yield
    except DojoError as error:
        raise CommandError(error.format(path)) from None
    except LIMITS as error:
        raise CommandError(beyond_limits(error, where or NOWHERE).format(path)) from None


def read(path: str) -> str:
    """The text of the `.dojo` file `path` (- for standard input)."""
    with reporting(path):
        return decode(sys.stdin.buffer.read()) if path == "-" else read_source(Path(path))


def load_file(path: str) -> Program:
    """The program in the `.dojo` file `path`, parsed and checked."""
    text = read(path)
    with reporting(path):
        return load(text)


def start(program: Program, path: str) -> tuple[Program, list[str], Path]:
    """Where a search or the agent starts from the file at `path`: its spec, the moves already
    played (a derived file's, kept as the prefix of every candidate) and the spec's file."""
    if program.derivation is None:
        return program, [], Path(path).resolve()
    spec_file = spec_path(program, Path(path))
    return load_file(str(spec_file)), list(program.derivation.moves), spec_file


def not_the_spec(out: Path | None, spec_file: Path, command: str) -> None:
    """Refuse to write a derived program over the spec its derivation names: the spec would be lost
    and the file would no longer replay."""
    if out is not None and out.resolve() == spec_file:
        raise CommandError(f"{out}: error: dojo {command}: this file is the spec of the result; write the result to "
                           "another file with --out")


def add_runner_options(parser: argparse.ArgumentParser, target: str = "a target") -> None:
    """--target, --runner and --token-file: what a command's programs are built for, and where they
    are built and timed."""
    parser.add_argument("--target", default="native", metavar="T", help=f"{target} (default: native)")
    parser.add_argument("--runner", metavar="URL", help="a runner service (default: $DOJO_RUNNER_URL, else this "
                        "machine)")
    parser.add_argument("--token-file", metavar="F", help="the service's token (default: $DOJO_RUNNER_TOKEN)")


def runner_for(args: argparse.Namespace):
    """The runner `--runner`/$DOJO_RUNNER_URL names, or this machine's; a context manager. RunnerError
    if it cannot be used, which each command reports with the failures of its runs."""
    from runner.client import connect  # imported here, as the build machinery is where it runs

    return connect(args.runner or os.environ.get("DOJO_RUNNER_URL"), args.token_file)


def add_input_shape_option(parser: argparse.ArgumentParser) -> None:
    """`--input-shape NAME=D,D,...`, repeatable: the model's inputs' symbolic dimensions fixed."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...", help="fix the shape "
                        "of input NAME (its symbolic dimensions), as given to `dojo import`; repeatable")


def add_model_import_options(parser: argparse.ArgumentParser) -> None:
    """How a command that runs a model on its library imports it again: `--fuse` or `--no-fuse`
    (default: the import whose kernels the library holds more of) and `--input-shape`."""
    fusing = parser.add_mutually_exclusive_group()
    fusing.add_argument("--fuse", action="store_true", default=None, help="the model as `dojo import --fuse` imports "
                        "it (default: the import, fused or not, whose kernels the library holds more of)")
    fusing.add_argument("--no-fuse", action="store_false", dest="fuse", help="the model as `dojo import` imports it")
    add_input_shape_option(parser)


def input_shapes(args: argparse.Namespace, command: str) -> dict[str, tuple[int, ...]]:
    """The shapes `--input-shape` gives, or a CommandError of `dojo COMMAND` saying what is wrong."""
    from libgen.onnx.shapes import ShapeError, parse_input_shapes  # onnx loads only for the model commands

    try:
        return parse_input_shapes(args.input_shape)
    except ShapeError as error:
        raise CommandError(f"dojo {command}: error: {error}") from None
