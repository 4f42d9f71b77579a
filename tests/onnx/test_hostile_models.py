"""300 mutated ONNX models through `dojo import` (bench/fuzz_onnx.py runs more): each is imported
or rejected as `MODEL: error: ...`; none raises."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import fuzz_onnx
from bench.fuzz_onnx import MUTATIONS, Mutant, mutants, try_import

COUNT = 300


def test_mutated_models_are_imported_or_rejected_naming_the_file(tmp_path: Path) -> None:
    failures, applied, kinds = [], set(), set()
    for mutant in mutants(COUNT):
        applied.update(mutant.mutations)
        outcome = try_import(mutant, tmp_path, fuse=len(mutant.mutations) == 2)
        kinds.add(outcome.kind)
        if outcome.kind == "failed":
            failures.append(f"{mutant.model} {mutant.mutations}: {outcome.problem}")
    assert applied == set(MUTATIONS) and kinds >= {"imported", "rejected"}
    assert not failures, f"{len(failures)} of {COUNT} failed; the first:\n" + "\n".join(failures[:5])


def test_an_exception_or_an_unnamed_rejection_is_a_failure(tmp_path: Path, monkeypatch) -> None:
    # the harness itself: what the rules forbid is caught, not passed
    assert try_import(Mutant("encoder", (), b"\x08\x07"), tmp_path, fuse=False).kind == "rejected"

    def raising(argv):
        raise KeyError("bug")

    monkeypatch.setattr(fuzz_onnx, "dojo", raising)
    assert try_import(Mutant("encoder", (), b""), tmp_path, fuse=False).kind == "failed"
    monkeypatch.setattr(fuzz_onnx, "dojo", lambda argv: print("Traceback ...", file=sys.stderr) or 1)
    assert try_import(Mutant("encoder", (), b""), tmp_path, fuse=False).kind == "failed"
