"""Kernels written by an outside user from FORMAT.md alone.

tests/foreign/valid/*.dojo   must pass `dojo check` and, run through `dojo interp`,
                             agree with an independent numpy reference below.
tests/foreign/invalid/*.dojo each hold one deliberate error; `dojo check` must exit 1 and
                             report it at the LINE:COL recorded in INVALID below.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dojo_ir import interpret, load, to_text
from dojo_ir.moves import apply, find

ROOT = Path(__file__).resolve().parent.parent  # /work/main
FOREIGN = ROOT / "tests" / "foreign"
VALID_DIR = FOREIGN / "valid"
INVALID_DIR = FOREIGN / "invalid"


def _dojo_cmd() -> list[str]:
    script = Path(sys.executable).with_name("dojo")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "server.cli"]


def _run(args: list[str], cwd: Path = FOREIGN) -> subprocess.CompletedProcess:
    return subprocess.run(_dojo_cmd() + args, cwd=cwd, capture_output=True, text=True, timeout=120)


ERR_RE = re.compile(r"^(?P<file>\S+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$")


def _errors(output: str) -> dict[str, list[tuple[int, int, str]]]:
    out: dict[str, list[tuple[int, int, str]]] = {}
    for line in output.splitlines():
        m = ERR_RE.match(line.strip())
        if m:
            out.setdefault(m["file"], []).append((int(m["line"]), int(m["col"]), m["msg"]))
    return out


# ----------------------------------------------------------------------------------------------
# helpers for references
# ----------------------------------------------------------------------------------------------

def tdiv(a, b):
    """Integer division truncating toward zero (C semantics)."""
    a = np.asarray(a)
    b = np.asarray(b)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q).astype(np.result_type(a, b))


F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64


def rnd(rng, shape, dtype, lo=-2.0, hi=2.0, nonzero=False):
    if np.issubdtype(dtype, np.integer):
        v = rng.integers(int(lo), int(hi) + 1, size=shape)
        if nonzero:
            v = np.where(v == 0, 1, v)
        return v.astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# ----------------------------------------------------------------------------------------------
# valid kernels: name -> (input generator, reference, output dtypes)
# every reference computes from the inputs in float64 / exact integers unless noted
# ----------------------------------------------------------------------------------------------

def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _v27_ref(d):
    x, w = d["x"].astype(F64), d["w"].astype(F64)
    y = x.copy()
    y[:7] = 2 * x[1:]
    z = x.copy()
    z[1:] = x[:7] + 1
    s = max(x.sum(), w.max())
    lit = np.array([x[7], x[1] + x[6], x[3] + x[4], x[5] + x[2]])
    return {"y": y, "z": z, "s": np.array(s), "lit": lit}


def _v11_ref(d):
    x = d["x"].astype(I64)
    i = np.arange(8)[:, None]
    j = np.arange(4)[None, :]
    return {
        "s": (x * j).sum(axis=1),
        "p": np.prod(x, axis=0),
        "mx": np.array(max(-1000000, (x - i * 1000).max())),
        "ix": tdiv((i * 4 + j) * 100000000, 3) - x,
    }


def _v10_ref(d):
    a, b = d["a"].astype(I64), d["b"].astype(I64)
    i = np.arange(12)
    return {
        "q": tdiv(a, b),
        "r": a - tdiv(a, b) * b,
        "m": np.maximum(np.abs(a), -b) + np.minimum(a, b) * 3,
        "v": tdiv(i - 6, 4) + tdiv(-a, 5),
        "lo": np.array(min(1000, (a * i).min())),
    }


def _v24_ref(d):
    x, g, b = (d[k].astype(F64) for k in ("x", "g", "b"))
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return {"y": (x - mu) / np.sqrt(var + 1e-5) * g + b}


def _v23_ref(d):
    x, w, bias = d["x"].astype(F64), d["w"].astype(F64), float(d["bias"])
    y = np.full((6, 8), bias)
    for p in range(3):
        for q in range(2):
            y += x[p:p + 6, q:q + 8] * w[p, q]
    return {"y": y, "r": np.maximum(y, 0)}


VALID: dict[str, tuple] = {
    "v01_elementwise": (
        lambda r: {"a": rnd(r, (4, 6), F32), "b": rnd(r, (4, 6), F32)},
        lambda d: {"c": d["a"] * d["b"] + d["a"] - d["b"] / 2},
    ),
    "v02_broadcast": (
        lambda r: {"x": rnd(r, (5, 7), F32), "r": rnd(r, (5,), F32), "c": rnd(r, (7,), F32),
                   "s": rnd(r, (), F32)},
        lambda d: {"z": d["x"] - d["r"][:, None] * d["c"][None, :] + d["s"]},
    ),
    "v03_constants": (
        lambda r: {"x": rnd(r, (10,), F32)},
        lambda d: {"y": d["x"] * 0.5 + 1e-5 - 3 + d["x"] * 2.25 + d["x"],
                   "lo": np.array(d["x"].min()), "hi": np.array(d["x"].max())},
    ),
    "v04_index_value": (
        lambda r: {"x": rnd(r, (3, 5), F32)},
        lambda d: {"y": d["x"] * np.arange(3)[:, None] + np.arange(5)[None, :] / 2,
                   "iota": (np.arange(15).reshape(3, 5) - 7).astype(I32)},
    ),
    "v05_expr_location": (
        lambda r: {"x": rnd(r, (16,), F32)},
        lambda d: {"m": d["x"].reshape(4, 4), "t": d["x"].reshape(4, 4).T, "r": d["x"][::-1],
                   "r2": d["x"][::-1], "w": np.stack([d["x"][i:i + 4] for i in range(13)]),
                   "odd": d["x"][1::2]},
    ),
    "v06_reductions": (
        lambda r: {"x": rnd(r, (6, 8), F32, 0.5, 1.5)},
        lambda d: {"s": d["x"].astype(F64).sum(1), "p": d["x"].astype(F64).prod(1),
                   "mx": d["x"].max(1), "mn": d["x"].min(1)},
    ),
    "v07_functions": (
        lambda r: {"x": rnd(r, (12,), F32), "y": rnd(r, (12,), F32)},
        lambda d: {"e": np.exp(d["x"].astype(F64)), "l": np.log(np.abs(d["x"].astype(F64)) + 1),
                   "q": np.sqrt(np.abs(d["x"].astype(F64))), "a": np.abs(d["x"] - d["y"]),
                   "t": np.tanh(2 * d["x"].astype(F64)), "hi": np.maximum(d["x"], d["y"]),
                   "lo": np.minimum(d["x"], -d["y"])},
    ),
    "v08_scalars": (
        lambda r: {"x": rnd(r, (16,), F32), "alpha": rnd(r, (), F32, 0.5, 2.0)},
        lambda d: (lambda s: {"y": (d["x"].astype(F64) - s / 16) ** 2 * float(d["alpha"]),
                              "total": np.array(s * float(d["alpha"]))})(d["x"].astype(F64).sum()),
    ),
    "v09_f64": (
        lambda r: {"a": rnd(r, (16,), F64), "b": rnd(r, (16,), F64)},
        lambda d: (lambda dd: {"d": np.array(dd),
                               "n": d["a"] / np.sqrt(dd * dd + 1e-12) + np.exp(d["b"] * 0.1)})(
            float(np.dot(d["a"], d["b"]))),
    ),
    "v10_int32": (
        lambda r: {"a": rnd(r, (12,), I32, -50, 50), "b": rnd(r, (12,), I32, -9, 9, nonzero=True)},
        _v10_ref,
    ),
    "v11_int64": (lambda r: {"x": rnd(r, (8, 4), I64, -5, 5)}, _v11_ref),
    "v12_mixed_dtypes": (
        lambda r: {"k": rnd(r, (8,), I32, -20, 20), "x": rnd(r, (8,), F32)},
        lambda d: {"h": d["k"].astype(F64) / 2 + d["x"],
                   "w": d["x"].astype(F64) * 0.1 + d["k"].astype(F64) / 3},
    ),
    "v13_reuse_dims": (
        lambda r: {"x": rnd(r, (8, 4), F32)},
        lambda d: {"y": (2 * np.exp(d["x"].astype(F64)) + 1) * d["x"]},
    ),
    "v14_multi_array_buffer": (
        lambda r: {"x": rnd(r, (8,), F32)},
        lambda d: {"y": 2 * d["x"] + 1, "z": (d["x"] - 3) * (2 * d["x"] + 1)},
    ),
    "v15_softmax": (lambda r: {"x": rnd(r, (6, 10), F32, -4, 4)},
                    lambda d: {"y": _softmax(d["x"].astype(F64))}),
    "v16_deep_nest": (
        lambda r: {"x": rnd(r, (2, 3, 2, 2, 3, 2), F32)},
        lambda d: {"y": np.transpose(d["x"], (0, 2, 1, 3, 4, 5)) + np.arange(2),
                   "s": d["x"].astype(F64).sum(axis=(1, 2, 3, 4, 5))},
    ),
    "v17_suffixes": (
        lambda r: {"x": rnd(r, (8, 16), F32), "w": rnd(r, (16,), F32)},
        lambda d: {"y": d["x"] * d["w"][None, :],
                   "n": np.sqrt((d["x"].astype(F64) ** 2).sum(1))},
    ),
    "v18_stack": (
        lambda r: {"x": rnd(r, (4, 8), F32)},
        lambda d: {"y": (d["x"][:, ::-1].astype(F64) ** 2 + d["x"]) * 0.5},
    ),
    "v19_transpose": (
        lambda r: {"x": rnd(r, (5, 9), F32)},
        lambda d: {"y": d["x"].T, "z": 3 * d["x"].T.astype(F64)},
    ),
    "v20_matvec": (
        lambda r: {"A": rnd(r, (8, 6), F32), "x": rnd(r, (6,), F32), "b": rnd(r, (8,), F32)},
        lambda d: {"y": d["b"] + d["A"].astype(F64) @ d["x"].astype(F64)},
    ),
    "v21_outer_matmul": (
        lambda r: {"u": rnd(r, (5,), F32), "v": rnd(r, (7,), F32), "A": rnd(r, (4, 6), F32),
                   "B": rnd(r, (6, 3), F32)},
        lambda d: {"O": np.outer(d["u"], d["v"]),
                   "C": d["A"].astype(F64) @ d["B"].astype(F64)},
    ),
    "v22_conv1d": (
        lambda r: {"x": rnd(r, (12,), F32), "w": rnd(r, (3,), F32)},
        lambda d: {"y": np.array([d["x"][i:i + 3].astype(F64) @ d["w"] for i in range(10)]),
                   "y2": np.array([d["x"][2 * i:2 * i + 3].astype(F64) @ d["w"] for i in range(5)])},
    ),
    "v23_conv2d": (
        lambda r: {"x": rnd(r, (8, 9), F32), "w": rnd(r, (3, 2), F32), "bias": rnd(r, (), F32)},
        _v23_ref,
    ),
    "v24_layernorm": (
        lambda r: {"x": rnd(r, (4, 16), F32), "g": rnd(r, (16,), F32), "b": rnd(r, (16,), F32)},
        _v24_ref,
    ),
    "v25_gpu_shared": (lambda r: {"x": rnd(r, (4, 8), F32)}, lambda d: {"y": 2 * d["x"] + 1}),
    "v26_tabs_comments": (lambda r: {"x": rnd(r, (6,), F32)},
                          lambda d: {"y": (d["x"].astype(F64) + 1) ** 2}),
    "v27_dependence_edges": (lambda r: {"x": rnd(r, (8,), F32), "w": rnd(r, (8,), F32, -1, 5)},
                             _v27_ref),
    "v28_precedence": (
        lambda r: {"x": rnd(r, (6,), F32), "k": rnd(r, (6,), I32, -10, 10)},
        lambda d: {"y": (lambda x: x / 2 / 4 - x - 1 + -x * x + 2 * (x - 3))(d["x"].astype(F64)),
                   "q": 4 + d["k"].astype(I64) - tdiv(d["k"].astype(I64) - 5, 2)},
    ),
    "v29_spacing_tworeds": (
        lambda r: {"x": rnd(r, (8,), F32), "w": rnd(r, (8,), F32)},
        lambda d: {"m": np.array(max(d["x"].max(), 2 * d["w"].max())),
                   "s": np.array(d["x"].astype(F64).sum() + d["w"].astype(F64).sum())},
    ),
    "v30_reuse_accumulator": (
        lambda r: {"x": rnd(r, (8, 4), F32)},
        lambda d: (lambda x, acc: {"y": 2 * acc,
                                   "z": ((x - acc[:, None] / 4) ** 2 + 1) * 2 - x})(
            d["x"].astype(F64), d["x"].astype(F64).sum(1)),
    ),
}

# declared dtype of every output, read off the .dojo files by hand
OUT_DTYPES = {
    "v04_index_value": {"iota": I32},
    "v09_f64": {"d": F64, "n": F64},
    "v10_int32": {k: I32 for k in ("q", "r", "m", "v", "lo")},
    "v11_int64": {k: I64 for k in ("s", "p", "mx", "ix")},
    "v12_mixed_dtypes": {"h": F32, "w": F64},
    "v28_precedence": {"y": F32, "q": I32},
}


# ----------------------------------------------------------------------------------------------
# invalid kernels: name -> (line, col, max number of errors reported for the file)
# positions are 1-based, at the first character of the offending construct
# ----------------------------------------------------------------------------------------------

INVALID: dict[str, tuple[int, int, int]] = {
    "i01_syntax_bad_char": (4, 19, 1),          # `$`
    "i02_syntax_missing_operand": (4, 21, 1),   # `*` where an operand is expected
    "i03_unknown_array": (4, 12, 1),            # `q`
    "i04_wrong_index_count": (4, 12, 1),        # `x[{0},{0}]` on a 1-D array
    "i05_scope_ref_beyond": (4, 14, 1),         # `{1}` on a line with one scope
    "i06_nonaffine_product": (4, 20, 1),        # `{0}*{1}`
    "i07_nonaffine_division": (4, 14, 1),       # `{0}/2`
    "i08_orphan_pipe": (5, 1, 1),               # first body line starts with `|`
    "i09_pipe_continues_op": (6, 3, 1),         # second `|` refers to line 5's operation
    "i10_pipe_wrong_parent": (6, 3, 1),         # `|` continues a scope under another parent
    "i11_unknown_dtype": (3, 3, 1),             # `f16`
    "i12_unknown_location": (3, 11, 1),         # `global`
    "i13_write_input": (5, 3, 1),               # `x[{0}] = ...`
    "i14_indirection": (5, 14, 1),              # `idx[{0}]` inside an index
    "i15_data_dependent_range": (5, 3, 1),      # `n[{0}]` as a scope size
    "i16_dependent_iteration": (6, 14, 1),      # read `z[{0}]` of the previous iteration's write
    "i17_reduction_read_in_loop": (7, 12, 1),   # plain read of a running accumulator
    "i18_control_flow": (5, 1, 1),              # `while`
    "i19_out_of_bounds": (4, 14, 1),            # `{0}+1` reaches 8
    "i20_dk_on_input": (2, 8, 1),               # `8:2` on an input
    "i21_dk_k_not_less_than_d": (4, 8, 1),      # `4:4`
    "i22_float_literal_in_int": (4, 21, 1),     # `0.5` in an i32 op
    "i23_exp_in_int": (4, 12, 1),               # `exp` in an i32 op
    "i24_shared_outside_block": (5, 3, 2),      # both accesses to `t` lie outside `:b`
    "i25_keyword_as_name": (4, 1, 1),           # buffer named `exp`
    "i26_no_output": (1, 1, 1),                 # `kernel k(x)` without `->`
    "i27_bad_suffix": (4, 3, 1),                # `4:x`
    "i28_scope_size_zero": (4, 3, 1),           # `0`
    "i29_wrong_arity": (4, 12, 1),              # `max(` with one argument
    "i30_dk_on_output": (3, 8, 1),              # `8:1` on an output
    "i31_dependent_nested": (6, 18, 1),         # `t[{1}]` written by earlier outer iterations
    "i32_mixed_reduction_ops": (6, 3, 2),       # `max=` on an accumulator that `+=` also updates
    "i33_input_buffer_shared": (2, 1, 1),       # buffer holding input `x` also holds `t`
    "i34_scope_value_beyond": (4, 21, 1),       # `{1}` used as a value on a one-scope line
}


# ----------------------------------------------------------------------------------------------
# fixtures: one `dojo check` call per directory
# ----------------------------------------------------------------------------------------------

def _rel(d: Path, name: str) -> str:
    return f"{d.name}/{name}.dojo"


@pytest.fixture(scope="module")
def valid_check():
    files = [_rel(VALID_DIR, n) for n in VALID]
    p = _run(["check", *files])
    return p, _errors(p.stdout + p.stderr)


@pytest.fixture(scope="module")
def invalid_check():
    files = [_rel(INVALID_DIR, n) for n in INVALID]
    p = _run(["check", *files])
    return p, _errors(p.stdout + p.stderr)


def test_all_files_listed():
    assert sorted(p.stem for p in VALID_DIR.glob("*.dojo")) == sorted(VALID)
    assert sorted(p.stem for p in INVALID_DIR.glob("*.dojo")) == sorted(INVALID)


def test_valid_batch_exit_code(valid_check):
    p, _ = valid_check
    assert p.returncode == 0, p.stdout + p.stderr


def test_invalid_batch_exit_code(invalid_check):
    p, _ = invalid_check
    assert p.returncode == 1, p.stdout + p.stderr


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_checks(name, valid_check):
    p, errs = valid_check
    assert not errs.get(_rel(VALID_DIR, name)), p.stdout + p.stderr


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_interp(name, tmp_path):
    gen, ref = VALID[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    inputs = gen(rng)
    np.savez(tmp_path / "in.npz", **inputs)
    p = _run(["interp", str(VALID_DIR / f"{name}.dojo"), "--inputs", str(tmp_path / "in.npz"),
              "--out", str(tmp_path / "out.npz")])
    assert p.returncode == 0, p.stdout + p.stderr
    got = dict(np.load(tmp_path / "out.npz"))
    _agree(name, got, ref({k: v.copy() for k, v in inputs.items()}))


def _agree(name: str, got: dict, want: dict) -> None:
    dtypes = OUT_DTYPES.get(name, {})
    for k, w in want.items():
        assert k in got, f"output {k} missing; got {sorted(got)}"
        g = got[k]
        w = np.asarray(w)
        assert g.shape == w.shape, (k, g.shape, w.shape)
        dt = dtypes.get(k, F32)
        assert g.dtype == dt, (k, g.dtype, dt)
        if np.issubdtype(dt, np.integer):
            np.testing.assert_array_equal(g, w.astype(dt), err_msg=k)
        elif dt == F64:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=k)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("name", sorted(VALID))
def test_random_walks_of_legal_moves_keep_the_meaning(name):
    """Moves on kernels we did not write: every step of a random walk of listed
    moves still agrees with the independent numpy reference."""
    program = load((VALID_DIR / f"{name}.dojo").read_text())
    gen, ref = VALID[name]
    inputs = gen(np.random.default_rng(sum(map(ord, name))))
    want = ref({k: v.copy() for k, v in inputs.items()})
    rng = random.Random(name)
    for _ in range(8):
        legal = find(program)
        if not legal:
            break
        move = rng.choice(legal)
        program = load(to_text(apply(program, move)))
        _agree(name, interpret(program, inputs), want)


def test_a_walk_through_the_command_line_keeps_the_meaning(tmp_path):
    """`dojo moves --json` then `dojo apply --write`, as an outside tool would drive it."""
    name = "v21_outer_matmul"
    work = tmp_path / f"{name}.dojo"
    work.write_text((VALID_DIR / f"{name}.dojo").read_text())
    gen, ref = VALID[name]
    inputs = gen(np.random.default_rng(1))
    np.savez(tmp_path / "in.npz", **inputs)
    rng = random.Random(3)
    for _ in range(4):
        moves = json.loads(_run(["moves", str(work), "--json"]).stdout)
        assert _run(["apply", str(work), rng.choice(moves)["move"], "--write"]).returncode == 0
        assert _run(["interp", str(work), "--inputs", str(tmp_path / "in.npz"),
                     "--out", str(tmp_path / "out.npz")]).returncode == 0
        _agree(name, dict(np.load(tmp_path / "out.npz")), ref({k: v.copy() for k, v in inputs.items()}))


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_reported(name, invalid_check):
    p, errs = invalid_check
    line, col, max_errors = INVALID[name]
    rel = _rel(INVALID_DIR, name)
    out = p.stdout + p.stderr
    mine = errs.get(rel, [])
    assert mine, f"no error reported for {rel}:\n{out}"
    assert f"{rel}:{line}:{col}: error:" in out, f"expected {rel}:{line}:{col}, got {mine}"
    assert len(mine) <= max_errors, f"one mistake, but {len(mine)} errors: {mine}"
