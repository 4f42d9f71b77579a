"""`dojo.tune`: search for a faster program from the document's kernel, and
apply the best one found as one versioned edit that records its moves.

The search (agent.tune) runs in a worker thread, measuring with the
configured runner (`dojo.runner.url`, or this machine); progress reports the
evaluations and the best time so far. Cancelling stops the search and keeps
the best program found until then, as Ctrl-C does for `dojo tune`: the
evaluations already paid for are not thrown away. The result is an edit for
the version the search started from, so the editor refuses it if the document
changed meanwhile; the answer then carries the moves, for `dojo.applyMoves`.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from agent.methods import GRAPH, GRAPHS, TUNE_METHODS
from runner.result import format_time

from ..documents import file_path
from ..measurements import open_runner
from ..progress import cancellable, progress
from ..requests import apply_edit, argument, document_of, moves_edit
from ..server import DojoServer

if TYPE_CHECKING:
    from agent.tune import TuneProgress, TuneResult

TUNE = "dojo.tune"


def register(server: DojoServer) -> None:
    @server.command(TUNE)
    @cancellable
    async def tune_command(ls: DojoServer, *args: Any) -> dict[str, Any]:
        from agent.tune import KernelTuneOptions, tune  # the search is loaded when it is first asked for

        snapshot, program = await document_of(ls, args, TUNE)
        options = argument(args, 1, dict, TUNE, "an object {method, budget, graph}") or {}
        method = options.get("method") or await _ask_method(ls)
        if method is None:
            return {"applied": False, "reason": "no method chosen"}
        budget, graph = options.get("budget", ls.settings.tune_budget), options.get("graph", GRAPH)
        if method not in TUNE_METHODS or graph not in GRAPHS or not isinstance(budget, int) or budget < 1:
            raise JsonRpcInvalidParams(f"{TUNE}: method is one of {', '.join(TUNE_METHODS)}, graph one of "
                                       f"{', '.join(GRAPHS)}, budget a positive integer")
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        async with progress(ls, f"Tuning {program.name} ({method}, {budget} evaluations)") as report:
            def on_progress(state: TuneProgress) -> None:
                best = f"best {format_time(state.best_s)}, {state.speedup:.2f}x" if state.best_s and state.speedup \
                    else "no verified program yet"
                loop.call_soon_threadsafe(report, f"{state.evaluations}/{state.budget}: {best}",
                                          int(100 * state.evaluations / max(state.budget, 1)))

            here = file_path(snapshot.uri)
            settings = ls.settings

            def search_in_thread() -> TuneResult:
                with open_runner(settings) as runner:
                    options = KernelTuneOptions(method, budget, graph=graph, target=settings.target)
                    return tune(program, options, spec_path=here.name if here else "spec.dojo", log=_log_path(here),
                                runner=runner, on_progress=on_progress, should_stop=stop.is_set)

            search = ls.spawn(asyncio.to_thread(search_in_thread), f"tuning {program.name}")
            try:
                result = await asyncio.shield(search)
            except asyncio.CancelledError:
                stop.set()  # the search returns its best so far at its next evaluation
                result = await search
        moves = list(result.moves)
        answer = {"method": method, "evaluations": result.evaluations, "spec_s": result.spec_s,
                  "time_s": result.time_s, "speedup": result.speedup,
                  "moves": moves, "stopped": stop.is_set()}
        if not moves:
            return answer | {"applied": False, "reason": "no faster program found"}
        applied = await apply_edit(ls, f"tune ({len(moves)} moves)", moves_edit(ls, snapshot, moves))
        return answer | {"applied": applied} | ({} if applied else {"reason": "the document changed meanwhile"})


async def _ask_method(ls: DojoServer) -> str | None:
    """The method, chosen by the user from a message with one button per method."""
    window = ls.client_capabilities.window
    if not (window and window.show_message):
        return TUNE_METHODS[0]
    chosen = await ls.window_show_message_request_async(lsp.ShowMessageRequestParams(
        type=lsp.MessageType.Info, message="PerfDojo: tune with which method?",
        actions=[lsp.MessageActionItem(title=m) for m in TUNE_METHODS]))
    return chosen.title if chosen is not None else None


def _log_path(document: Path | None) -> Path | None:
    """Next to the document, as `dojo tune` keeps it: `kernel.dojo.tune.jsonl`."""
    return document.with_name(document.name + ".tune.jsonl") if document is not None else None
