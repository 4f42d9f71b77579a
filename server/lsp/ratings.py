"""The quick-fixes' ratings: the learned cost model's predicted speed-up of each move at the cursor.

For each legal move at the cursor the program after it is built, its features computed
(`agent.costmodel.features`, from its loop structure and its derivation's moves, against this
machine's limits) and scored with the cost model (`agent.costmodel.model`); the rating of a move is
exp(score before - score after), the predicted time of the program over that of the program after
the move. That is a fraction of a millisecond a move, so it is done in the request that lists the
moves, off the event loop with the listing: the first request after an edit is ranked, and there
is no background job to wait for, cancel or keep alive. Ratings are kept by the canonical text of
the program (comments and derivation aside, as measurements are) with the derivation's moves and
the target, so the next request at another line, an edited comment or an undo, rates only the
moves it has not met. A request spends at most BUDGET_S on new ratings: a move on the outer scope of
a long nest rewrites every operation in it, and a 200-line file's first request after an edit took
1.2 s; the moves it did not reach come after the rated ones, and the next request rates them.
A request that already spent its time waiting for the listing (the first after an edit) rates
until the answer is due (`answer_by`), and for at least FLOOR_S, so that it still comes ranked:
with the two budgets one after the other, the first request after an edit of the 200-line file
took 95-98 ms on an AMD EPYC (bench/results/lsp_speed.md), near the 100 ms in which a quick-fix
menu should open, and more on a slower machine.

The model is the one that comes with PerfDojo (`agent/costmodel/trained`), loaded at the first
request (numpy only: no torch in the server); if it cannot be loaded, ranking is off for the
session, which the client's log says once. The machine facts are those `dojo machine` measured,
or the target's nominal ones when it never ran: the editor does not start a measurement for this.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from agent.costmodel.features import Host
from agent.costmodel.model import SHIPPED, CostModel, CostModelError
from agent.costmodel.rank import rate_moves
from agent.evaluate import text_hash
from agent.legal import allowed
from codegen.targets import get_target
from dojo_ir.moves import Move
from runner.roofline import measured_machine

from .documents import Snapshot
from .settings import Settings

_KEPT = 512  # programs whose ratings are kept
BUDGET_S = 0.05  # new ratings a request, at most: the quick-fix menu opens within the p95 the issue asks of it
FLOOR_S = 0.015  # new ratings a request, at least, even when its answer is due: about a dozen moves of a long file


class Ratings:
    """`tell` puts one line in the client's log; `model` is the cost model's file."""

    def __init__(self, tell: Callable[[str], None], model: Path = SHIPPED):
        self._tell = tell
        self._path = model
        self._model: CostModel | None = None
        self._failed = False
        self._hosts: dict[str, Host] = {}
        self._known: OrderedDict[tuple, dict[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def rate(self, snapshot: Snapshot, moves: Sequence[Move], settings: Settings,
             answer_by: float | None = None) -> dict[str, float] | None:
        """The predicted speed-up of each of `moves` (legal moves of the snapshot's program) that serves
        the target, by the move's text, as far as the time allows (`rating_deadline`); None with
        ranking off or no model. Called off the event loop."""
        program, analysis = snapshot.program, snapshot.analysis
        if not settings.rank_quick_fixes or program is None or analysis is None:
            return None
        model = self._loaded()
        if model is None:
            return None
        target = get_target(settings.target)
        host = self._host(settings.target)
        derivation = program.derivation.moves if program.derivation else ()
        slot = (settings.target, derivation, text_hash(program))
        with self._lock:
            known = self._known.setdefault(slot, {})
            self._known.move_to_end(slot)
            while len(self._known) > _KEPT:
                self._known.popitem(last=False)
        todo = [m for m in moves if str(m) not in known and allowed(target, m)]
        if todo:
            known.update(rate_moves(model, host, program, todo, analysis,
                                    rating_deadline(time.perf_counter(), answer_by)))
        return {str(m): known[str(m)] for m in moves if str(m) in known}

    def _loaded(self) -> CostModel | None:
        if self._model is None and not self._failed:
            with self._lock:
                if self._model is None and not self._failed:
                    try:
                        self._model = CostModel.load(self._path)
                    except CostModelError as error:
                        self._failed = True
                        self._tell(f"PerfDojo: the quick-fixes are not ranked in this session: {error}")
        return self._model

    def _host(self, target: str) -> Host:
        if target not in self._hosts:
            self._hosts[target] = Host.of(measured_machine(), get_target(target))
        return self._hosts[target]


def rating_deadline(now: float, answer_by: float | None) -> float:
    """When a request that starts rating at `now` stops (`time.perf_counter()`): after BUDGET_S, or
    when its answer is due if that is sooner, but never before FLOOR_S."""
    until = now + BUDGET_S if answer_by is None else min(now + BUDGET_S, answer_by)
    return max(until, now + FLOOR_S)
