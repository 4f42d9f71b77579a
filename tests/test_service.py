"""The remote runner end to end: `dojo-runner serve` in a subprocess on a loopback port, driven over a
real socket by httpx and by `RemoteRunner`, benchmarking with the real local runner."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from dojo_ir import diagnose, load
from dojo_ir.library import KERNELS
from dojo_ir.tree import Dim
from runner.client import RemoteRunner, RunnerError
from runner.result import RunResult
from runner.service import create_app

RELU = KERNELS["relu"].small()

# i32 division by zero: the compiler makes it a trap (SIGILL) or the CPU faults (SIGFPE); either kills the harness
CRASH = """\
kernel crash(x) -> y

x i32 [8] heap
y i32 [8] heap

8 y[{0}] = x[{0}] / 0
"""

# `{2}` on a line with two scopes, and an unknown array: two positioned errors
INVALID = """\
kernel relu(x) -> y

x f32 [4, 6] heap
y f32 [4, 6] heap

4 6 y[{0},{2}] = max(z[{0},{1}], 0)
"""


@dataclass(frozen=True)
class Service:
    url: str
    token: str
    log: Path

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)


def _serve(directory: Path, *options: str) -> Iterator[Service]:
    token = secrets.token_urlsafe(32)
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    log = directory / "service.log"
    command = [str(Path(sys.executable).with_name("dojo-runner")), "serve", "--port", "0"]
    command += ["--token-file", str(token_file), "--cache-dir", str(directory / "cache"), *options]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = _wait_until_serving(process, log)
        yield Service(url, token, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_serving(process: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + 30
    url = None
    while time.monotonic() < deadline:
        assert process.poll() is None, f"dojo-runner exited:\n{log.read_text()}"
        if url is None:
            for line in log.read_text().splitlines():
                if "listening on " in line:
                    url = line.split("listening on ", 1)[1]
        if url is not None:
            try:
                if httpx.get(f"{url}/v1/health", timeout=5).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"dojo-runner did not answer in 30 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory.mktemp("service"))


def _run(service: Service, **fields: object) -> httpx.Response:
    with service.client() as client:
        return client.post("/v1/run", json=fields)


def test_health_needs_no_token(service: Service) -> None:
    response = httpx.get(f"{service.url}/v1/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": version("perfdojo"), "queue": 0}


def test_targets_lists_native(service: Service) -> None:
    with service.client() as client:
        response = client.get("/v1/targets")
    assert response.status_code == 200
    native = [t for t in response.json()["targets"] if t["name"] == "native"]
    assert native and native[0]["runnable"]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", "Bearer", "Basic {token}", "{token}", "Bearer {token}x"]
)
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/targets"), ("POST", "/v1/run"), ("GET", "/nowhere")])
def test_a_missing_or_wrong_token_is_refused(
    service: Service, authorization: str | None, method: str, path: str
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization.format(token=service.token)}
    response = httpx.request(method, f"{service.url}{path}", headers=headers, json={"program": RELU})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {"error": "missing or wrong bearer token"}


def test_the_token_scheme_is_case_insensitive(service: Service) -> None:
    response = httpx.get(f"{service.url}/v1/targets", headers={"Authorization": f"bearer {service.token}"})
    assert response.status_code == 200


def test_an_oversized_body_is_refused(service: Service) -> None:
    with service.client() as client:
        response = client.post("/v1/run", content=b"x" * ((1 << 20) + 1))
    assert response.status_code == 413
    assert "1048576 bytes" in response.json()["error"]


def test_an_oversized_declared_length_is_refused_before_the_body(service: Service) -> None:
    host, port = service.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        request = (
            f"POST /v1/run HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {service.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n"
        )
        connection.sendall(request.encode())
        status_line = connection.makefile("rb").readline()
    assert status_line.split()[1] == b"413"


def test_an_oversized_chunked_body_is_refused_while_streaming(service: Service) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield b" " * 65536  # no Content-Length: only the streamed size can tell

    with service.client() as client:
        response = client.post("/v1/run", content=chunks())
    assert response.status_code == 413


def test_invalid_ir_gets_every_positioned_error(service: Service) -> None:
    response = _run(service, program=INVALID)
    assert response.status_code == 422
    _, diagnostics = diagnose(INVALID)
    assert len(diagnostics) == 2
    expected = [
        {
            "field": "program",
            "line": d.span.line,
            "col": d.span.col,
            "end_line": d.span.end_line,
            "end_col": d.span.end_col,
            "message": d.message,
            "rule": d.rule,
        }
        for d in diagnostics
    ]
    assert response.json() == {"error": "invalid IR: 2 errors", "errors": expected}
    assert [(e["line"], e["col"]) for e in expected] == [(6, 11), (6, 22)]


def test_a_kernel_with_huge_arrays_is_refused_before_any_is_made(service: Service) -> None:
    huge = RELU.replace("[4, 6]", "[65536, 65536]").replace("4 6 y", "65536 65536 y")
    response = _run(service, program=huge)
    assert response.status_code == 422
    # x and y as the runner stores them, then as the inputs it makes and the outputs it reads
    assert "arrays take 68719476736 bytes" in response.json()["error"]


def test_an_invalid_spec_is_reported_as_the_spec(service: Service) -> None:
    response = _run(service, program=RELU, spec="kernel nothing\n")
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {"spec"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"program": RELU, "source": "int main() { return 0; }"}, "unknown field source"),
        ({"source": "int main() { return 0; }"}, "unknown field source"),
        ({}, "`program` must be"),
        ({"program": 7}, "`program` must be"),
        ({"program": RELU, "target": "vax"}, "unknown target 'vax'"),
        ({"program": RELU, "repeats": 0}, "`repeats` must be an integer from 1 to 1000"),
        ({"program": RELU, "repeats": 1001}, "`repeats` must be"),
        ({"program": RELU, "repeats": "3"}, "`repeats` must be"),
        ({"program": RELU, "repeats": True}, "`repeats` must be"),
        ({"program": RELU, "warmup": -1}, "`warmup` must be an integer from 0 to 1000"),
        ({"program": RELU, "spec": 3}, "`spec` must be"),
    ],
)
def test_bad_fields_are_refused(service: Service, fields: dict, message: str) -> None:
    response = _run(service, **fields)
    assert response.status_code == 422
    assert message in response.json()["error"]


def test_a_target_this_machine_cannot_run_is_refused(service: Service) -> None:
    with service.client() as client:
        idle = [t["name"] for t in client.get("/v1/targets").json()["targets"] if not t["runnable"]]
    if not idle:
        pytest.skip("this machine runs every target")
    response = _run(service, program=RELU, target=idle[0])
    assert response.status_code == 422
    assert f"this machine cannot run target {idle[0]!r}" in response.json()["error"]


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b"\xff", b""])
def test_a_body_that_is_not_a_json_object_is_refused(service: Service, body: bytes) -> None:
    with service.client() as client:
        response = client.post("/v1/run", content=body)
    assert response.status_code == 422
    assert "JSON" in response.json()["error"]


def test_a_library_kernel_runs_and_verifies(service: Service) -> None:
    response = _run(service, program=RELU, repeats=3, warmup=1, spec=RELU)
    assert response.status_code == 200
    result = RunResult.from_json(response.json())
    assert result.ok, result.error
    assert result.target == "native" and result.repeats == 3 and len(result.times) == 3
    assert result.min_s <= result.median_s <= result.max_s


def test_a_crashing_kernel_is_an_error_result_and_the_service_stays_up(service: Service) -> None:
    response = _run(service, program=CRASH, repeats=1, warmup=0)
    assert response.status_code == 200
    result = RunResult.from_json(response.json())
    assert result.error and not result.ok
    assert httpx.get(f"{service.url}/v1/health").json()["status"] == "ok"
    after = _run(service, program=RELU, repeats=1, warmup=0)
    assert RunResult.from_json(after.json()).ok


def test_concurrent_runs_queue_and_none_is_lost(service: Service) -> None:
    _run(service, program=RELU, repeats=1, warmup=0)  # builds once, so the burst measures the queue
    seen: list[tuple[int, float]] = []
    done = threading.Event()

    def probe() -> None:
        # health keeps answering from the event loop while the worker runs the queue
        while not done.is_set():
            start = time.monotonic()
            queue = httpx.get(f"{service.url}/v1/health", timeout=10).json()["queue"]
            seen.append((queue, time.monotonic() - start))
            time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with ThreadPoolExecutor(50) as pool:
            responses = list(pool.map(lambda _: _run(service, program=RELU, repeats=1, warmup=0), range(50)))
    finally:
        done.set()
        prober.join()
    assert [r.status_code for r in responses] == [200] * 50
    assert all(RunResult.from_json(r.json()).ok for r in responses)
    assert max(queue for queue, _ in seen) > 1
    assert max(latency for _, latency in seen) < 2
    assert httpx.get(f"{service.url}/v1/health").json()["queue"] == 0


def test_remote_runner_end_to_end(service: Service) -> None:
    program = load(RELU)
    with RemoteRunner(service.url, service.token) as remote:
        assert remote.health()["status"] == "ok"
        assert "native" in {t["name"] for t in remote.targets()}
        result = remote.run(program, repeats=2, warmup=0, spec=program)
        assert result.ok and len(result.times) == 2
        crashed = remote.run(load(CRASH), repeats=1, warmup=0)
        assert crashed.error and not crashed.ok


def test_remote_runner_raises_the_services_refusals(service: Service) -> None:
    with RemoteRunner(service.url, "wrong") as remote:
        assert remote.health()["status"] == "ok"
        with pytest.raises(RunnerError, match="401 missing or wrong bearer token") as refused:
            remote.targets()
        assert refused.value.status == 401
    with RemoteRunner(service.url, service.token) as remote, pytest.raises(RunnerError, match="unknown target"):
        remote.run(load(RELU), target="vax")


def test_remote_runner_reports_positioned_errors(service: Service) -> None:
    # a Program built by hand (or by a client of another version) may be one the service's checker
    # rejects: here `y` loses a column the body still writes
    program = load(RELU)
    x, y = program.buffers
    program = replace(program, buffers=(x, replace(y, dims=(Dim(4), Dim(5)))))
    with RemoteRunner(service.url, service.token) as remote, pytest.raises(RunnerError) as refused:
        remote.run(program)
    assert refused.value.status == 422
    [(field, diagnostic)] = refused.value.diagnostics
    assert (field, diagnostic.span.line, diagnostic.span.col, diagnostic.rule) == ("program", 7, 11, "out-of-bounds")
    assert "program:7:11: error: index `{1}` of `y` can reach 5" in str(refused.value)


def test_remote_runner_reports_an_unreachable_service() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with (
        RemoteRunner(f"http://127.0.0.1:{port}", "token", timeout_s=5) as remote,
        pytest.raises(RunnerError, match="cannot reach the runner") as unreachable,
    ):
        remote.health()
    assert unreachable.value.status is None


def test_serve_refuses_an_empty_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    (tmp_path / "token").chmod(0o600)
    command = [str(Path(sys.executable).with_name("dojo-runner")), "serve", "--token-file", str(tmp_path / "token")]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert finished.returncode == 1
    assert "token file is empty" in finished.stderr


class _BlockingRunner:
    """Stands in for the local runner where the real one cannot be made to hang briefly: each run
    blocks until released, and records how many runs overlap."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def targets(self) -> list[dict[str, object]]:
        return [{"name": "native", "language": "c", "buildable": True, "runnable": True}]

    def run(self, program, target="native", repeats=10, warmup=2, spec=None) -> RunResult:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.release.wait(30)
        with self.lock:
            self.running -= 1
        return RunResult(target, 1.0, 1.0, 1.0, repeats, 0.0, True, 0.0, None, (1.0,) * repeats)


