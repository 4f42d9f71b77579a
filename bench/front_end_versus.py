"""The front end of this tree against an earlier commit's, in one run.

`python bench/front_end_versus.py REV` checks REV out into a temporary git
worktree and times, alternately in fresh processes of both trees:

- the cold and after-an-edit parse + check + print of the 200-line file
  (each tree's own `bench/parse_speed.measure`), medians over 5 processes;
- `check` alone of long files from bench/check_speed.py (2,000 to 8,000 lines),
  the best of 2 processes.

Alternating keeps both under the same load, so the ratios mean something on a
shared machine where the absolute times do not. Writes
bench/results/front_end_versus.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.check_speed import SHAPES  # noqa: E402
from bench.sections import machine  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "front_end_versus.md"
ROUNDS = 5
LINES = (2000, 4000, 8000)

_PARSE = ("import sys, json; sys.path.insert(0, 'bench'); from parse_speed import measure; "
          "print(json.dumps(measure(20)))")
_CHECK = ("import sys, time; from dojo_ir import parse_with_diagnostics, check; "
          "program, _ = parse_with_diagnostics(open(sys.argv[1]).read()); "
          "started = time.perf_counter(); check(program); print(time.perf_counter() - started)")


def _run(tree: Path, code: str, *args: str) -> str:
    environment = {"PYTHONPATH": str(tree), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=tree, env=environment, capture_output=True,
                          text=True, check=True, timeout=900).stdout.strip().splitlines()[-1]


def compare(before: Path, after: Path, scratch: Path) -> str:
    trees = {"before": before, "after": after}
    parse: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(ROUNDS):
        for name, tree in trees.items():
            parse[name].append(json.loads(_run(tree, _PARSE)))
    rows = ["| case | before | after | before / after |", "|---|---|---|---|"]
    for key, case in (("cold_ms", "200-line file, cold"), ("edit_ms", "200-line file, after a one-line edit")):
        b, a = (statistics.median(r[key] for r in parse[name]) for name in trees)
        rows.append(f"| {case} | {b:.1f} ms | {a:.1f} ms | {b / a:.2f} |")
    for lines in LINES:
        for shape, make in SHAPES.items():
            file = scratch / f"{shape.replace(' ', '_')}-{lines}.dojo"
            file.write_text(make(lines))
            b, a = (min(float(_run(tree, _CHECK, str(file))) for _ in range(2)) for tree in trees.values())
            rows.append(f"| `check`, {shape}, {lines:,} lines | {b:.2f} s | {a:.2f} s | {b / a:.1f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dojo-versus-") as scratch:
        before = Path(scratch) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before), args.rev], check=True)
        try:
            table = compare(before, ROOT, Path(scratch))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], capture_output=True,
                            text=True, check=True).stdout.strip()
    report = (f"# The front end against {commit}\n\n`python bench/front_end_versus.py {args.rev}`: both trees timed "
              f"alternately in fresh processes, so under the same load. {machine()}\n\n{table}\n")
    RESULTS.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
