"""Measured times, asynchronously, cached by what is measured.

A measurement is keyed by the canonical text of the program (comments and
derivation stripped: they do not change the code), the target and the runner,
so undoing an edit finds its old time at once, and two files with the same
kernel share one. Measurements run one at a time in a worker thread (the
runner's own lock would serialise them anyway) and never on the event loop,
so the editor never waits for a compiler. Whoever is interested is told
through `on_change` when one finishes; the server turns that into an inlay
hint refresh.

A measurement that is cancelled (the user cancels the benchmark, or a newer
version of the document supersedes it) stops its runner: the local runner
kills the benchmark's process. The next measurement starts only once the
cancelled one has ended, so that one never times while another runs, and
the CPU lock of the runner is released after its process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from agent.evaluate import text_hash
from dojo_ir import Program
from runner.measure import measure
from runner.result import RunResult, format_time
from runner.roofline import MachineError, bound_s, machine_limits, work

from .settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measurement:
    """`result` once measured; `error` when the runner could not be asked
    (unreachable service, refused token); neither while measuring."""

    result: RunResult | None = None
    error: str | None = None
    bound_s: float | None = None  # the roofline bound on the runner's machine, where it is known

    @property
    def pending(self) -> bool:
        return self.result is None and self.error is None

    def summary(self) -> str:
        """One short line: what the inlay hint says."""
        if self.pending:
            return "measuring…"
        if self.error is not None:
            return "runner unavailable"
        assert self.result is not None
        if self.result.error is not None:
            return "failed" if self.result.verified is not False else "wrong results"
        if self.result.verified is False:
            return f"{format_time(self.result.median_s)} · wrong results"
        text = format_time(self.result.median_s)
        if self.bound_s:
            text += f" · {self.result.median_s / self.bound_s:.1f}× bound"
        return text

    def details(self) -> str:
        """Markdown for a hover or a tooltip."""
        if self.pending:
            return "Measuring…"
        if self.error is not None:
            return f"The runner is unavailable: {self.error}"
        r = self.result
        assert r is not None
        if r.error is not None:
            return f"Measurement failed on `{r.target}`:\n\n```\n{r.error.strip()}\n```"
        lines = [f"**{format_time(r.median_s)}** median of {r.repeats} runs on `{r.target}` "
                 f"(min {format_time(r.min_s)}, max {format_time(r.max_s)})"]
        if self.bound_s:
            lines.append(f"roofline bound {format_time(self.bound_s)}: {r.median_s / self.bound_s:.2f}× the bound")
        verified = {True: f"verified against the spec (max error {r.max_error:.3g})" if r.max_error is not None
                    else "verified against the spec", False: "**differs from the spec**", None: "not verified"}
        lines.append(verified[r.verified])
        return "\n\n".join(lines)


def key(program: Program, settings: Settings) -> str:
    return f"{settings.target}\0{settings.runner_url}\0{text_hash(program)}"


class Measurements:
    """`spawn` runs a coroutine as a tracked background task (`DojoServer.spawn`); `on_change` is
    called whenever a measurement is known."""

    def __init__(self, spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task], on_change: Callable[[], None]):
        self._spawn = spawn
        self._on_change = on_change
        self._known: dict[str, Measurement] = {}
        self._lock = asyncio.Lock()
        self._background: dict[str, asyncio.Task] = {}  # per document: its latest version's measurement

    def get(self, program: Program, settings: Settings) -> Measurement | None:
        return self._known.get(key(program, settings))

    def request(self, document: str, program: Program, spec: Program | None, settings: Settings) -> Measurement:
        """What is known of `program`'s time; when nothing is, start measuring
        it in the background (instead of any earlier version of `document`
        still waiting its turn) and say so."""
        slot = key(program, settings)  # prints the program: once per request
        known = self._known.get(slot)
        if known is not None:
            return known
        waiting = self._background.pop(document, None)
        if waiting is not None:
            waiting.cancel()
        known = self._known[slot] = Measurement()
        task = self._spawn(self.measure(program, spec, settings, settings.repetitions), f"measuring {program.name}")
        self._background[document] = task

        def finished(done: asyncio.Task) -> None:
            if self._background.get(document) is done:
                del self._background[document]

        task.add_done_callback(finished)
        return known

    async def measure(self, program: Program, spec: Program | None, settings: Settings, repeats: int) -> Measurement:
        """Measure now (after any measurement in progress) and remember it."""
        slot = key(program, settings)
        try:
            async with self._lock:
                stop = _Stop()
                work = self._spawn(asyncio.to_thread(_measure, program, spec, settings, repeats, stop),
                                   f"timing {program.name}")
                try:
                    measured = await asyncio.shield(work)
                except asyncio.CancelledError:
                    stop.set()
                    # the lock is held until the runner has stopped: its process is gone, its CPUs are free
                    while not work.done():
                        with contextlib.suppress(asyncio.CancelledError):  # cancelled again: it is stopping
                            await asyncio.wait([work])
                    raise
        except asyncio.CancelledError:
            if self._known.get(slot) is not None and self._known[slot].pending:
                del self._known[slot]
            raise
        self._known[slot] = measured
        self._on_change()
        return measured

    def forget(self) -> None:
        """Drop every measurement (the runner or the machine changed)."""
        for task in self._background.values():
            task.cancel()
        self._background.clear()
        self._known.clear()


def open_runner(settings: Settings) -> AbstractContextManager[Any]:
    """The configured runner (`dojo.runner.url`, or this machine), to use in a `with`."""
    from runner.client import connect

    return connect(settings.runner_url, settings.runner_token_file)


class _Stop:
    """Tells the runner of a measurement under way to stop, once it is known (and at once if it
    is set by then). A remote runner cannot be stopped: its answer is dropped when it comes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runner: Any = None
        self._set = False

    def set(self) -> None:
        with self._lock:
            self._set = True
        self._stop()

    def watch(self, runner: Any) -> None:
        with self._lock:
            self._runner = runner
        self._stop()

    def _stop(self) -> None:
        with self._lock:
            runner = self._runner if self._set else None
        if hasattr(runner, "cancel"):
            runner.cancel()


def _measure(program: Program, spec: Program | None, settings: Settings, repeats: int, stop: _Stop) -> Measurement:
    from runner.client import RunnerError

    try:
        with open_runner(settings) as runner:
            stop.watch(runner)
            result = measure(runner, program, settings.target, repeats=repeats, spec=spec)
    except (RunnerError, ValueError) as error:
        return Measurement(error=str(error))
    return Measurement(result, bound_s=None if settings.runner_url else _local_bound(program))


def _local_bound(program: Program) -> float | None:
    """The roofline bound on this machine, once its limits have been measured."""
    try:
        return bound_s(work(program), machine_limits())
    except MachineError as error:
        log.warning("no roofline bound: %s", error)
        return None