@contextmanager
def _in_thread(app: ASGIApp) -> Iterator[str]:
    """`app` served by uvicorn on a loopback port from a thread of this process; yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]})
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()


def test_a_run_past_the_limit_is_an_error_and_the_next_does_not_overlap_it() -> None:
    runner = _BlockingRunner()
    app = create_app(runner, "token", run_limit_s=0.3)
    with _in_thread(app) as url, httpx.Client(base_url=url, headers={"Authorization": "Bearer token"}) as client:
        first = client.post("/v1/run", json={"program": RELU})
        assert first.status_code == 200
        assert "exceeded the service's limit of 0.3 s" in first.json()["error"]
        with ThreadPoolExecutor(1) as pool:
            second = pool.submit(client.post, "/v1/run", json={"program": RELU})
            time.sleep(0.2)
            # the first run still holds the worker, so the second waits instead of sharing the machine
            assert client.get("/v1/health").json()["queue"] == 1
            runner.release.set()
            assert second.result().status_code == 200
    assert runner.most == 1
    assert second.result().json()["verified"] is True


# -- hostile requests (issue 16): each is a 422 before any work, never a 500 -------------------------

HEAD = "kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"program": "", "target": ["native"]}', "`target` must be a name"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
        (b'{"program": "", "repeats": ' + b"7" * 5000 + b"}", "not JSON"),
        (b'{"program": "", "target": {"a": 1}}', "`target` must be a name"),
    ],
    ids=["target list", "deep JSON", "5000 digits", "target object"],
)
def test_a_malformed_request_is_a_422(body: bytes, message: str) -> None:
    with _test_client() as client:
        response = client.post("/v1/run", content=body)
    assert response.status_code == 422
    assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("program", "rule"),
    [
        (HEAD + "\n" + "1 " * 331 + "y[0] = x[0]\n", "too-deep"),
        (HEAD + "\n4 y[{0}] = " + " + ".join(["x[{0}]"] * 989) + "\n", "too-deep"),
        (HEAD + "\n4 y[{0}] = " + "exp(" * 2000 + "x[{0}]" + ")" * 2000 + "\n", "too-deep"),
        (HEAD + "\n" + "1" * 5000 + " y[0] = x[0]\n", "too-large"),
        (HEAD + "\n9223372036854775808 y[0] = x[0]\n", "too-large"),
    ],
    ids=["331 scopes", "989 terms", "2000 exp(", "5000 digits", "2**63"],
)
def test_a_hostile_program_is_a_422_with_positioned_errors(program: str, rule: str) -> None:
    with _test_client() as client:
        response = client.post("/v1/run", json={"program": program})
    assert response.status_code == 422
    assert response.json()["errors"][0]["rule"] == rule


def test_a_huge_temporary_is_refused_before_anything_is_allocated() -> None:
    program = HEAD + "t f32 [1000000000000] heap\n\n4 y[{0}] = x[{0}]\n"  # a 4 TB temporary
    runner = _BlockingRunner()
    with _test_client(runner) as client:
        response = client.post("/v1/run", json={"program": program, "spec": program})
    assert response.status_code == 422
    assert "arrays take 4000000000064 bytes" in response.json()["error"]
    assert runner.most == 0


def test_the_ir_is_parsed_in_the_worker_one_request_at_a_time() -> None:
    runner = _BlockingRunner()  # holds the worker until released
    app = create_app(runner, "token", run_limit_s=20)
    with _in_thread(app) as url, httpx.Client(base_url=url, headers={"Authorization": "Bearer token"}) as client:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/v1/run", json={"program": RELU})
            while client.get("/v1/health").json()["queue"] == 0:
                time.sleep(0.01)
            # an invalid program waits for the worker like any run: its parse never overlaps a benchmark
            invalid = pool.submit(client.post, "/v1/run", json={"program": INVALID})
            time.sleep(0.2)
            assert client.get("/v1/health").json()["queue"] == 2 and not invalid.done()
            runner.release.set()
            assert first.result().status_code == 200 and invalid.result().status_code == 422


@contextmanager
def _test_client(runner: _BlockingRunner | None = None) -> Iterator[TestClient]:
    if runner is None:
        runner = _BlockingRunner()
        runner.release.set()
    with TestClient(create_app(runner, "token"), headers={"Authorization": "Bearer token"}) as client:
        yield client


def test_sigterm_removes_the_input_folder(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret-token\n")
    token_file.chmod(0o600)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    log = tmp_path / "service.log"
    command = [str(Path(sys.executable).with_name("dojo-runner")), "serve", "--port", "0",
               "--token-file", str(token_file), "--cache-dir", str(tmp_path / "cache")]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "TMPDIR": str(temporary)})
    try:
        _wait_until_serving(process, log)
        assert [p.name[:12] for p in temporary.iterdir()] == ["dojo-inputs-"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert list(temporary.iterdir()) == []
