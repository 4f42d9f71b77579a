"""`dojo-runner serve`: the local runner behind HTTP, for benchmarking on another machine.

    GET  /v1/health   {"status": "ok", "version": ..., "queue": n}       (no token needed)
    GET  /v1/targets  {"targets": [{"name", "language", "buildable", "runnable"}, ...]}
    POST /v1/run      {"program": ".dojo text", "target", "repeats", "warmup", "spec"} -> RunResult JSON

Every path but health needs `Authorization: Bearer TOKEN`. Health is open so that a load balancer or
`curl` can probe liveness; it tells nothing but the version and the queue length.

The service takes IR only and generates the source itself: there is no field for source text, and
unknown fields are refused, so a client can never make it compile code of the client's choosing.

Runs are benchmarks, so they must not time each other: one worker thread runs them one at a time in
arrival order while the event loop keeps answering (health, targets, queued requests). A kernel that
crashes or hangs is the local runner's to contain (it runs kernels in subprocesses with time limits);
the service adds an overall limit per run so that no request waits forever.

Status codes: 200 with a RunResult (also when the kernel failed: see its `error`), 401 bad token,
413 body over `--max-body`, 422 bad request (`{"error": message}`, plus positioned `errors` for
invalid IR; also a kernel whose arrays, temporaries included, exceed `--max-data`), 503 queue full.

Every request is bounded before work starts: its body by `--max-body`, its JSON to the five fields
with their types, its arrays by `--max-data`. The IR is parsed and checked in the worker, one request
at a time, and counts against `--run-limit` (the parser's own limits are in docs/format.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from dojo_ir import Program, diagnose
from dojo_ir.collector import for_long_kernels
from dojo_ir.interpreter import memory_bytes
from runner.client import read_token
from runner.local import LocalRunner
from runner.result import RunResult

MAX_BODY = 1 << 20
MAX_DATA = 4 << 30
REPEATS = range(1, 1001)
WARMUP = range(0, 1001)
_FIELDS = {"program", "target", "repeats", "warmup", "spec"}


class RequestError(HTTPException):
    """A refused request; `body` is the JSON the client gets."""

    def __init__(self, status: int, message: str, **extra: Any):
        super().__init__(status, message)
        self.body = {"error": message, **extra}


@dataclass(frozen=True)
class RunRequest:
    """The fields of a request, checked but not yet parsed as IR."""

    program: str
    target: str
    repeats: int
    warmup: int
    spec: str | None


def parse_run_request(body: bytes, targets: list[dict[str, Any]]) -> RunRequest:
    """The request in `body`, checked field by field; raise RequestError (422) on the first problem.
    Cheap enough for the event loop: JSON of at most the body limit, and no IR parsed yet."""
    try:
        fields = json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:  # also a number beyond Python's digit limit
        raise RequestError(422, f"the body is not JSON: {str(error)[:200]}") from None
    except RecursionError:
        raise RequestError(422, "the body is not a request: it nests too deeply") from None
    if not isinstance(fields, dict):
        raise RequestError(422, "the body must be a JSON object")
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise RequestError(422, f"unknown field {', '.join(unknown)[:200]}; expected {', '.join(sorted(_FIELDS))}")
    if not isinstance(fields.get("program"), str):
        raise RequestError(422, "`program` must be the .dojo text of the kernel")
    target = fields.get("target", "native")
    _check_target(target, targets)
    repeats = _integer(fields, "repeats", 10, REPEATS)
    warmup = _integer(fields, "warmup", 2, WARMUP)
    spec = fields.get("spec")
    if spec is not None and not isinstance(spec, str):
        raise RequestError(422, "`spec` must be .dojo text or null")
    return RunRequest(fields["program"], target, repeats, warmup, spec)


def load_programs(request: RunRequest, max_data: int = MAX_DATA) -> tuple[Program, Program | None]:
    """The program and the spec of `request`, parsed and checked; raise RequestError (422) with every
    positioned error when the IR is invalid, or when the arrays would take more than `max_data`."""
    program, errors = _load("program", request.program)
    spec = None
    if request.spec is not None:
        spec, spec_errors = _load("spec", request.spec)
        errors += spec_errors
    if errors:
        raise RequestError(422, f"invalid IR: {len(errors)} error{'s' * (len(errors) != 1)}", errors=errors)
    assert program is not None
    # the runner makes the inputs, reads the outputs and interprets small specs in this process, so a
    # few lines of IR declaring huge arrays (temporaries too) would take the service down
    data = max(memory_bytes(p) for p in (program, spec) if p is not None)
    if data > max_data:
        raise RequestError(422, f"the kernel's arrays take {data} bytes; this runner takes {max_data}")
    return program, spec


def _check_target(target: object, targets: list[dict[str, Any]]) -> None:
    runnable = [t["name"] for t in targets if t["runnable"]]
    if not isinstance(target, str):
        raise RequestError(422, f"`target` must be a name; this runner runs {', '.join(runnable) or 'nothing'}")
    if target not in runnable:
        # a target this machine knows but cannot run is refused too: a result would only say so later
        problem = "unknown target" if target not in {t["name"] for t in targets} else "this machine cannot run target"
        raise RequestError(422, f"{problem} {target[:100]!r}; this runner runs {', '.join(runnable) or 'nothing'}")


def _integer(fields: dict[str, Any], name: str, default: int, allowed: range) -> int:
    value = fields.get(name, default)
    # bool is an int subclass, but `"repeats": true` is a mistake, not a count
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise RequestError(422, f"`{name}` must be an integer from {allowed.start} to {allowed.stop - 1}")
    return value


def _load(field: str, text: str) -> tuple[Program | None, list[dict[str, Any]]]:
    program, diagnostics = diagnose(text)
    errors = [
        {
            "field": field,
            "line": d.span.line,
            "col": d.span.col,
            "end_line": d.span.end_line,
            "end_col": d.span.end_col,
            "message": d.message,
            "rule": d.rule,
        }
        for d in diagnostics
    ]
    return program, errors


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed `limit`: from Content-Length before
    reading anything, and while streaming for a chunked body or one longer than it declared."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise RequestError(413, f"the body exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class BearerAuth:
    """401 for every request to a path outside `open_paths` without the token. The comparison takes
    the same time wherever the guess goes wrong."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str]):
        self.app = app
        self.token = token.encode()
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.open_paths:
            scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                response = JSONResponse(
                    {"error": "missing or wrong bearer token"}, 401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Service:
    """The endpoints around one LocalRunner and the single worker thread that runs its benchmarks."""

    def __init__(self, runner: LocalRunner, max_body: int, max_data: int, run_limit_s: float, max_queue: int):
        self.runner = runner
        self.max_body = max_body
        self.max_data = max_data
        self.run_limit_s = run_limit_s
        self.max_queue = max_queue
        # what this machine can build does not change while it serves; probing once keeps requests cheap
        self.targets = runner.targets()
        self.version = version("perfdojo")
        self.queue = 0
        self.worker: ThreadPoolExecutor | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        # one worker: runs queue in arrival order and never share the machine, even after a timeout
        # leaving waits for a run still going, which the local runner's own limits bound
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dojo-bench") as self.worker:
            yield

    async def health(self, _: Request) -> Response:
        return JSONResponse({"status": "ok", "version": self.version, "queue": self.queue})

    async def list_targets(self, _: Request) -> Response:
        return JSONResponse({"targets": self.targets})

    async def run(self, request: Request) -> Response:
        body = await read_body(request, self.max_body)
        job = parse_run_request(body, self.targets)
        if self.queue >= self.max_queue:
            raise RequestError(503, f"the queue is full ({self.max_queue} runs); try again later")
        self.queue += 1
        try:
            result = await self._benchmark(job)
        finally:
            self.queue -= 1
        return JSONResponse(result.to_json())

    async def _benchmark(self, job: RunRequest) -> RunResult:
        assert self.worker is not None, "the service runs only inside its lifespan"
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def work() -> RunResult:
            loop.call_soon_threadsafe(started.set)
            # parsing and checking a large program takes seconds: here it stalls no health check,
            # disturbs no benchmark, and counts against the run's limit
            program, spec = load_programs(job, self.max_data)
            return self.runner.run(program, target=job.target, repeats=job.repeats, warmup=job.warmup, spec=spec)

        future = asyncio.wrap_future(self.worker.submit(work))
        try:
            # the limit counts from the start of this run, not from the end of the queue
            await started.wait()
            # shielded: a run past the limit keeps the worker until it ends, so the next cannot overlap it
            return await asyncio.wait_for(asyncio.shield(future), self.run_limit_s)
        except TimeoutError:
            return RunResult.failed(job.target, f"the run exceeded the service's limit of {self.run_limit_s:g} s")
        except asyncio.CancelledError:
            future.cancel()
            raise


async def _error(_: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    body = error.body if isinstance(error, RequestError) else {"error": error.detail}
    return JSONResponse(body, error.status_code, headers=error.headers)


def create_app(
    runner: LocalRunner,
    token: str,
    max_body: int = MAX_BODY,
    max_data: int = MAX_DATA,
    run_limit_s: float = 600,
    max_queue: int = 256,
) -> Starlette:
    service = Service(runner, max_body, max_data, run_limit_s, max_queue)
    routes = [
        Route("/v1/health", service.health),
        Route("/v1/targets", service.list_targets),
        Route("/v1/run", service.run, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _error}, lifespan=service.lifespan)
    app.add_middleware(BearerAuth, token=token, open_paths=frozenset({"/v1/health"}))
    return app


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dojo-runner", description="Benchmark .dojo kernels for remote clients.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the runner over HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8470, help="port to listen on; 0 picks a free one")
    serve.add_argument("--token-file", required=True, help="file holding the bearer token clients must send")
    serve.add_argument("--max-body", type=int, default=MAX_BODY, help="largest request body in bytes")
    serve.add_argument("--max-data", type=int, default=MAX_DATA, help="largest inputs and outputs of a kernel, bytes")
    serve.add_argument("--cache-dir", help="where built kernels are cached")
    serve.add_argument("--run-limit", type=float, default=600, help="seconds one run may take in all")
    serve.add_argument("--max-queue", type=int, default=256, help="runs waiting or running at most")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    for_long_kernels()
    try:
        token = read_token(args.token_file)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"dojo-runner: error: {error}", file=sys.stderr)
        return 1
    runner = LocalRunner(cache_dir=args.cache_dir)
    app = create_app(runner, token, args.max_body, args.max_data, args.run_limit, args.max_queue)
    # binding here rather than in uvicorn lets `--port 0` report the port it got
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((args.host, args.port))
    except OSError as error:
        print(f"dojo-runner: error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    host, port = listener.getsockname()[:2]
    if host not in ("127.0.0.1", "::1"):
        print(
            "dojo-runner: warning: plain HTTP off loopback sends the token in clear; use a TLS proxy or a tunnel",
            file=sys.stderr,
        )
    url = f"http://[{host}]:{port}" if family == socket.AF_INET6 else f"http://{host}:{port}"
    print(f"dojo-runner: listening on {url}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="info", server_header=False, proxy_headers=False)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again with the handler it found
    # installed: this one turns it into SystemExit, so that the runner's input files are removed
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        runner.close()
    return 0


def _exit_on_signal(number: int, _: FrameType | None) -> None:
    raise SystemExit(128 + number)
