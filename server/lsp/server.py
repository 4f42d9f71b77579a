"""`DojoServer`: the pygls server and the state its features share.

Each feature is a module of `features/` with a `register(server)` function, as
esbonio builds its server; `create_server` registers the ones it is given, so
a test or an embedding can leave any out. The state shared by features lives
here: the settings, one immutable `Snapshot` per open document, the
measurements, the cost model's ratings of the moves, and the background tasks.

Every background task is started by `spawn`, and by nothing else: it keeps
them, so that none is garbage-collected half-way and a failing one is logged
instead of lost.

Parsing and checking a version, and listing its moves, is work that grows
with the document, so it runs in threads of its own (`off_loop`), never on the
event loop, which goes on answering requests meanwhile. Python's lock on its
interpreter (the GIL) lets the loop run every few milliseconds while such a
thread computes, so a request about another document waits that long, not
for the whole check. A document has at most one analysis under way: a version
that is superseded before its turn comes is never analysed, and whoever waits
for it gets the newer one (`analysed`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from types import ModuleType
from typing import Any
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcContentModified, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer

from .documents import Snapshot
from .measurements import Measurements
from .protocol import DojoProtocol
from .ratings import Ratings
from .settings import Settings

log = logging.getLogger(__name__)
VERSION = "0.1.0"


class DojoServer(LanguageServer):
    def __init__(self) -> None:
        # Whole texts: a kernel is a few kilobytes, and incremental sync would have to agree with every
        # client on what ends a line (pygls's does not, for form feeds and other separators).
        super().__init__("dojo-lsp", VERSION, text_document_sync_kind=lsp.TextDocumentSyncKind.Full,
                         protocol_cls=DojoProtocol)
        self.settings = Settings()
        self._tasks: set[asyncio.Task] = set()
        self.measurements = Measurements(self.spawn, on_change=self.refresh_inlay_hints)
        self._snapshots: dict[str, Snapshot] = {}
        self._analyses: dict[str, asyncio.Future] = {}  # per document: the analysis under way
        self.ratings = Ratings(self.log_to_client)

    def snapshot(self, uri: str) -> Snapshot:
        """The current version of the open document at `uri`, not necessarily
        analysed yet (see `analysed`); KeyError if the document is not open."""
        document = self.workspace.text_documents[unquote(uri)]  # pygls keys them unquoted
        known = self._snapshots.get(uri)
        if known is None or known.version != document.version or known.text != document.source:
            known = self._snapshots[uri] = Snapshot(uri, document.version, document.source,
                                                           self.workspace.position_encoding or "utf-16")
        return known

    async def analysed(self, uri: str) -> Snapshot:
        """The current version of the open document at `uri`, parsed and
        checked off the event loop; KeyError if the document is not open."""
        while True:
            snapshot = self.snapshot(uri)
            if snapshot.analysed:
                return snapshot
            under_way = self._analyses.get(uri)
            if under_way is None or under_way.done():
                under_way = self._analyses[uri] = self.off_loop(snapshot.analyse, f"analysing {snapshot.name}")
            # an older version's analysis, started before this version came, runs to its end (a thread
            # cannot be stopped); then this loop starts the analysis of the version current by then
            await asyncio.shield(under_way)

    def off_loop(self, work: Callable[..., Any], name: str, *args: Any) -> asyncio.Future:
        """`work(*args)` in a thread of its own; its result or its exception. A daemon thread, as the
        server must exit when the editor tells it to, even during the analysis of a big document."""
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if answer.cancelled():  # nobody waits any more
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(result)

        def run() -> None:
            try:
                result, error = work(*args), None
            except BaseException as raised:  # the waiter's to see, as if it had run on the loop
                result, error = None, raised
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop is closed: the server is exiting
                pass

        threading.Thread(target=run, name=name, daemon=True).start()
        return answer

    def forget(self, uri: str) -> None:
        self._snapshots.pop(uri, None)
        self._analyses.pop(uri, None)

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run `work` in the background, tracked; its failure is logged, never raised into the server."""
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def log_to_client(self, message: str) -> None:
        """One line in the client's log of the server (window/logMessage), not a notification."""
        self.window_log_message(lsp.LogMessageParams(type=lsp.MessageType.Warning, message=message))

    def refresh_inlay_hints(self) -> None:
        """Ask the client to ask again, where it can: results arrive after the hints were drawn."""
        workspace = self.client_capabilities.workspace
        if workspace and workspace.inlay_hint and workspace.inlay_hint.refresh_support:
            self.workspace_inlay_hint_refresh(None)

    def report_server_error(self, error: Exception, source: Any) -> None:
        # a failing request is the client's error response; the server carries on
        level = logging.INFO if isinstance(error, EXPECTED_REFUSALS) else logging.ERROR
        log.log(level, "%s: %s", getattr(source, "__name__", source), error)


# Answers that are part of the protocol, not failures: a stale resolve, a cancelled command.
EXPECTED_REFUSALS = (JsonRpcContentModified, JsonRpcRequestCancelled)


class _WithoutExpectedRefusals(logging.Filter):
    """pygls logs every error answer with its traceback; expected refusals are not worth one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], EXPECTED_REFUSALS))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_WithoutExpectedRefusals())


def create_server(features: Iterable[ModuleType] | None = None) -> DojoServer:
    from .features import FEATURES

    server = DojoServer()
    for feature in FEATURES if features is None else features:
        feature.register(server)
    return server
