"""The learned agent's ratings of a program's legal moves, computed in the background.

The quick-fixes at the cursor are ordered by the agent's predicted speed-up of each move
(`agent.perfllm.rating`). That is slow for an editor: the agent loads torch and its embedding
model (seconds), and rating a program embeds each of its moves and the lines they change (seconds
for a library kernel, most of a minute for one with a thousand moves; bench/results/lsp_speed.md).
So no request waits for it: `request` answers the ratings when they are known, and otherwise
starts rating the document's version in the background and answers None, and the quick-fixes come
in their plain order until the ratings are there.

Ratings are kept by the canonical text of the program (comments and derivation aside, as
measurements are), the agent's checkpoint and the target, so that editing a comment, or undoing a
move, finds them at once. One rating runs at a time, in one worker thread, and each document waits
with its latest version only, once it has stood a second: a job that has not started when its
document changes again is dropped (one that has started finishes and is kept, its program may come
back). The agent is loaded in that thread, once per checkpoint and target; if it cannot be (no
torch, no model, a bad checkpoint), ranking with it is off for the session, which the client's log
says once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.evaluate import text_hash
from dojo_ir import Program

from .documents import Snapshot
from .settings import Settings

if TYPE_CHECKING:
    from agent.perfllm.rating import Rater

log = logging.getLogger(__name__)
Agent = tuple[str, str]  # the `dojo.agent.checkpoint` setting (empty: the shipped agent) and the target
_KEPT = 512  # programs whose ratings are kept: a big kernel's are a thousand floats
QUIET_S = 1.0  # a document's version is rated once it has stood this long


@dataclass
class _Document:
    """What is known of one open document: its latest snapshot's slot, and the job rating it."""

    snapshot: Snapshot
    agent: Agent
    slot: str
    job: asyncio.Task | None = None
    job_slot: str | None = None


class Ratings:
    """`spawn` runs a coroutine as a tracked background task (`DojoServer.spawn`); `tell` puts one
    line in the client's log."""

    def __init__(self, spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task], tell: Callable[[str], None]):
        self._spawn = spawn
        self._tell = tell
        self._worker = _Worker()
        self._known: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._raters: dict[Agent, asyncio.Future] = {}
        self._documents: dict[str, _Document] = {}

    def request(self, snapshot: Snapshot, settings: Settings) -> dict[str, float] | None:
        """The predicted speed-up of each legal move of the snapshot's program, by the move's text,
        when known; else None, after starting to rate them if ranking is on and no job is at it."""
        program = snapshot.program
        if not settings.rank_quick_fixes or program is None:
            return None
        agent = (settings.agent_checkpoint, settings.target)
        if self._unavailable(agent):
            return None
        document = self._documents.get(snapshot.uri)
        if document is None or document.snapshot is not snapshot or document.agent != agent:
            job, job_slot = (document.job, document.job_slot) if document else (None, None)
            document = self._documents[snapshot.uri] = _Document(snapshot, agent, _slot(agent, program), job, job_slot)
        known = self._known.get(document.slot)
        if known is not None:
            self._known.move_to_end(document.slot)
            return known
        if document.job is None or document.job.done() or document.job_slot != document.slot:
            if document.job is not None:
                document.job.cancel()
            document.job = self._spawn(self._rate(agent, document.slot, program),
                                       f"rating the moves of {snapshot.name}")
            document.job_slot = document.slot
        return None

    def forget(self, uri: str) -> None:
        """The document was closed: its waiting job is dropped."""
        document = self._documents.pop(uri, None)
        if document is not None and document.job is not None:
            document.job.cancel()

    async def _rate(self, agent: Agent, slot: str, program: Program) -> None:
        # A started rating cannot be stopped, and a big kernel's takes most of a minute: only a version
        # that the next keystroke does not supersede at once is rated.
        await asyncio.sleep(QUIET_S)
        try:
            rater = await asyncio.shield(self._rater(agent))
        except Exception:  # whatever stopped the agent from loading was told once, by `_loaded`
            return
        loop = asyncio.get_running_loop()
        job = self._worker.submit(_rate_moves, rater, program)

        def remember(done: concurrent.futures.Future) -> None:
            try:
                loop.call_soon_threadsafe(self._remember, slot, done)
            except RuntimeError:  # the loop is closed: the server is exiting
                pass

        # Remembered by the job itself, not by this task: a rating superseded while it runs still
        # finishes, and its program may come back (an undo).
        job.add_done_callback(remember)
        await asyncio.wrap_future(job)  # cancelled before it starts, the job is dropped

    def _rater(self, agent: Agent) -> asyncio.Future:
        loading = self._raters.get(agent)
        if loading is None:
            loading = self._raters[agent] = asyncio.wrap_future(self._worker.submit(_load, *agent))
            loading.add_done_callback(functools.partial(self._loaded, agent))
        return loading

    def _loaded(self, agent: Agent, loading: asyncio.Future) -> None:
        if not loading.cancelled() and (error := loading.exception()) is not None:
            checkpoint, target = agent
            self._tell(f"PerfDojo: the quick-fixes are not ranked by the agent for {target} in this session: "
                       f"its checkpoint {checkpoint or '(the shipped agent)'} cannot be loaded: {error}")

    def _unavailable(self, agent: Agent) -> bool:
        loading = self._raters.get(agent)
        return loading is not None and loading.done() and not loading.cancelled() and loading.exception() is not None

    def _remember(self, slot: str, job: concurrent.futures.Future) -> None:
        if job.cancelled():
            return
        self._known[slot] = job.result()
        while len(self._known) > _KEPT:
            self._known.popitem(last=False)


class _Worker:
    """One daemon thread running jobs in turn. Not a ThreadPoolExecutor: its threads are joined at
    exit, and a rating, which nothing can interrupt, may take minutes for a big kernel; the server
    must exit when the editor tells it to."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="dojo-ratings", daemon=True).start()

    def submit(self, work: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        job: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((job, work, args))
        return job

    def _run(self) -> None:
        while True:
            job, work, args = self._jobs.get()
            if not job.set_running_or_notify_cancel():  # cancelled while it waited
                continue
            try:
                job.set_result(work(*args))
            except BaseException as error:  # the job's failure is its waiter's to see
                job.set_exception(error)


def _slot(agent: Agent, program: Program) -> str:
    checkpoint, target = agent
    return f"{checkpoint}\0{target}\0{text_hash(program)}"


def _load(checkpoint: str, target: str) -> Rater:
    from agent.perfllm.checkpoint import SHIPPED  # torch and the embedding model load here, in the worker
    from agent.perfllm.rating import Rater

    return Rater(Path(checkpoint).expanduser() if checkpoint else SHIPPED, target=target)


def _rate_moves(rater: Rater, program: Program) -> dict[str, float]:
    from agent.legal import legal_moves

    try:
        moves = legal_moves(program, rater.target)
        return dict(zip(map(str, moves), rater.rate(program, moves), strict=True))
    except Exception:  # a program the agent cannot rate keeps its plain order; the server carries on
        log.exception("the agent could not rate the moves of %s", program.name)
        return {}
