"""The `dojo` command line, run as a user would run it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dojo_ir.library import KERNELS

ROOT = Path(__file__).resolve().parent.parent

BROKEN = """kernel k(x) -> y

x f32 [8] heap
y f32 [8] heap

8 y[{0}] = x[{0}+1]
8 y[{1}] = q[{0}]
"""


def dojo(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def softmax(tmp_path: Path) -> Path:
    path = tmp_path / "softmax.dojo"
    path.write_text(KERNELS["softmax"].small())
    return path


def test_check_prints_every_error_with_its_position_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.dojo"
    bad.write_text(BROKEN)
    result = dojo("check", str(bad))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{bad}:6:14: error: index `{{0}}+1` of `x` can reach 8, outside dimension 0 of extent 8 (0 to 7)",
        f"{bad}:7:5: error: {{1}} refers to scope position 1, but this line has scope position 0 only",
        f"{bad}:7:12: error: unknown array `q`; declare it before the body",
    ]


def test_check_passes_a_valid_file_and_reports_an_unreadable_one(softmax: Path, tmp_path: Path) -> None:
    assert dojo("check", str(softmax)).returncode == 0
    missing = dojo("check", str(softmax), str(tmp_path / "missing.dojo"))
    assert missing.returncode == 1
    assert missing.stdout == f"{tmp_path / 'missing.dojo'}:1:1: error: cannot read: No such file or directory\n"


def test_a_file_that_is_not_utf8_is_an_error_at_its_first_bad_byte(tmp_path: Path) -> None:
    binary, torn = tmp_path / "image.dojo", tmp_path / "torn.dojo"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    torn.write_bytes(b"kernel k(x) -> y\nx f32 [4] h\xe9ap\n")
    checked = dojo("check", str(binary), str(torn))
    assert checked.returncode == 1
    assert checked.stdout.splitlines() == [
        f"{binary}:1:1: error: cannot read: not UTF-8 text (byte 0x89 at offset 0)",
        f"{torn}:2:12: error: cannot read: not UTF-8 text (byte 0xe9 at offset 28)",
    ]
    for command in (["fmt"], ["moves"], ["codegen"], ["interp", "--seed", "0", "--out", str(tmp_path / "o.npz")]):
        result = dojo(*command[:1], str(binary), *command[1:])
        assert result.returncode == 1 and result.stderr.startswith(f"{binary}:1:1: error: cannot read"), command


def test_check_verify_replays_derivations_as_the_language_server_does(tmp_path: Path) -> None:
    from tests.lsp.fixtures import derived_file

    derived = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    assert dojo("check", "--verify", str(derived)).returncode == 0
    derived.write_text(derived.read_text().replace("\nx f32", "\nmove parallelize_scope(op=m#1, depth=0)\n\nx f32", 1))
    ours = dojo("check", "--verify", str(derived))
    assert ours.returncode == 1 and f"{derived}:" in ours.stdout and "the derivation gives" in ours.stdout
    theirs = subprocess.run([sys.executable, "-m", "server.lsp", "--check", str(derived), "--verify"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert ours.stdout == theirs.stdout
    assert dojo("check", str(derived)).returncode == 0  # without --verify the derivation is not replayed


def test_fmt_prints_the_canonical_text_and_write_rewrites_the_file(tmp_path: Path) -> None:
    messy = tmp_path / "messy.dojo"
    messy.write_text("kernel  k( x )->y\nx f32 [4] heap\ny f32 [4] heap\n4   y[ {0} ]=x[{0}]*(2)\n")
    canonical = "kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n\n4 y[{0}] = x[{0}] * 2\n"
    assert dojo("fmt", str(messy)).stdout == canonical
    assert dojo("fmt", "--check", str(messy)).returncode == 1
    assert dojo("fmt", "--write", str(messy)).returncode == 0
    assert messy.read_text() == canonical
    assert dojo("fmt", "--check", str(messy)).returncode == 0


def test_fmt_never_touches_a_file_with_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.dojo"
    bad.write_text(BROKEN)
    result = dojo("fmt", "--write", str(bad))
    assert result.returncode == 1
    assert f"{bad}:6:14: error:" in result.stderr
    assert bad.read_text() == BROKEN


def test_fmt_reads_standard_input() -> None:
    result = dojo("fmt", "-", stdin="kernel k(x)->y\nx f32 [2] heap\ny f32 [2] heap\n2 y[{0}]=x[{0}]\n")
    assert result.stdout.endswith("2 y[{0}] = x[{0}]\n")


def test_interp_with_a_seed_saves_inputs_and_outputs(softmax: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    assert dojo("interp", str(softmax), "--seed", "3", "--out", str(out)).returncode == 0
    with np.load(out) as arrays:
        x, y = arrays["x"], arrays["y"]
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, expected / expected.sum(axis=1, keepdims=True), rtol=1e-5)


def test_interp_reads_inputs_by_name(softmax: Path, tmp_path: Path) -> None:
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=np.zeros((3, 5), dtype=np.float32))
    assert dojo("interp", str(softmax), "--inputs", str(inputs), "--out", str(out)).returncode == 0
    with np.load(out) as arrays:
        np.testing.assert_allclose(arrays["y"], np.full((3, 5), 0.2), rtol=1e-6)
        assert set(arrays.files) == {"y"}


def test_interp_rejects_inputs_of_the_wrong_shape(softmax: Path, tmp_path: Path) -> None:
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=np.zeros((5, 3), dtype=np.float32))
    result = dojo("interp", str(softmax), "--inputs", str(inputs), "--out", str(out))
    assert result.returncode == 1
    assert f"{softmax}:" in result.stderr and "x" in result.stderr
    assert not out.exists()


def test_interp_rejects_a_single_array_file_as_inputs(softmax: Path, tmp_path: Path) -> None:
    inputs, out = tmp_path / "in.npy", tmp_path / "out.npz"
    np.save(inputs, np.zeros((3, 5), dtype=np.float32))
    result = dojo("interp", str(softmax), "--inputs", str(inputs), "--out", str(out))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{inputs}: error: cannot read inputs:" in result.stderr and "numpy.savez" in result.stderr
    assert not out.exists()


def copy_kernel(dtype: str = "f32", extent: int = 4, output: str = "y", expression: str = "x[{0}]") -> str:
    return (f"kernel k(x) -> {output}\n\nx {dtype} [{extent}] heap\n{output} {dtype} [{extent}] heap\n\n"
            f"{extent} {output}[{{0}}] = {expression}\n")


@pytest.mark.parametrize("why, text", [
    ("an extent beyond what numpy can allocate", copy_kernel(extent=2**62)),
    ("an integer literal beyond i32 in an i32 operation", copy_kernel("i32", expression="x[{0}] + 99999999999999")),
    ("an array name too long for an .npz archive", copy_kernel(output="a" * 70_000)),
])
def test_interp_turns_what_cannot_be_computed_into_a_positioned_error(tmp_path: Path, why: str, text: str) -> None:
    kernel, out = tmp_path / "k.dojo", tmp_path / "out.npz"
    kernel.write_text(text)
    result = dojo("interp", str(kernel), "--seed", "0", "--out", str(out))
    assert result.returncode == 1, why
    assert re.fullmatch(rf"({re.escape(str(kernel))}:\d+:\d+: error: .+\n)+", result.stderr), result.stderr[-400:]
    assert not out.exists()


@pytest.mark.parametrize("command", [["check"], ["fmt"], ["moves"], ["codegen"], ["interp", "--seed", "0", "--out"]])
def test_a_kernel_nested_deeper_than_the_library_handles_is_a_positioned_error(tmp_path: Path,
                                                                               command: list[str]) -> None:
    deep = tmp_path / "deep.dojo"
    expression = "x[{0}]"
    for _ in range(2000):
        expression = f"exp({expression})"
    deep.write_text(copy_kernel(expression=expression))
    result = dojo(command[0], str(deep), *command[1:], *([str(tmp_path / "o.npz")] if command[0] == "interp" else []))
    assert "Traceback" not in result.stderr, result.stderr[-400:]
    if result.returncode != 0:  # or the library learned to handle it
        first = (result.stdout if command == ["check"] else result.stderr).splitlines()[0]
        assert result.returncode == 1 and re.match(rf"{re.escape(str(deep))}:\d+:\d+: error: ", first), first


def test_tune_searches_the_heuristic_graph_unless_told(tmp_path: Path) -> None:
    from server.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["tune", "k.dojo", "--method", "sa", "-o", "o.dojo"]).graph == "heuristic"
    assert parse(["tune", "k.dojo", "--method", "random", "--graph", "edges", "-o", "o.dojo"]).graph == "edges"
    assert parse(["library", "build", "softmax", "--method", "sa", "-o", "lib"]).graph == "heuristic"
    assert "heuristic (default)" in " ".join(dojo("tune", "--help").stdout.split())


def test_kernels_lists_the_library_and_writes_one_at_a_chosen_shape(tmp_path: Path) -> None:
    listing = dojo("kernels").stdout.splitlines()
    assert [line.split()[0] for line in listing] == list(KERNELS)
    out = tmp_path / "mm.dojo"
    assert dojo("kernels", "matmul", "--shape", "m=4", "k=6", "n=8", "-o", str(out)).returncode == 0
    assert out.read_text() == KERNELS["matmul"].text(m=4, k=6, n=8)
    assert dojo("check", str(out)).returncode == 0
    assert dojo("kernels", "softmax", "--quick").stdout == KERNELS["softmax"].quick()


def test_kernels_rejects_an_unknown_kernel_or_parameter() -> None:
    unknown = dojo("kernels", "nope")
    assert unknown.returncode == 1 and "no kernel `nope`" in unknown.stderr
    bad = dojo("kernels", "matmul", "--shape", "q=3")
    assert bad.returncode == 1 and "q" in bad.stderr


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """`dojo moves FILE | head -1`: the closed pipe ends the command as SIGPIPE would, without a
    traceback (1,638 moves, 120 KB, more than a pipe holds: a write after the close fails)."""
    count = 40
    outputs = ", ".join(f"y{i}" for i in range(count))
    arrays = "".join(f"y{i} f32 [64, 64] heap\n" for i in range(count))
    lines = "".join(f"64 64 y{i}[{{0}},{{1}}] = x[{{0}},{{1}}] * {i}\n" for i in range(count))
    path = tmp_path / "many.dojo"
    path.write_text(f"kernel k(x) -> {outputs}\n\nx f32 [64, 64] heap\n{arrays}\n{lines}")
    process = subprocess.Popen([sys.executable, "-m", "server.cli", "moves", str(path)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().strip()
    process.stdout.close()
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 141 and b"Traceback" not in errors
