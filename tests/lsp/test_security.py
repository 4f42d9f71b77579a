"""A cloned repository's settings cannot choose where programs and tokens go:
the runner URL and its token file are the user's (initializationOptions),
never a `workspace/configuration` answer's. A real `dojo-lsp` against a real
HTTP server on this machine that records what reaches it."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from dojo_ir.library import KERNELS
from tests.lsp.conftest import CLIENTS, SETTINGS
from tests.lsp.editor import Editor

SECRET = "AKIA-SECRET-CONTENTS"


class _Recorder(BaseHTTPRequestHandler):
    """Notes each request's Authorization header and refuses it."""

    def _refuse(self) -> None:
        self.server.seen.append(self.headers.get("Authorization"))
        body = json.dumps({"error": "refused by the test"}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str | None]]]:
    """A local HTTP server's URL and the Authorization headers it received."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return path


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "server.lsp"]), params=CLIENTS)
async def fresh(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """A server not yet initialized: each test gives its own initializationOptions."""
    lsp_client.kind = request.param
    yield lsp_client
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, user: dict, workspace: dict) -> None:
    """Initialize with the user's `dojo` settings; answer workspace/configuration with the workspace's."""
    Editor(client)  # answers the server's requests as an editor does
    client.set_configuration({"dojo": workspace})
    await client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities(client.kind), initialization_options=user,
        workspace_folders=[lsp.WorkspaceFolder(uri=Path.cwd().as_uri(), name="perfdojo")]))


async def measured(client: LanguageClient, path: Path) -> lsp.InlayHint:
    """Open the kernel at `path` and wait for its measurement's inlay hint."""
    path.write_text(KERNELS["relu"].small())
    uri = path.resolve().as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="dojo", version=1, text=path.read_text())))
    for _ in range(1200):
        found = await client.text_document_inlay_hint_async(lsp.InlayHintParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=99, character=0))))
        if found and "measuring" not in found[0].label:
            return found[0]
        await asyncio.sleep(0.05)
    pytest.fail("no measurement in 60 s")


USER = {**SETTINGS["dojo"], "measure": {"automatic": True}}


async def test_a_workspace_naming_a_runner_and_a_token_file_sends_nothing(fresh, listener, token, tmp_path: Path):
    url, seen = listener
    await start(fresh, USER, {**USER, "runner": {"url": url, "tokenFile": str(token)}})
    fresh.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"dojo": {"runner": {"url": url, "tokenFile": str(token)}}}))
    hint = await measured(fresh, tmp_path / "relu.dojo")
    assert "runner" not in hint.label and "median of" in hint.tooltip.value, hint  # measured here
    assert seen == []


async def test_the_users_runner_gets_the_token(fresh, listener, token, tmp_path: Path):
    url, seen = listener
    await start(fresh, {**USER, "runner": {"url": url, "tokenFile": str(token)}}, USER)
    hint = await measured(fresh, tmp_path / "relu.dojo")
    assert hint.label == "⏱ runner unavailable" and "refused by the test" in hint.tooltip.value
    assert seen and set(seen) == {f"Bearer {SECRET}"}


async def test_a_token_file_others_may_read_is_refused_and_nothing_sent(fresh, listener, token, tmp_path: Path):
    url, seen = listener
    token.chmod(0o644)
    await start(fresh, {**USER, "runner": {"url": url, "tokenFile": str(token)}}, USER)
    hint = await measured(fresh, tmp_path / "relu.dojo")
    assert hint.label == "⏱ runner unavailable" and "chmod 600" in hint.tooltip.value
    assert seen == []


async def test_an_unreachable_runner_shows_in_the_inlay_hint(fresh, token, tmp_path: Path):
    await start(fresh, {**USER, "runner": {"url": "http://127.0.0.1:9", "tokenFile": str(token)}}, USER)
    hint = await measured(fresh, tmp_path / "relu.dojo")
    assert hint.label == "⏱ runner unavailable"
    assert "127.0.0.1:9" in hint.tooltip.value
