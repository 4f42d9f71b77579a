"""1,000 mutated library kernels at every front door (bench/fuzz_input.py runs more): `dojo check`,
`dojo fmt`, `dojo interp` and `dojo moves` in-process, and the language server's didOpen/didChange
code. None raises or hangs, and every rejection is `FILE:LINE:COL: error: ...`."""

from __future__ import annotations

from pathlib import Path

from bench.fuzz_input import MUTATIONS, _rejection_problems, mutants, try_input

COUNT = 1000


def test_mutated_kernels_are_answered_or_rejected_with_a_position(tmp_path: Path) -> None:
    failures = []
    applied = set()
    for mutant in mutants(COUNT):
        applied.update(mutant.mutations)
        problems = try_input(mutant, tmp_path).problems
        if problems:
            failures.append(f"{mutant.kernel} {mutant.mutations}: {problems[0]}\n{mutant.text[:400]}")
    assert applied == set(MUTATIONS)
    assert not failures, f"{len(failures)} of {COUNT} inputs failed; the first:\n" + "\n\n".join(failures[:3])


def test_a_rejection_without_a_position_is_caught(tmp_path: Path) -> None:
    # the harness itself: output that is not `FILE:LINE:COL: error:` is a failure
    name = str(tmp_path / "k.dojo")
    assert _rejection_problems("check", name, f"{name}:3:1: error: bad\nchecked 1 file: 1 error\n") == []
    assert _rejection_problems("fmt", name, f"{name}: error: cannot read: binary\n")
    assert _rejection_problems("fmt", name, f"{name}:3:1: error: unexpected character `\u2028`\n")
