"""Evaluation for the searches: time a candidate, verified against its spec, once.

    evaluator = Evaluator(spec, runner=LocalRunner(), log=Path("out.dojo.jsonl"))
    cost = evaluator.evaluate(moves)     # seconds, or +inf when it failed or did not verify

A candidate is a list of moves from the spec (after the `prefix`, the moves that made the
starting program). The evaluator replays them, prints the result without comments and hashes
that canonical text: a program met again, by whatever moves, costs nothing, its time comes from
the cache. Every real evaluation is appended to a JSONL log, one object a line:

    {"index": 3, "moves": [...], "hash": "...", "median_s": 0.0123, "ok": true, "error": null,
     "wall_s": 0.41}

`index` 0 is the starting program (the spec). Before it, the log's first line says where its
evaluations come from, so that they can be learned from later (`agent.perfllm.experience`):

    {"spec": "kernel softmax(x) -> y ...", "prefix": [...], "target": "native", "method": "sa", "graph": "edges"}

`resume` reads a log back: the cache, the count of evaluations and the best program (replayed from
its moves) are as they were when it was written.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dojo_ir import Program, to_text
from dojo_ir.analysis import Analysis
from dojo_ir.moves import apply, why_not
from dojo_ir.paths import without_comments
from runner.measure import Runner

INF = math.inf


def text_key(text: str) -> str:
    """The key of a text in the caches and logs: the first 32 hex digits of its sha256."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def text_hash(program: Program) -> str:
    """The key of what `program` computes: that of its canonical text without comments or
    derivation. The one hash of a program's text: the evaluator's cache and log, the editor's
    measurements and ratings, the agent's embeddings and a library's `spec_hash` all use it."""
    return text_key(to_text(without_comments(program)))


def replay_moves(start: Program, moves: Sequence[str]) -> tuple[Program, list[str]]:
    """`start` after every move of `moves` that applies, in order; a move that does not apply
    (no longer legal, or naming something that is gone) is skipped. Returns the program and the
    moves that applied, which replay exactly."""
    program, applied = without_comments(start), []
    for move in moves:
        analysis = Analysis(program)
        if why_not(program, move, analysis) is not None:  # malformed, or stale: skipped, as documented
            continue
        program = apply(program, move, analysis)
        applied.append(move)
    return program, applied


@dataclass(frozen=True)
class Evaluation:
    """One real evaluation, as logged."""

    index: int
    moves: tuple[str, ...]
    hash: str
    median_s: float | None
    ok: bool
    error: str | None
    wall_s: float

    @property
    def cost(self) -> float:
        return self.median_s if self.ok and self.median_s is not None else INF

    def to_json(self) -> dict:
        return {"index": self.index, "moves": list(self.moves), "hash": self.hash, "median_s": self.median_s,
                "ok": self.ok, "error": self.error, "wall_s": round(self.wall_s, 4)}

    @classmethod
    def from_json(cls, d: dict) -> Evaluation:
        return cls(int(d["index"]), tuple(d["moves"]), str(d["hash"]), d.get("median_s"), bool(d["ok"]),
                   d.get("error"), float(d.get("wall_s", 0.0)))


def log_text(path: Path) -> str:
    """A log's text. A finished log kept compressed (`NAME.jsonl.gz`, gzip, as bench/results keeps
    its runs) reads the same, named with `.gz` or without."""
    packed = path if path.suffix == ".gz" else path.with_name(path.name + ".gz")
    if packed is not path and (path.exists() or not packed.exists()):
        return path.read_text(encoding="utf-8")
    return gzip.decompress(packed.read_bytes()).decode("utf-8")


def read_log(path: Path) -> tuple[dict[str, Any] | None, list[Evaluation]]:
    """A log's first line (None in a log older than it) and its evaluations, in order; a torn line
    (a crash while writing) is left out. `log_text` says which files it reads."""
    header, evaluations = None, []
    for number, line in enumerate(log_text(path).splitlines()):
        try:
            record = json.loads(line)
            if number == 0 and isinstance(record, dict) and "spec" in record:
                header = record
            else:
                evaluations.append(Evaluation.from_json(record))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return header, evaluations


class BudgetExhausted(Exception):
    """Raised by `evaluate` when a new program would need an evaluation beyond the budget, the
    time limit has passed, or `should_stop` said so."""


