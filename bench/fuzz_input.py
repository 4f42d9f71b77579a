"""Mutated library kernels fed to every front door: `dojo check`, `dojo fmt`, `dojo interp`,
`dojo moves` and the language server's document code.

Each input is a library kernel at its small shape with one to three mutations: a line deleted,
duplicated or swapped, characters flipped, inserted or deleted, the text cut short, names swapped,
deep nesting (scopes, calls, chains of terms), huge or edge-case numbers, control and binary
characters. Every door must answer without raising, within a time bound, and every rejection must be
`FILE:LINE:COL: error: ...`. The CLI runs in-process (its `main`, with captured output); the
language server's part is what didOpen and didChange run: a Snapshot's diagnostics, the derivation
check, the diagnostics as LSP ranges, and the legal moves of every line (its code actions).

`python bench/fuzz_input.py [COUNT]` tries COUNT inputs (default 5000) and writes its section of
bench/results/fuzz.md; tests/test_fuzz_input.py runs fewer in CI.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sections import write_section  # noqa: E402
from dojo_ir import DojoError, load  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from runner.local import iterations as runner_iterations  # noqa: E402
from server.cli import main as dojo  # noqa: E402
from server.lsp.documents import Snapshot  # noqa: E402
from server.lsp.features.diagnostics import derivation_diagnostics, to_lsp  # noqa: E402

SEED = 16
TIME_LIMIT_S = 20  # per input, for the four commands and the server together
# an interpreted program this many iterations long is slow, not stuck: it is not interpreted
MAX_ITERATIONS = 1 << 22

Lines = list[str]
_NUMBER = re.compile(r"[0-9]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBERS = ("0", "1", "-1", "2147483648", "9223372036854775807", "9223372036854775808", "1" * 30, "9" * 5000,
            "1e999", "0.5", "00", "4294967296")
_CHARACTERS = "[]{}()|:#=+-*/,. ;\"'\\<>!&?@$%^~`_aZ09\t\r\x0c\x00\x7f\x85\xa0\u2028\ufeff\U0001f600é\xff"


def _line(rng: random.Random, lines: Lines) -> int:
    return rng.randrange(len(lines)) if lines else 0


def delete_line(rng: random.Random, lines: Lines) -> Lines:
    if lines:
        del lines[_line(rng, lines)]
    return lines


def duplicate_line(rng: random.Random, lines: Lines) -> Lines:
    if lines:
        k = _line(rng, lines)
        lines.insert(rng.randrange(len(lines) + 1), lines[k])
    return lines


def swap_lines(rng: random.Random, lines: Lines) -> Lines:
    if len(lines) > 1:
        a, b = rng.sample(range(len(lines)), 2)
        lines[a], lines[b] = lines[b], lines[a]
    return lines


def _edit_characters(rng: random.Random, lines: Lines, edit: Callable[[str, int], str]) -> Lines:
    k = _line(rng, lines)
    if lines:
        lines[k] = edit(lines[k], rng.randrange(len(lines[k]) + 1))
    return lines


def flip_character(rng: random.Random, lines: Lines) -> Lines:
    return _edit_characters(rng, lines, lambda s, i: s[:i] + rng.choice(_CHARACTERS) + s[i + 1:])


def insert_character(rng: random.Random, lines: Lines) -> Lines:
    return _edit_characters(rng, lines, lambda s, i: s[:i] + rng.choice(_CHARACTERS) + s[i:])


def delete_character(rng: random.Random, lines: Lines) -> Lines:
    return _edit_characters(rng, lines, lambda s, i: s[:i] + s[i + 1:])


def binary_bytes(rng: random.Random, lines: Lines) -> Lines:
    noise = "".join(chr(rng.randrange(256)) for _ in range(rng.randrange(1, 40)))
    return _edit_characters(rng, lines, lambda s, i: s[:i] + noise + s[i:])


def cut_short(rng: random.Random, lines: Lines) -> Lines:
    text = "\n".join(lines)
    return text[: rng.randrange(len(text) + 1)].split("\n")


def swap_names(rng: random.Random, lines: Lines) -> Lines:
    names = sorted({m.group() for line in lines for m in _NAME.finditer(line)})
    if names:
        old, new = rng.choice(names), rng.choice(names + ["kernel", "spec", "move", "inf", "heap", "if", "exp"])
        k = _line(rng, lines)
        lines[k] = re.sub(rf"\b{old}\b", new, lines[k], count=rng.randrange(2))
    return lines


def huge_number(rng: random.Random, lines: Lines) -> Lines:
    k = _line(rng, lines)
    found = list(_NUMBER.finditer(lines[k])) if lines else []
    if found:
        m = rng.choice(found)
        lines[k] = lines[k][: m.start()] + rng.choice(_NUMBERS) + lines[k][m.end():]
    return lines


def deep_nesting(rng: random.Random, lines: Lines) -> Lines:
    body = [k for k, line in enumerate(lines) if "=" in line and not line.startswith(("kernel", "move"))]
    if not body:
        return lines
    k, depth = rng.choice(body), rng.choice((30, 63, 64, 65, 99, 100, 101, 331, 2000))
    before, _, value = lines[k].partition("=")
    shape = rng.randrange(4)
    if shape == 0:  # nested calls
        lines[k] = f"{before}={'exp(' * depth}{value}{')' * depth}"
    elif shape == 1:  # a chain of terms
        lines[k] = f"{before}={value}" + f" + {value.strip() or '1'}" * depth
    elif shape == 2:  # scopes around the operation
        lines[k] = "1 " * depth + lines[k]
    else:  # parentheses in an index
        lines[k] = lines[k].replace("[", "[" + "(" * depth, 1).replace("]", ")" * depth + "]", 1)
    return lines


MUTATIONS: dict[str, Callable[[random.Random, Lines], Lines]] = {
    f.__name__: f
    for f in (delete_line, duplicate_line, swap_lines, flip_character, insert_character, delete_character,
              binary_bytes, cut_short, swap_names, huge_number, deep_nesting)
}


@dataclass(frozen=True)
class Mutant:
    kernel: str
    mutations: tuple[str, ...]
    text: str


def mutants(count: int, seed: int = SEED) -> Iterator[Mutant]:
    """`count` mutated kernels, the same for the same seed."""
    rng = random.Random(seed)
    sources = {name: kernel.small() for name, kernel in sorted(KERNELS.items())}
    for _ in range(count):
        kernel = rng.choice(sorted(sources))
        lines = sources[kernel].split("\n")
        chosen = tuple(rng.choice(sorted(MUTATIONS)) for _ in range(rng.choice((1, 1, 2, 3))))
        for name in chosen:
            lines = MUTATIONS[name](rng, lines)
        yield Mutant(kernel, chosen, "\n".join(lines))


class Hang(Exception):
    """An input took longer than TIME_LIMIT_S."""


def _alarm(_: int, __: FrameType | None) -> None:
    raise Hang


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dojo(argv)
    return code, out.getvalue() + err.getvalue()


def _rejection_problems(command: str, path: str, output: str) -> list[str]:
    """Lines of a failed command that are not `FILE:LINE:COL: error: ...` (nor `dojo check`'s summary)."""
    positioned = re.compile(rf"{re.escape(path)}:\d+:\d+: error: \S")
    lines = [line for line in output.splitlines() if line.strip()]
    bad = [line for line in lines if not positioned.match(line) and not re.match(r"checked \d+ files?: ", line)]
    if bad or not any(positioned.match(line) for line in lines):
        return [f"dojo {command} rejected without a position: {(bad or lines or [''])[0][:200]!r}"]
    return []


def _iterations(text: str) -> int | None:
    """How many times the operations of `text` run in all, or None when it is not a valid kernel."""
    try:
        program = load(text)
    except DojoError:
        return None
    return runner_iterations(program)


def _language_server(text: str, previous: str) -> list[str]:
    problems = []
    for version, body in ((1, previous), (2, text)):  # didOpen of the kernel, then didChange to the mutant
        snapshot = Snapshot("file:///fuzz/kernel.dojo", version, body)
        found = snapshot.diagnostics + derivation_diagnostics(snapshot)
        for diagnostic in (to_lsp(snapshot, d) for d in found):
            if not 0 <= diagnostic.range.start.line <= max(len(snapshot.lines) - 1, 0):
                problems.append(f"dojo-lsp: a diagnostic on line {diagnostic.range.start.line}, beyond the text")
        if snapshot.program is None and not found:
            problems.append("dojo-lsp: no program and no diagnostic")
        snapshot.moves_at(1, len(snapshot.lines))  # the code actions of every line
    return problems


@dataclass(frozen=True)
class Outcome:
    problems: list[str]
    valid: bool  # the mutant is still a valid kernel


def try_input(mutant: Mutant, directory: Path) -> Outcome:
    """What went wrong when the four commands and the server's document code saw `mutant`."""
    path = directory / "kernel.dojo"
    path.write_text(mutant.text, encoding="utf-8")
    name = str(path)
    problems: list[str] = []
    iterations = None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        iterations = _iterations(mutant.text)
        commands = {
            "check": ["check", name],
            "fmt": ["fmt", name],
            "moves": ["moves", name],
            "interp": ["interp", "--seed", "0", "--out", str(directory / "out.npz"), name],
        }
        if iterations is not None and iterations > MAX_ITERATIONS:
            del commands["interp"]
        for command, argv in commands.items():
            code, output = _run(argv)
            if code not in (0, 1):
                problems.append(f"dojo {command} exited {code}")
            elif code == 1:
                problems += _rejection_problems(command, name, output)
        problems += _language_server(mutant.text, KERNELS[mutant.kernel].small())
    except Hang:
        problems.append(f"took more than {TIME_LIMIT_S} s")
    except Exception as error:  # noqa: BLE001 - any escape is what the fuzz looks for
        problems.append(f"raised {type(error).__name__}: {str(error)[:200]}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(problems, iterations is not None)


@dataclass
class Report:
    tried: int
    failures: list[tuple[Mutant, list[str]]]
    accepted: int
    mutations: Counter
    seconds: float


def fuzz(count: int, directory: Path, seed: int = SEED) -> Report:
    started = time.perf_counter()
    failures, accepted, mutations = [], 0, Counter()
    for mutant in mutants(count, seed):
        mutations.update(mutant.mutations)
        outcome = try_input(mutant, directory)
        if outcome.problems:
            failures.append((mutant, outcome.problems))
        accepted += outcome.valid
    return Report(count, failures, accepted, mutations, time.perf_counter() - started)


SECTION = "# Mutated input at every front door"


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with tempfile.TemporaryDirectory(prefix="dojo-fuzz-") as directory:
        report = fuzz(count, Path(directory))
    lines = [
        SECTION,
        "",
        f"`python bench/fuzz_input.py {count}`: {report.tried} mutated library kernels (small shapes, seed {SEED}), "
        "each fed to `dojo check`, `dojo fmt`, `dojo interp`, `dojo moves` (in-process) and to the language "
        "server's didOpen/didChange code (diagnostics as LSP ranges, the derivation check, every line's legal "
        f"moves), with {TIME_LIMIT_S} s per input. None may raise or hang, and every rejection is "
        "`FILE:LINE:COL: error: ...`. tests/test_fuzz_input.py runs the first 1,000 in CI.",
        "",
        f"- inputs tried: {report.tried}",
        f"- accepted as valid kernels: {report.accepted}",
        f"- failures: {len(report.failures)}",
        f"- time: {report.seconds:.0f} s",
        "",
        "| mutation | times applied |",
        "|---|---|",
        *(f"| {name} | {n} |" for name, n in sorted(report.mutations.items())),
    ]
    write_section(Path(__file__).parent / "results" / "fuzz.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    for mutant, problems in report.failures[:20]:
        print(f"\n{mutant.kernel} {mutant.mutations}: {problems}\n{mutant.text[:2000]}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
