"""`dojo check`, `fmt`, `interp`, `kernels`: a program's text, its errors and its meaning."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.errors import NOWHERE
from dojo_ir.library import KERNELS
from runner.check import check_text
from runner.files import read_arrays, write_arrays, write_atomically

from .shared import CommandError, load_file, read, reporting


def add_to(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser("check", help="report every error in .dojo files")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--verify", action="store_true", help="also replay each derivation from its spec and "
                       "compare the numbers with the spec's on the interpreter (as `dojo-lsp --check --verify`)")
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


def cmd_check(args: argparse.Namespace) -> int:
    errors = 0
    for path in args.files:
        try:
            found = check_text(read(path), Path(path), args.verify)
        except CommandError as error:
            print(error)
            errors += 1
            continue
        for d in found:
            print(d.format(path))
        errors += sum(d.severity == "error" for d in found)
    files = len(args.files)
    print(f"checked {files} file{'s' * (files != 1)}: {errors or 'no'} error{'s' * (errors != 1)}", file=sys.stderr)
    return 1 if errors else 0


def cmd_fmt(args: argparse.Namespace) -> int:
    text = read(args.file)
    with reporting(args.file):
        formatted = to_text(load(text))
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
    program = load_file(args.file)
    given = _read_inputs(args.inputs) if args.inputs else None
    started = time.perf_counter()
    with reporting(args.file, program.span):  # sizes the checker accepts may still be beyond this machine
        inputs = random_inputs(program, args.seed) if given is None else given
        outputs = interpret(program, inputs)
    elapsed = time.perf_counter() - started
    out = Path(args.out)
    try:
        write_arrays(out, outputs | ({} if args.inputs else inputs))
    except ValueError as error:  # a name the zip format cannot hold
        span = program.span or NOWHERE
        raise CommandError(f"{args.file}:{span.line}:{span.col}: error: {error}") from None
    for name, value in outputs.items():
        print(f"{name}: {value.dtype} {list(value.shape)}", file=sys.stderr)
    print(f"interpreted {program.name} in {elapsed:.3f} s; wrote {out}", file=sys.stderr)
    return 0


def _read_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        return read_arrays(Path(path))
    except (OSError, ValueError) as error:
        raise CommandError(f"{path}: error: cannot read inputs: {error}") from None


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
