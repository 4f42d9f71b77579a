"""How close the C code generator gets good programs to this machine's roofline.

For each kernel a program is derived from the library's spec (at its library shape) by a fixed list
of legal moves, written below: the hand-derived examples (examples/softmax.dojo, examples/matmul.dojo
and matmul made parallel), and for the elementwise, normalisation and contraction kernels the moves
a search would find first: fuse the row scopes, accumulate reductions in registers, keep the row
temporaries on the stack, split the row by 16 lanes (one AVX-512 vector of f32) and vectorize,
parallelize the outer scope. Each is measured with `runner.measure.measure(LocalRunner(), program,
spec=spec)` on the native target (2 warm-up, 10 timed repetitions on fresh inputs, more until 1 s
is timed; the median), verified against its spec, and compared with its roofline bound
(`runner.roofline.bound_s(work(program), machine_limits())`): time / bound, 1.0 is the bound.

    .venv/bin/python bench/codegen_speed.py [KERNEL...] [--label after] [--json OUT.json]
                                             [--compare BEFORE.json]

`--compare` adds the figures of an earlier run (e.g. the code generator before a change, run with
PYTHONPATH pointing at a copy of the old `codegen/`) as a "before" column. Results in
bench/results/codegen_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from dojo_ir import load
from dojo_ir.derivation import replay, spec_path
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply
from runner.local import LocalRunner
from runner.measure import measure
from runner.roofline import bound_s, machine_limits, work

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "codegen_speed.md"


def _vec(op: str, depth: int) -> list[str]:
    """Split the scope at `depth` by 16 and vectorize the new inner scope."""
    return [f"split_scope(op={op}, depth={depth}, factor=16)", f"vectorize_scope(op={op}, depth={depth + 1})"]


def _joins(op: str, n: int) -> list[str]:
    return [f"join_scopes(op={op}, depth=0)"] * n


def _stack(*buffers: str) -> list[str]:
    return [m for b in buffers for m in (f"reuse_dims(buffer={b}, dim=0)", f"set_location(buffer={b}, location=stack)")]


# kernel -> (library kernel, moves); "example:" names a file of examples/ instead
PROGRAMS: dict[str, tuple[str, list[str]]] = {
    "add": ("add", [*_vec("z", 1), "parallelize_scope(op=z, depth=0)"]),
    "mul": ("mul", [*_vec("z", 1), "parallelize_scope(op=z, depth=0)"]),
    "relu": ("relu", [*_vec("y", 1), "parallelize_scope(op=y, depth=0)"]),
    "reducemean": ("reducemean", [*_joins("y#1", 2), "accumulate(op=y#2, depth=1)", *_vec("y_acc#2", 1),
                                  "parallelize_scope(op=y#1, depth=0)"]),
    "softmax": ("example:softmax", []),
    "rmsnorm": ("rmsnorm", [*_joins("ms#1", 3), "accumulate(op=ms#2, depth=1)", *_stack("ms"),
                            *_vec("ms_acc#2", 1), *_vec("y", 1), "parallelize_scope(op=ms#1, depth=0)"]),
    "layernorm": ("layernorm1", [*_joins("mean#1", 6), "accumulate(op=mean#2, depth=1)",
                                 "accumulate(op=var#2, depth=1)", *_stack("mean", "var"),
                                 *_vec("mean_acc#2", 1), *_vec("var_acc#2", 1), *_vec("y", 1),
                                 "parallelize_scope(op=mean#1, depth=0)"]),
    # mean and var need a pass each over x before y can be written: 3 reads and a write of x's size
    "batchnorm": ("batchnorm1", [*_vec("mean#2", 3), *_vec("var#2", 3), *_vec("y", 3),
                                 "parallelize_scope(op=mean#2, depth=0)", "parallelize_scope(op=var#2, depth=0)",
                                 "parallelize_scope(op=y, depth=0)"]),
    "matmul (example, 1 core)": ("example:matmul", []),
    "matmul": ("example:matmul", ["parallelize_scope(op=c#2, depth=0)", "parallelize_scope(op=c#1, depth=0)"]),
}


def derive(name: str) -> tuple:
    """(spec, program) for one row of PROGRAMS."""
    source, moves = PROGRAMS[name]
    if source.startswith("example:"):
        file = ROOT / "examples" / f"{source.split(':')[1]}.dojo"
        program = load(file.read_text())
        spec = load(spec_path(program, file).read_text())
        program = replay(program, spec).states[-1]
    else:
        spec = load(KERNELS[source].text())
        program = spec
    for move in moves:
        program = apply(program, move)
    return spec, program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=list(PROGRAMS))
    parser.add_argument("--label", default="after")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    machine = machine_limits()
    runner = LocalRunner()
    rows = {}
    load_before = os.getloadavg()[0]
    for name in args.kernels:
        spec, program = derive(name)
        bound = bound_s(work(program), machine)
        result = measure(runner, program, spec=spec)
        if result.error is not None:
            raise SystemExit(f"{name}: {result.error}")
        rows[name] = {"median_s": result.median_s, "bound_s": bound, "verified": result.verified,
                      "max_error": result.max_error, "repeats": len(result.times)}
        print(f"{name:26s} {result.median_s * 1e3:9.3f} ms  bound {bound * 1e3:8.3f} ms  "
              f"{result.median_s / bound:6.2f}x  verified {result.verified}", flush=True)
    load_after = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps({"label": args.label, "rows": rows}, indent=1))
    if args.no_write:
        return
    before = json.loads(args.compare.read_text())["rows"] if args.compare else {}
    lines = ["# The C code generator against the roofline", "",
             "`python bench/codegen_speed.py`: each kernel's program (moves in the script) on the native target, "
             "`runner.measure.measure` (median of at least 1 s of timed repetitions on fresh inputs), verified "
             "against its spec; bound from `runner.roofline` (compulsory traffic at the measured bandwidth, or "
             "flops at the f32 FMA peak). time / bound: 1.0 is the roofline.", "",
             f"Machine: {machine.cpu}, {machine.cores} cores, {machine.bandwidth_Bps / 1e9:.1f} GB/s, "
             f"{machine.peak_flops / 1e9:.0f} GFLOP/s f32 FMA ({platform.python_version()}); "
             f"load average {load_before:.2f} before, {load_after:.2f} after.", ""]
    if before:
        lines += ["| kernel | bound (ms) | before (ms) | before / bound | after (ms) | after / bound | verified |",
                  "|---|---:|---:|---:|---:|---:|---|"]
    else:
        lines += ["| kernel | bound (ms) | time (ms) | time / bound | verified |", "|---|---:|---:|---:|---|"]
    for name, row in rows.items():
        b = row["bound_s"]
        cells = [name, f"{b * 1e3:.3f}"]
        if before:
            old = before.get(name)
            cells += [f"{old['median_s'] * 1e3:.3f}", f"{old['median_s'] / b:.2f}"] if old else ["", ""]
        cells += [f"{row['median_s'] * 1e3:.3f}", f"{row['median_s'] / b:.2f}", str(row["verified"])]
        lines.append("| " + " | ".join(cells) + " |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
