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
move, finds them at once. One rating runs at a time, in one worker process, and each document waits
with its latest version only, once it has stood a second: a job that has not started when its
document changes again is dropped (one that has started finishes and is kept, its program may come
back). The agent is loaded in that process, once per checkpoint and target; if it cannot be (no
torch, no model, a bad checkpoint), ranking with it is off for the session, which the client's log
says once.

Why a process and not a thread: listing, applying and printing a program's moves is Python, and in
a thread it shares the interpreter with the server. While a 200-line file was rated (40 s) the
first code action after an edit took three times as long as without ranking; in a process of its
own the rating takes a core and nothing else from the server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import functools
import logging
import multiprocessing
import os
import queue
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.evaluate import text_hash
from dojo_ir import Program, to_text

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
            await asyncio.shield(self._rater(agent))
        except Exception:  # whatever stopped the agent from loading was told once, by `_loaded`
            return
        loop = asyncio.get_running_loop()
        job = self._worker.submit(_rate_moves, agent, to_text(program))

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
            loading = self._raters[agent] = asyncio.wrap_future(self._worker.submit(_load, agent))
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
    """One process running jobs in turn, fed by a daemon thread of the server.

    Forked, not spawned: the child inherits the server's modules as they are (the tests swap the
    embedding model for a fake), and the server has loaded no torch to fork. Not a
    ProcessPoolExecutor: its processes are joined at exit, and a rating, which nothing can
    interrupt, may take minutes for a big kernel; the server must exit when the editor tells it to.
    The child ends when the server's end of its pipe closes, as it does when the server exits. A
    job cancelled while it waits is dropped; a process that dies fails its job, and the next job
    starts another."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._process: tuple[int, Connection] | None = None
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
                if self._process is None:
                    self._process = _start_process()
                self._process[1].send((work, args))
                failed, value = self._process[1].recv()
            except (EOFError, OSError) as error:  # it died, or could not start: the next job starts another
                if self._process is not None:
                    os.waitpid(self._process[0], 0)
                self._process = None
                job.set_exception(RuntimeError(f"the rating process ended: {error!r}"))
                continue
            if failed:
                job.set_exception(value)
            else:
                job.set_result(value)


def _start_process() -> tuple[int, Connection]:
    """Fork the rating process; its pid and the server's end of the pipe to it. A plain fork, not
    multiprocessing's: a forked multiprocessing child closes its standard input first, whose lock
    the server's reading thread holds in the parent, and waits for it for ever."""
    ours, theirs = multiprocessing.Pipe()
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            _serve(theirs)
        finally:
            os._exit(0)
    theirs.close()
    return pid, ours


def _serve(connection: Connection) -> None:
    """The rating process: run each job sent, send back (failed, its result or its exception)."""
    # Standard output is the server's protocol, and this process holds a copy of its buffer: whatever
    # reaches it from here (that copy flushed, a library's message) goes to standard error instead;
    # standard input is the editor's, not this process's to hold open.
    os.dup2(2, 1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    _end_with_the_server()
    while True:
        try:
            work, args = connection.recv()
        except EOFError:  # the server is gone
            return
        try:
            connection.send((False, work(*args)))
        except Exception as error:  # the job's failure is its waiter's to see
            connection.send((True, error))


def _end_with_the_server() -> None:
    """Have Linux kill this process when the server's thread that forked it ends: a rating under
    way would otherwise keep it (and the standard error it shares) alive for up to a minute after
    the server exits."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the process ends at its next job's end of file
        pass


_PR_SET_PDEATHSIG = 1
_raters: dict[Agent, Rater] = {}  # in the rating process: the agents loaded there


def _slot(agent: Agent, program: Program) -> str:
    checkpoint, target = agent
    return f"{checkpoint}\0{target}\0{text_hash(program)}"


def _load(agent: Agent) -> None:
    """Load the agent in the rating process (torch and the embedding model load there)."""
    from agent.perfllm.checkpoint import SHIPPED
    from agent.perfllm.rating import Rater

    checkpoint, target = agent
    if agent not in _raters:
        _raters[agent] = Rater(Path(checkpoint).expanduser() if checkpoint else SHIPPED, target=target)


def _rate_moves(agent: Agent, text: str) -> dict[str, float]:
    """In the rating process: the loaded agent's rating of every legal move of the program `text`."""
    from dojo_ir import load

    program = load(text)
    try:
        return _raters[agent].rate_all(program)
    except Exception:  # a program the agent cannot rate keeps its plain order; the server carries on
        log.exception("the agent could not rate the moves of %s", program.name)
        return {}
