"""`dojo-lsp --check`: the diagnostics headless, for CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dojo_ir.library import KERNELS
from tests.lsp.fixtures import derived_file

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "kernel k(x) -> y\nx f32 [4] heap\ny f32 [4] heap\n4 y[{0}] = x[{0}] +\n"


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.lsp", "--check", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_errors_are_printed_with_positions_and_fail(tmp_path: Path):
    bad = tmp_path / "bad.dojo"
    bad.write_text(BROKEN)
    good = tmp_path / "good.dojo"
    good.write_text(KERNELS["add"].small())
    done = check(str(good), str(bad), str(tmp_path / "missing.dojo"))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{bad}:4:20: error: unexpected end of line")
    assert lines[1] == f"{tmp_path / 'missing.dojo'}:1:1: error: cannot read: No such file or directory"
    assert "checked 3 files: errors" in done.stderr


def test_github_annotations(tmp_path: Path):
    bad = tmp_path / "bad.dojo"
    bad.write_text(BROKEN)
    done = check(str(bad), "--format", "github")
    assert done.returncode == 1
    assert done.stdout.startswith(f"::error file={bad},line=4,col=20,endLine=4,endColumn=21,title=dojo syntax::")


def test_verify_replays_derivations_and_compares_numbers(tmp_path: Path):
    assert check("examples/softmax.dojo", "--verify").returncode == 0
    derived = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    text = derived.read_text()
    moved = text.replace("\nx f32", "\nmove parallelize_scope(op=m#1, depth=0)\n\nx f32", 1)
    derived.write_text(moved)  # the derivation says parallel, the program is not: they differ
    done = check(str(derived), "--verify")
    assert done.returncode == 1 and "the derivation gives" in done.stdout
    derived.write_text(text)
    assert check(str(derived), "--verify").returncode == 0


def test_valid_files_pass_quietly(tmp_path: Path):
    good = tmp_path / "good.dojo"
    good.write_text(KERNELS["add"].small())
    done = check(str(good))
    assert done.returncode == 0 and done.stdout == ""


def test_the_server_also_listens_on_tcp():
    import json
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "server.lsp", "--tcp", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                connection = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline and server.poll() is None, "the server did not listen"
                time.sleep(0.1)
        with connection:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
            connection.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            stream = connection.makefile("rb")
            length = int(stream.readline().split(b":")[1])
            while stream.readline().strip():
                pass
            answer = json.loads(stream.read(length))
        capabilities = answer["result"]["capabilities"]
        assert capabilities["codeActionProvider"]["resolveProvider"] is True
        assert set(capabilities["executeCommandProvider"]["commands"]) >= {"dojo.benchmark", "dojo.applyMoves",
                                                                           "dojo.showGeneratedCode"}
    finally:
        server.kill()
        server.wait()


def test_verify_compares_the_numbers_with_the_specs(tmp_path: Path):
    from dojo_ir import load
    from runner.check import same_numbers

    spec = load(KERNELS["softmax"].small())
    derived = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    assert same_numbers(load(derived.read_text()), spec) == []
    [found] = same_numbers(load(derived.read_text().replace("] / s[", "] * s[")), spec)
    assert found.rule == "verify" and "outputs differ from the spec's" in found.message


def test_a_kernel_nested_deeper_than_the_library_handles_is_a_positioned_error(tmp_path: Path):
    deep = tmp_path / "deep.dojo"
    expression = "x[{0}]"
    for _ in range(2000):
        expression = f"exp({expression})"
    deep.write_text(f"kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n\n4 y[{{0}}] = {expression}\n")
    done = check(str(deep), "--verify")
    assert "Traceback" not in done.stderr, done.stderr[-400:]
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and lines  # not vacuous: the nesting limit is an error
    assert all(line.startswith(f"{deep}:") and ": error: " in line for line in lines)
