"""`RemoteRunner`: the client of `dojo-runner serve`, with the local runner's `run` and `targets`.

    runner = RemoteRunner("http://gpu-box:8470", read_token("~/.dojo/token"))
    result = runner.run(program, target="native", repeats=10)

It sends IR only (the canonical text of the program); the service generates and builds the source
itself. Every failure that is not the kernel's own (refused token, oversized or invalid request,
unreachable service) raises `RunnerError`; a kernel that crashed or timed out comes back as a
`RunResult` with its `error` set, as it does from the local runner.

A token is a secret: it is read only from a file that looks like a token's (private to its owner, a
few printable characters), and never sent in clear, over plain HTTP, to a host other than this one.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import httpx

from dojo_ir import Diagnostic, Program, to_text
from dojo_ir.tree import Span
from runner.result import RunResult


class RunnerError(Exception):
    """The service refused a request or could not be reached. `status` is the HTTP status (None when
    there was no answer); `diagnostics` pairs each positioned error with the request field
    (`program` or `spec`) whose text it points into."""

    def __init__(self, message: str, status: int | None = None, diagnostics: tuple[tuple[str, Diagnostic], ...] = ()):
        self.status = status
        self.diagnostics = diagnostics
        lines = [message, *(d.format(field) for field, d in diagnostics)]
        super().__init__("\n".join(lines))


TOKEN_LIMIT = 4096  # bytes: a token file larger than this holds something else


def read_token(path: str | Path) -> str:
    """The bearer token in `path`, without the surrounding whitespace an editor leaves. ValueError
    unless the file looks like a token's: a regular file, no larger than `TOKEN_LIMIT`, that neither
    its group nor others may access (`chmod 600`), holding printable ASCII without spaces."""
    path = Path(path).expanduser()
    status = path.stat()
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"{path}: the token file is not a regular file")
    if status.st_size > TOKEN_LIMIT:
        raise ValueError(f"{path}: the token file holds {status.st_size} bytes, more than a token "
                         f"({TOKEN_LIMIT} at most)")
    if os.name == "posix" and status.st_mode & 0o077:
        raise ValueError(f"{path}: the token file may be read by others (mode {stat.filemode(status.st_mode)}); "
                         f"make it private with `chmod 600 {path}`")
    with path.open("rb") as file:
        token = file.read(TOKEN_LIMIT + 1).decode("utf-8").strip()
    if not token:
        raise ValueError(f"{path}: the token file is empty")
    if len(token) > TOKEN_LIMIT or not all("!" <= c <= "~" for c in token):
        raise ValueError(f"{path}: the token file does not hold a token (one word of printable ASCII)")
    return token


def check_url(url: str) -> None:
    """RunnerError unless a token may be sent to `url`: HTTPS, or plain HTTP to this machine only."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as error:
        raise RunnerError(f"{url}: not a runner URL: {error}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise RunnerError(f"{url}: not a runner URL: expected http(s)://HOST[:PORT]")
    if parsed.scheme == "http" and not _is_loopback(parsed.host):
        raise RunnerError(f"{url}: the token would cross the network in clear; use https:// "
                          "(or plain http:// to localhost, e.g. through an SSH tunnel)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_for(url: str, token_file: str | None) -> str:
    """The token for the service at `url`: from `token_file`, else from DOJO_RUNNER_TOKEN."""
    try:
        token = read_token(token_file) if token_file else os.environ.get("DOJO_RUNNER_TOKEN", "").strip()
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RunnerError(f"cannot read the token for {url}: {error}") from None
    if not token:
        raise RunnerError(f"the runner at {url} needs a token: a token file or DOJO_RUNNER_TOKEN")
    return token


class RemoteRunner:
    """One service at `url`. A run waits in the service's queue behind the others, so `timeout_s`
    bounds the queueing as well as the run."""

    def __init__(self, url: str, token: str, timeout_s: float = 600):
        check_url(url)
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def __enter__(self) -> RemoteRunner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health")

    def targets(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/targets")["targets"]

    def run(
        self,
        program: Program,
        target: str = "native",
        repeats: int = 10,
        warmup: int = 2,
        spec: Program | None = None,
    ) -> RunResult:
        body = {
            "program": to_text(program),
            "target": target,
            "repeats": repeats,
            "warmup": warmup,
            "spec": None if spec is None else to_text(spec),
        }
        return RunResult.from_json(self._request("POST", "/v1/run", json=body))

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise RunnerError(f"{self.url}: no answer to {method} {path} in time") from None
        except httpx.TransportError as error:
            raise RunnerError(f"{self.url}: cannot reach the runner: {error}") from None
        try:
            payload = response.json()
        except ValueError:
            payload = {"error": response.text.strip()}
        if response.is_success:
            return payload
        if not isinstance(payload, dict):
            payload = {}
        raise RunnerError(
            f"{self.url}: {method} {path}: {response.status_code} {payload.get('error', response.reason_phrase)}",
            response.status_code,
            tuple((e["field"], _diagnostic(e)) for e in payload.get("errors", ())),
        )


def _diagnostic(error: dict[str, Any]) -> Diagnostic:
    span = Span(error["line"], error["col"], error["end_line"], error["end_col"])
    return Diagnostic(span, error["message"], error["rule"])


def connect(url: str | None, token_file: str | None = None) -> AbstractContextManager[Any]:
    """The runner to measure with, to use in a `with`: the service at `url` (its token from
    `token_file` or DOJO_RUNNER_TOKEN), or this machine's LocalRunner when `url` is empty."""
    if not url:
        from runner.local import LocalRunner  # the build machinery, only where it runs

        return nullcontext(LocalRunner())
    check_url(url)  # before the token is read
    return RemoteRunner(url, token_for(url, token_file))
