"""`dojo-lsp`: the language server on stdio (the default) or TCP, or `--check`
to print its diagnostics for CI and exit.

Only the protocol goes to stdout: logging goes to stderr, and stdout is taken
away from everything else in the process before the server starts.
"""

from __future__ import annotations

import argparse
import logging
import sys

import runner.affinity  # noqa: F401  (the process's CPUs, read before anything loads OpenMP)
from dojo_ir.collector import for_long_kernels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dojo-lsp", description="The PerfDojo language server.")
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="talk LSP on stdin/stdout (the default)")
    transport.add_argument("--tcp", action="store_true", help="listen for one client on --host:--port")
    transport.add_argument("--check", nargs="+", metavar="FILE", help="print the diagnostics of FILEs and exit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2087)
    parser.add_argument("--verify", action="store_true",
                        help="with --check: replay each derivation and compare the numbers with the spec's")
    parser.add_argument("--format", choices=("text", "github"), default="text", help="with --check: output form")
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = parser.parse_args(argv)
    if (args.verify or args.format != "text") and not args.check:
        parser.error("--verify and --format go with --check")
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="dojo-lsp %(levelname)s %(name)s: %(message)s")
    for_long_kernels()

    if args.check:
        from .check import run_check

        lines, status = run_check(args.check, args.verify, args.format)
        print("\n".join(lines), end="\n" if lines else "")
        files = len(args.check)
        print(f"dojo-lsp: checked {files} file{'s' * (files != 1)}: {'errors' if status else 'no errors'}",
              file=sys.stderr)
        return status

    from .server import create_server

    server = create_server()
    if args.tcp:
        server.start_tcp(args.host, args.port)
        return 0
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol
    server.start_io(sys.stdin.buffer, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
