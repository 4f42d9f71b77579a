"""Every request gets an answer: parameters that do not fit the protocol, and a document that is
not open, are answered with InvalidParams and a message, never with silence or a traceback.

pytest-lsp's client cannot send parameters its types refuse, so these talk raw JSON-RPC to a real
`dojo-lsp` process."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

INVALID_PARAMS = -32602
TEXT = "kernel k(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n\n4 y[{0}] = x[{0}]\n"
URI = "file:///tmp/k.dojo"


class RawClient:
    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.ids = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        length = 0
        while (line := await self.process.stdout.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return json.loads(await self.process.stdout.readexactly(length))

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        """The answer to the request (the messages the server sends meanwhile are skipped); a
        TimeoutError if none comes."""
        self.ids += 1
        self.send({"id": self.ids, "method": method, "params": params})
        async with asyncio.timeout(10):
            while (message := await self.receive()).get("id") != self.ids or "method" in message:
                pass
        return message


@pytest.fixture
async def raw() -> AsyncIterator[RawClient]:
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "server.lsp", stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.DEVNULL)
    client = RawClient(process)
    await client.request("initialize", {"capabilities": {}})
    client.send({"method": "initialized", "params": {}})
    client.send({"method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": URI, "languageId": "dojo", "version": 1, "text": TEXT}}})
    yield client
    await client.request("shutdown", None)
    client.send({"method": "exit"})
    await asyncio.wait_for(process.wait(), 10)


@pytest.mark.parametrize("params", [5, "hover", [], {"textDocument": {"uri": URI}},
                                    {"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}},
                                    {"textDocument": {"uri": URI}, "position": {"line": 5, "character": -3}}],
                         ids=["a number", "a string", "a list", "no position", "a negative line",
                              "a negative character"])
async def test_parameters_that_do_not_fit_are_answered_with_invalid_params(raw: RawClient, params: Any):
    answer = await raw.request("textDocument/hover", params)
    assert answer["error"]["code"] == INVALID_PARAMS
    assert answer["error"]["message"].startswith("textDocument/hover: the parameters do not fit the protocol: ")
    assert "data" not in answer["error"]
    # and the server carries on
    hover = await raw.request("textDocument/hover", {"textDocument": {"uri": URI},
                                                     "position": {"line": 5, "character": 0}})
    assert "b_y[i0] = b_x[i0]" in hover["result"]["contents"]["value"]


@pytest.mark.parametrize("method", ["textDocument/hover", "textDocument/codeAction", "textDocument/documentSymbol",
                                    "textDocument/inlayHint", "textDocument/formatting"])
async def test_a_request_about_a_document_that_is_not_open_says_so_without_a_traceback(raw: RawClient,
                                                                                      method: str):
    position = {"line": 0, "character": 0}
    params = {"textDocument": {"uri": "file:///tmp/never-opened.dojo"}, "position": position,
              "range": {"start": position, "end": position}, "context": {"diagnostics": []},
              "options": {"tabSize": 4, "insertSpaces": True}}
    answer = await raw.request(method, params)
    assert answer["error"] == {"code": INVALID_PARAMS,
                               "message": "file:///tmp/never-opened.dojo is not open; open it (textDocument/didOpen) "
                                          "first"}
