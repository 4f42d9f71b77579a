"""Derivations: the `spec`/`move` lines, `dojo apply --record`, `dojo replay`,
`dojo moves --json` and `dojo fuzz`, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dojo_ir import load, to_text
from dojo_ir.derivation import record, replay, verify
from dojo_ir.fuzz import fuzz
from dojo_ir.library import KERNELS

ROOT = Path(__file__).resolve().parent.parent

DERIVED = """kernel softmax(x) -> y

spec "softmax.dojo"
move join_scopes(op=m#1, depth=0)
move join_scopes(op=m#1, depth=0)

x f32 [3, 5] heap
y f32 [3, 5] heap
m f32 [3] heap
e f32 [3, 5] heap
s f32 [3] heap

3 m[{0}] = -inf
| 5 m[{0}] max= x[{0},{1}]
| 5 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
3 s[{0}] = 0
3 5 s[{0}] += e[{0},{1}]
3 5 y[{0},{1}] = e[{0},{1}] / s[{0}]
"""


def dojo(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    return path


def test_a_derivation_prints_after_the_kernel_line_and_round_trips() -> None:
    program = load(DERIVED)
    assert program.derivation.spec == "softmax.dojo"
    assert program.derivation.moves == ("join_scopes(op=m#1, depth=0)",) * 2
    assert to_text(program) == DERIVED


def test_in_a_move_line_a_label_is_not_a_comment_but_a_spaced_hash_is() -> None:
    text = DERIVED.replace("move join_scopes(op=m#1, depth=0)\n\n", "move join_scopes(op=m#1, depth=0)  # fuse\n\n")
    program = load(text)
    assert program.derivation.moves[-1] == "join_scopes(op=m#1, depth=0)"
    assert " fuse" in program.derivation.comments


def test_spec_and_move_are_still_names_for_arrays() -> None:
    text = "kernel k(spec) -> move\n\nspec f32 [2] heap\nmove f32 [2] heap\n\n2 move[{0}] = spec[{0}]\n"
    program = load(text)
    assert program.derivation is None and program.outputs == ("move",)


def test_replay_re_derives_the_file_from_its_spec(spec: Path) -> None:
    assert verify(load(DERIVED), load(spec.read_text())) == []
    states = replay(load(DERIVED), load(spec.read_text())).states
    assert len(states) == 3


def test_replay_names_the_move_that_does_not_apply(spec: Path) -> None:
    text = DERIVED.replace("move join_scopes(op=m#1, depth=0)\n\n", "move swap_scopes(op=s#1, depth=0)\n\n")
    [diagnostic] = verify(load(text), load(spec.read_text()))
    assert diagnostic.span.line == 5
    assert diagnostic.message.startswith("move 2 `swap_scopes(op=s#1, depth=0)` does not apply")


def test_replay_points_at_the_first_line_that_differs(spec: Path) -> None:
    edited = DERIVED.replace("exp(x[{0},{1}] - m[{0}])", "exp(x[{0},{1}])")
    [diagnostic] = verify(load(edited), load(spec.read_text()))
    assert diagnostic.span.line == 15
    assert "the derivation gives `| 5 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])` here" in diagnostic.message


def test_record_appends_to_an_existing_derivation() -> None:
    program = record(load(DERIVED), ["join_scopes(op=s#1, depth=0)"])
    assert program.derivation.moves[-1] == "join_scopes(op=s#1, depth=0)"
    with pytest.raises(ValueError):
        record(load(KERNELS["softmax"].small()), ["join_scopes(op=s#1, depth=0)"])


def test_cli_apply_record_then_replay(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "tuned" / "softmax.dojo"
    out.parent.mkdir()
    moves = ["join_scopes(op=m#1, depth=0)", "join_scopes(op=m#1, depth=0)"]
    assert dojo("apply", str(spec), *moves, "--record", "-o", str(out)).returncode == 0
    assert load(out.read_text()).derivation.spec == "../softmax.dojo"
    assert dojo("replay", str(out)).returncode == 0
    more = dojo("apply", str(out), "join_scopes(op=m#1, depth=0)", "--record", "--write")
    assert more.returncode == 0, more.stderr
    assert len(load(out.read_text()).derivation.moves) == 3
    assert dojo("replay", str(out)).returncode == 0
    out.write_text(out.read_text().replace("= -inf", "= 0"))
    broken = dojo("replay", str(out))
    assert broken.returncode == 1 and f"{out}:" in broken.stdout


def test_cli_apply_refuses_an_illegal_move_and_keeps_the_file(spec: Path) -> None:
    before = spec.read_text()
    result = dojo("apply", str(spec), "swap_scopes(op=m#1, depth=0)", "--write")
    assert result.returncode == 1
    assert "is not legal here" in result.stderr
    assert spec.read_text() == before


def test_cli_apply_record_in_place_without_a_spec_is_refused(spec: Path) -> None:
    result = dojo("apply", str(spec), "join_scopes(op=m#1, depth=0)", "--record", "--write")
    assert result.returncode == 1 and "--out" in result.stderr


def test_cli_moves_json_lists_moves_with_their_lines(spec: Path) -> None:
    rows = json.loads(dojo("moves", str(spec), "--json").stdout)
    assert {"move", "name", "line"} <= set(rows[0])
    assert "join_scopes(op=e, depth=0)" in [r["move"] for r in rows]
    at_line = json.loads(dojo("moves", str(spec), "--json", "--line", "12").stdout)
    assert at_line and all(r["line"] <= 12 <= r["end_line"] for r in at_line)
    for row in rows:
        applied = dojo("apply", str(spec), row["move"])
        assert applied.returncode == 0, (row, applied.stderr)


def test_a_short_fuzz_run_finds_no_change_of_meaning() -> None:
    report = fuzz(list(KERNELS), walks=32, steps=10, seed=7)
    assert report.walks == 32 and report.moves > 200
    assert report.failures == []


def test_cli_fuzz_reports_in_json() -> None:
    result = dojo("fuzz", "softmax", "relu", "--walks", "4", "--steps", "5", "--seed", "1", "--json")
    assert result.returncode == 0
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["walks"] == 4 and summary["failures"] == 0