class Evaluator:
    """Times programs derived from `spec`, each at most once.

    `start` is the program the search starts from (the spec after `prefix`); the moves given to
    `evaluate` follow it. `budget` counts the evaluations after evaluation 0 (the start);
    `evaluate` raises BudgetExhausted rather than exceed it. `on_evaluation` is called after each
    real evaluation. `source` names what searched (`method`, `graph`) in the log's first line."""

    def __init__(self, spec: Program, *, prefix: Sequence[str] = (), runner: Runner | None = None,
                 target: str = "native", repeats: int = 3, warmup: int = 1, log: Path | None = None,
                 budget: int | None = None, time_limit_s: float | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_evaluation: Callable[[Evaluation, bool], None] | None = None,
                 source: dict[str, str] | None = None):
        if runner is None:
            from runner.local import LocalRunner

            runner = LocalRunner()
        self.spec = without_comments(spec)
        self.prefix = list(prefix)
        self.start, applied = replay_moves(self.spec, self.prefix)
        if applied != self.prefix:
            raise ValueError("the starting moves do not all apply to the spec")
        self.runner = runner
        self.target = target
        self.repeats = repeats
        self.warmup = warmup
        self.log = log
        self.budget = budget
        self.time_limit_s = time_limit_s
        self.should_stop = should_stop
        self.on_evaluation = on_evaluation
        self.source = dict(source or {})
        self.cache: dict[str, float] = {}
        self.moves_of: dict[str, tuple[str, ...]] = {}  # the first moves that reached each program
        self.evaluations = 0  # real evaluations after evaluation 0
        self.history: list[tuple[int, float]] = []  # (evaluation index, best cost so far)
        self.best_cost = INF
        self.best_moves: tuple[str, ...] = ()
        self.best_program: Program = self.start
        self.started = time.monotonic()
        self._next_index = 0

    # -- the budget ---------------------------------------------------------------------------

    def stopped(self) -> bool:
        """Whether no further evaluation may start (budget, time limit or `should_stop`)."""
        if self.budget is not None and self._next_index > self.budget:
            return True
        if self.time_limit_s is not None and time.monotonic() - self.started >= self.time_limit_s:
            return True
        return self.should_stop is not None and self.should_stop()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    # -- evaluating -----------------------------------------------------------------------------

    def program(self, moves: Sequence[str]) -> tuple[Program, list[str]]:
        """The program that `moves` (after the start) make, and the moves that applied."""
        return replay_moves(self.start, moves)

    def known(self, program: Program) -> float | None:
        return self.cache.get(text_hash(program))

    def evaluate(self, moves: Sequence[str], program: Program | None = None) -> float:
        """The cost of the program that `moves` make from the start: its median time in seconds,
        +inf when it failed or did not verify. Cached by the program's canonical text."""
        if program is None:
            program, applied = self.program(moves)
            moves = applied
        key = text_hash(program)
        if key in self.cache:
            return self.cache[key]
        if self._next_index > 0 and self.stopped():
            raise BudgetExhausted
        began = time.monotonic()
        try:
            result = self.runner.run(program, target=self.target, repeats=self.repeats, warmup=self.warmup,
                                     spec=self.spec)
            median, ok, error = result.median_s, result.ok, result.error
            if not ok and error is None:
                error = "the outputs differ from the spec's" if result.verified is False else "not verified"
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as failure:  # noqa: BLE001 - a runner failure is this candidate's cost
            median, ok, error = None, False, f"{type(failure).__name__}: {failure}"
        full = tuple(self.prefix) + tuple(moves)
        evaluation = Evaluation(self._next_index, full, key, median, ok, error, time.monotonic() - began)
        self._record(evaluation, program)
        return evaluation.cost

    def _record(self, evaluation: Evaluation, program: Program | None) -> None:
        if self.log is not None:
            self._append([self.header(), evaluation.to_json()] if evaluation.index == 0 else [evaluation.to_json()])
        before = self.best_cost
        self._absorb(evaluation, program)
        improved = evaluation.index == 0 or evaluation.cost < before
        if self.on_evaluation is not None:
            self.on_evaluation(evaluation, improved)

    def _append(self, records: list[dict[str, Any]]) -> None:
        assert self.log is not None
        with open(self.log, "a+b") as out:
            end = out.tell()
            torn = end > 0 and out.seek(end - 1) >= 0 and out.read(1) != b"\n"
            # a torn last line (a crash mid-write) stays alone on its line, rather than swallow this record
            text = ("\n" if torn else "") + "".join(json.dumps(record) + "\n" for record in records)
            out.write(text.encode())

    def _absorb(self, evaluation: Evaluation, program: Program | None) -> None:
        self.cache[evaluation.hash] = evaluation.cost
        self.moves_of.setdefault(evaluation.hash, evaluation.moves[len(self.prefix):])
        if evaluation.index > 0:
            self.evaluations = evaluation.index
        self._next_index = evaluation.index + 1
        if evaluation.cost < self.best_cost or not self.history:
            self.best_cost = evaluation.cost
            self.best_moves = evaluation.moves[len(self.prefix):]
            self.best_program = program if program is not None else self.program(self.best_moves)[0]
        self.history.append((evaluation.index, self.best_cost))

    # -- the log --------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The log's first line: the spec, the moves before the start, the target, `source`, and the
        facts of the machine that timed the programs when the runner knows them (a local runner
        does; a remote one's machine is not this one), which the cost model reads its times by."""
        facts = getattr(self.runner, "machine_facts", None)
        machine = facts(self.target) if facts is not None else None
        return {"spec": to_text(self.spec), "prefix": self.prefix, "target": self.target, **self.source,
                **({"machine": machine} if machine else {})}

    def resume(self, log: Path) -> int:
        """Restore the cache, the count and the best program from `log` (written by an evaluator
        of the same start); returns how many evaluations it held. A log of another start is
        refused with ValueError; a torn last line (a crash while writing) is ignored."""
        if not log.exists():
            return 0
        _, entries = read_log(log)
        if not entries:
            return 0
        if entries[0].index != 0 or entries[0].hash != text_hash(self.start):
            raise ValueError(f"{log} is the log of another starting program; remove it or tune without --resume")
        for evaluation in entries:
            self._absorb(evaluation, None)
        return len(entries)

    def ranked(self) -> list[tuple[float, tuple[str, ...]]]:
        """Every distinct program evaluated with a finite cost, cheapest first: (cost, moves)."""
        found = [(cost, self.moves_of[key]) for key, cost in self.cache.items() if cost < INF]
        return sorted(found, key=lambda item: (item[0], len(item[1])))
