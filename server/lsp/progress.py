"""Work-done progress that the user can cancel.

    async with progress(server, "Benchmarking softmax") as report:
        report("compiling", 10)

creates a server-initiated progress token when the client supports them,
begins, reports, and always ends (in a `finally`). Cancelling it in the editor
(`window/workDoneProgress/cancel`) cancels the task running the block, which
then raises `asyncio.CancelledError` at its next `await`; so does
`$/cancelRequest` of the command that started it.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer

Report = Callable[[str, int | None], None]


def _supports_progress(server: LanguageServer) -> bool:
    window = server.client_capabilities.window
    return bool(window and window.work_done_progress)


def _cancel_with(future, task: asyncio.Task) -> None:
    """Cancel `task` when `future` (a pygls token or request future) is cancelled."""
    loop = asyncio.get_running_loop()
    future.add_done_callback(lambda done: done.cancelled() and loop.call_soon_threadsafe(task.cancel))


@asynccontextmanager
async def progress(server: LanguageServer, title: str, cancellable: bool = True) -> AsyncIterator[Report]:
    task = asyncio.current_task()
    assert task is not None
    # pygls cancels a command's request future on $/cancelRequest but not the coroutine serving it
    request = server.protocol._request_futures.get(server.protocol.msg_id)
    if request is not None:
        _cancel_with(request, task)
    if not _supports_progress(server):
        yield lambda message, percentage=None: None
        return
    token = str(uuid.uuid4())
    await server.work_done_progress.create_async(token)
    _cancel_with(server.work_done_progress.tokens[token], task)

    def report(message: str, percentage: int | None = None) -> None:
        server.work_done_progress.report(token, lsp.WorkDoneProgressReport(message=message, percentage=percentage,
                                                                           cancellable=cancellable))

    server.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(title=title, cancellable=cancellable,
                                                                     percentage=0))
    message = "done"
    try:
        yield report
    except asyncio.CancelledError:
        message = "cancelled"
        raise
    except Exception:
        message = "failed"
        raise
    finally:
        server.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=message))
        with suppress(KeyError):
            del server.work_done_progress.tokens[token]


def cancellable(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A command handler whose cancellation answers the request: pygls runs a
    command's coroutine under a generator that only forwards exceptions, so a
    cancelled one would leave the request unanswered."""

    @functools.wraps(handler)
    async def run(*args: Any) -> Any:
        try:
            return await handler(*args)
        except asyncio.CancelledError:
            raise JsonRpcRequestCancelled("cancelled") from None

    return run
