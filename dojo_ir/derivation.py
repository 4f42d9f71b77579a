"""Derivations: a program as its spec plus the moves that transform it.

A `.dojo` file may carry, right after its kernel line,

    spec "softmax.dojo"
    move join_scopes(op=m#1, depth=0)
    move reuse_dims(buffer=m, dim=0)

naming the file it was derived from (relative to itself) and the moves, in
order. Replaying the moves on the spec must give the file's program exactly;
that is the proof that the optimised kernel means what its spec means.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .analysis import Analysis
from .checker import check
from .errors import NOWHERE, Diagnostic, DojoError
from .moves import apply, why_not
from .parser import parse
from .paths import same_program, without_comments
from .printer import body_lines, to_text
from .source import read_source
from .tree import Derivation, Program, walk_ops


def record(program: Program, moves: list[str], spec: str | None = None) -> Program:
    """`program` with `moves` appended to its derivation; a program without
    one gets a new derivation from `spec`."""
    if program.derivation is not None:
        derivation = replace(program.derivation, moves=program.derivation.moves + tuple(moves), move_spans=None)
    elif spec is not None:
        derivation = Derivation(spec, tuple(moves))
    else:
        raise ValueError("a program without a derivation needs the spec's path to record moves")
    return replace(program, derivation=derivation)


def spec_path(program: Program, file: Path) -> Path:
    assert program.derivation is not None
    return (file.parent / program.derivation.spec).resolve()


def read_spec(program: Program, file: Path) -> Program | None:
    """The spec that the derivation of `program`, read from `file`, names; None when it cannot be
    read or is not a valid kernel (`derivation_diagnostics` says so)."""
    try:
        spec = parse(read_source(spec_path(program, file)))
    except DojoError:
        return None
    return None if check(spec) else spec


@dataclass(frozen=True)
class Replay:
    """The spec after each move: `states[0]` is the spec, `states[k]` the
    program after move k."""

    states: list[Program]


def replay(program: Program, spec: Program) -> Replay:
    """Apply the derivation's moves to `spec` one by one. A move that does not
    apply raises DojoError at its line, naming it and saying why."""
    derivation = program.derivation
    if derivation is None:
        raise DojoError.at(program.span or NOWHERE, "this file has no derivation: no `spec` line after the kernel "
                           "line", "replay")
    states = [without_comments(spec)]
    spans = derivation.move_spans or ()
    for k, text in enumerate(derivation.moves):
        span = spans[k] if k < len(spans) else derivation.span or NOWHERE
        analysis = Analysis(states[-1])
        reason = why_not(states[-1], text, analysis)
        if reason is not None:
            raise DojoError.at(span, f"move {k + 1} `{text}` does not apply to the spec after the moves before it: "
                               f"{reason}", "replay")
        states.append(apply(states[-1], text, analysis))
    return Replay(states)


def verify(program: Program, spec: Program) -> list[Diagnostic]:
    """Replay the derivation and compare: no diagnostics if the file's program
    is exactly what its moves make of its spec."""
    try:
        states = replay(program, spec).states
    except DojoError as error:
        return list(error.diagnostics)
    derived = states[-1]
    if same_program(derived, program):
        return []
    return [_first_difference(program, derived, states)]


def derivation_diagnostics(program: Program, spec: Program | None) -> list[Diagnostic]:
    """Where replaying the derivation of `program` on `spec` does not give `program` (none for a
    program without a derivation); a warning when there is no spec (`read_spec` found none)."""
    if program.derivation is None:
        return []
    if spec is None:
        span = program.derivation.span or program.span
        return [Diagnostic(span, f"cannot read the spec `{program.derivation.spec}` (or it is not a valid kernel), "
                                 "so the derivation is not checked", "replay", "warning")] if span else []
    return verify(program, spec)


def _first_difference(program: Program, derived: Program, states: list[Program]) -> Diagnostic:
    mine, theirs = without_comments(program), without_comments(derived)
    span = program.span or NOWHERE
    if (mine.name, mine.inputs, mine.outputs, mine.buffers) != (theirs.name, theirs.inputs, theirs.outputs,
                                                                 theirs.buffers):
        for b, d in zip(program.buffers, derived.buffers, strict=False):
            if replace(b, comments=()) != d:
                return Diagnostic(b.span or span, f"the derivation gives `{_decl(d)}` here", "replay")
        return Diagnostic(span, "the derivation gives a different kernel line or set of buffers", "replay")
    file_lines, derived_lines = body_lines(mine.body), body_lines(theirs.body)
    ops = [op for op, _ in walk_ops(program.body)]
    for i, (ours, replayed) in enumerate(zip(file_lines, derived_lines, strict=False)):
        if ours != replayed:
            where = ops[i].span if i < len(ops) and ops[i].span else span
            return Diagnostic(where, f"the derivation gives `{replayed.strip()}` here; {_culprit(states, i)}", "replay")
    where = ops[min(len(file_lines), len(derived_lines)) - 1].span or span
    return Diagnostic(where, f"the derivation gives {len(derived_lines)} body lines, this file has "
                      f"{len(file_lines)}; {_culprit(states, min(len(file_lines), len(derived_lines)))}", "replay")


def _decl(buffer) -> str:
    return to_text(Program("k", (), (), (buffer,), ())).splitlines()[2]


def _culprit(states: list[Program], line: int) -> str:
    """Which move last changed body line `line` of the derivation."""
    texts = [body_lines(s.body) for s in states]
    for k in range(len(texts) - 1, 0, -1):
        before = texts[k - 1][line] if line < len(texts[k - 1]) else None
        after = texts[k][line] if line < len(texts[k]) else None
        if before != after:
            return f"the last move to change that line is move {k}"
    return "no move changed that line: the file differs from the spec there"


def advance(program: Program, moves: list[str]) -> Program:
    """`program` after `moves`, in order, with them recorded in its derivation
    when it has one (a file without one is a spec: it changes, and no record
    could name what it was). Raises DojoError naming the first move that does
    not apply."""
    moved = program
    for k, text in enumerate(moves, start=1):
        analysis = Analysis(moved)
        reason = why_not(moved, text, analysis)
        if reason is not None:
            raise DojoError.at(program.span or NOWHERE, f"move {k} `{text}` does not apply: {reason}", "move")
        moved = apply(moved, text, analysis)
    return record(moved, moves) if program.derivation is not None and moves else moved
