"""`tune`: the one entry point to the passes and the searches, for the CLI and the editor.

    result = tune(spec, KernelTuneOptions("sa", 50), spec_path="softmax.dojo", log=Path("out.dojo.jsonl"))
    result.program      # the best program, its derivation recorded from `spec_path`
    result.time_s       # its time, measured again for at least `final_min_time_s`

Evaluation 0 is the starting program (the spec, or the spec after `prefix`); the budget counts
the evaluations after it. A pass (`naive`, `greedy`, `heuristic`) spends one evaluation. A search
(`random`, `sa`) spends up to `budget`, stopping earlier at `time_limit_s`, when `should_stop()`
says so (polled between evaluations), or when it keeps meeting programs it knows. `agent` lets
the learned agent of `checkpoint` (`agent.learned`: by default the cost model shipped with the
project, whose ranked search measures only the candidates it ranks best and refits it on their
times) search until the budget is spent. Then, as
single timings of a few repetitions are noisy, the best few distinct programs and the start are
measured again with `runner.measure.measure` and the fastest of those wins; a pass's result is
measured again with the start. A search stopped by `should_stop` skips that step and returns
the best so far as the search timed it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.targets import Target, get_target
from dojo_ir import Program
from dojo_ir.derivation import record
from dojo_ir.paths import without_comments
from runner.measure import Runner, measure

from . import methods
from .evaluate import INF, BudgetExhausted, Evaluation, Evaluator, text_hash
from .methods import AGENT, GRAPH
from .passes import PASSES
from .search import METHODS, make_graph

FINALISTS = 3


@dataclass(frozen=True)
class TuneProgress:
    """Where a tuning run is, after each evaluation. Times are in seconds, None while unknown
    (or when every program so far failed). `best_moves` are the best program's moves from the
    spec; `improved` says whether this evaluation found a new best."""

    evaluations: int
    budget: int
    best_s: float | None
    spec_s: float | None
    speedup: float | None
    eta_s: float | None
    improved: bool = False
    best_moves: tuple[str, ...] = ()


@dataclass(frozen=True)
class TuneResult:
    """The outcome. `program` is the winner with its derivation recorded (`spec_path` plus
    `moves`, every move from the spec); `time_s` and `spec_s` are the final measurements of the
    winner and of the start; `history` is (evaluation index, best time so far) after each
    evaluation, evaluation 0 being the start, for convergence plots (inf while none succeeded)."""

    program: Program
    moves: list[str]
    time_s: float | None
    spec_s: float | None
    evaluations: int
    history: list[tuple[int, float]] = field(default_factory=list)
    method: str = ""
    graph: str = ""
    stopped_early: bool = False

    @property
    def speedup(self) -> float | None:
        if self.time_s is None or self.spec_s is None or self.time_s <= 0:
            return None
        return self.spec_s / self.time_s

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "graph": self.graph, "moves": self.moves, "time_s": self.time_s,
                "spec_s": self.spec_s, "speedup": self.speedup, "evaluations": self.evaluations,
                "stopped_early": self.stopped_early,
                "history": [[i, None if math.isinf(t) else t] for i, t in self.history]}


def _graph_of(method: str, graph: str) -> str:
    """The graph `method` searches: the agent plays one move at a time, the passes search none."""
    return graph if method in METHODS else "edges" if method == AGENT else ""


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


@dataclass(frozen=True)
class KernelTuneOptions:
    """The settings of one kernel's tuning: `method` (naive, greedy, heuristic, random, sa or
    agent) within `budget` evaluations, timed for `target`. A search walks `graph` from `seed`
    and stops at `time_limit_s`; the agent searches with the one trained in `checkpoint` (None:
    the shipped one). `resume` retraces the evaluations the log holds before going on. Each
    evaluation takes `repeats` runs; the best `finalists` are measured again for at least
    `final_min_time_s` each. Raises ValueError for an unknown method or a negative budget."""

    method: str
    budget: int
    graph: str = GRAPH
    target: str = "native"
    seed: int = 0
    time_limit_s: float | None = None
    resume: bool = False
    repeats: int = 3
    finalists: int = FINALISTS
    final_min_time_s: float = 1.0
    checkpoint: Path | None = None

    def __post_init__(self) -> None:
        if self.method not in methods.METHODS:
            raise ValueError(f"unknown method `{self.method}`; expected one of {', '.join(methods.METHODS)}")
        if self.budget < 0:
            raise ValueError(f"the budget must be at least 0, not {self.budget}")


def tune(spec: Program, options: KernelTuneOptions, *, spec_path: str, prefix: Sequence[str] = (),
         log: Path | None = None, runner: Runner | None = None,
         on_progress: Callable[[TuneProgress], None] | None = None,
         should_stop: Callable[[], bool] | None = None) -> TuneResult:
    """Tune `spec` as `options` say; see the module's docstring. `prefix` are moves already played
    from the spec (a derived file's): the search starts after them and the result's moves begin
    with them. Every evaluation goes to `log` when given."""
    method = options.method
    facts = get_target(options.target)
    if runner is None:
        from runner.local import LocalRunner

        runner = LocalRunner()
    stopped_by_user = False

    def stop() -> bool:
        nonlocal stopped_by_user
        if should_stop is not None and should_stop():
            stopped_by_user = True
        return stopped_by_user

    evaluator = Evaluator(spec, prefix=prefix, runner=runner, target=options.target, repeats=options.repeats,
                          warmup=1, log=log, budget=max(options.budget, 1) if method in PASSES else options.budget,
                          time_limit_s=options.time_limit_s, should_stop=stop,
                          source={"method": method, "graph": _graph_of(method, options.graph)})
    start_hash = text_hash(evaluator.start)
    _start(evaluator, log, options.resume, _reporter(evaluator, options, prefix, on_progress))
    candidates = _search(evaluator, options, facts, stop)
    if stopped_by_user:
        chosen = candidates[0] if method in PASSES else tuple(evaluator.best_moves)
        time_s = _finite(evaluator.known(evaluator.program(chosen)[0]) or INF)
        spec_s = _finite(evaluator.cache.get(start_hash, INF))
    else:
        chosen, time_s, spec_s = _final(evaluator, runner, options.target, candidates, method in PASSES,
                                        options.final_min_time_s)
    best_program, _ = evaluator.program(chosen)
    moves = list(prefix) + list(chosen)
    program = record(without_comments(best_program), moves, spec=spec_path)
    return TuneResult(program, moves, time_s, spec_s, evaluator.evaluations, list(evaluator.history), method,
                      options.graph if method in METHODS else "", stopped_by_user)


Reporter = Callable[[Evaluation | None, bool], None]


def _reporter(evaluator: Evaluator, options: KernelTuneOptions, prefix: Sequence[str],
              on_progress: Callable[[TuneProgress], None] | None) -> Reporter:
    """What the evaluator calls after each evaluation: `on_progress` told where the run is, its
    time to go estimated from the evaluations of this session (not those a resume retraced)."""
    start_hash = text_hash(evaluator.start)
    session_start = evaluator.evaluations

    def progress(evaluation: Evaluation | None, improved: bool) -> None:
        nonlocal session_start
        if on_progress is None:
            return
        if evaluation is None:  # a resumed log was retraced: this session starts here
            session_start = evaluator.evaluations
        spec_s = _finite(evaluator.cache.get(start_hash, INF))
        best = _finite(evaluator.best_cost)
        done = evaluator.evaluations
        fresh = done - session_start
        eta = None
        if fresh > 0:
            eta = evaluator.elapsed_s / fresh * max(0, evaluator.budget - done) if evaluator.budget else None
            if options.time_limit_s is not None:
                eta = min(eta if eta is not None else INF, max(0.0, options.time_limit_s - evaluator.elapsed_s))
        on_progress(TuneProgress(done, options.budget, best, spec_s, spec_s / best if spec_s and best else None, eta,
                                 improved, tuple(prefix) + tuple(evaluator.best_moves)))

    return progress


def _start(evaluator: Evaluator, log: Path | None, resume: bool, progress: Reporter) -> None:
    """Evaluation 0, after retracing `log` when resuming (else the log starts empty)."""
    evaluator.on_evaluation = progress
    if log is not None:
        if resume:
            if evaluator.resume(log):
                progress(None, True)
        else:
            log.write_text("", encoding="utf-8")
    evaluator.evaluate([])  # cached when resumed


def _search(evaluator: Evaluator, options: KernelTuneOptions, facts: Target, stop: Callable[[], bool]
            ) -> list[tuple[str, ...]]:
    """Run the pass, the search or the agent; the candidates for the final measurement, best first."""
    if options.method in PASSES:
        moves = PASSES[options.method](evaluator.start, facts)
        program, applied = evaluator.program(moves)
        if not evaluator.stopped() or evaluator.known(program) is not None:
            try:
                evaluator.evaluate(applied, program)
            except BudgetExhausted:  # the user stopped before it ran
                pass
        return [tuple(applied)]
    if options.method == AGENT:
        from .learned import search_agent  # torch loads only here

        search_agent(evaluator.start, evaluator, checkpoint=options.checkpoint, target=options.target,
                     prefix=evaluator.prefix, seed=options.seed, should_stop=stop)
    else:
        METHODS[options.method](evaluator, make_graph(options.graph, evaluator, facts), options.seed)
    candidates = [moves for _, moves in evaluator.ranked()[:options.finalists]]
    return candidates or [tuple(evaluator.best_moves)]


def _final(evaluator: Evaluator, runner: Runner, target: str, candidates: list[tuple[str, ...]], is_pass: bool,
           min_time_s: float) -> tuple[tuple[str, ...], float | None, float | None]:
    """Measure the candidates and the start again, for at least `min_time_s` each; the fastest
    candidate that verifies wins (a pass's one candidate wins whatever its time)."""
    timed: dict[tuple[str, ...], float] = {}
    for moves in dict.fromkeys([(), *candidates]):
        program, _ = evaluator.program(moves)
        result = measure(runner, program, target=target, repeats=max(evaluator.repeats, 3), warmup=1,
                         spec=evaluator.spec, min_time_s=min_time_s)
        timed[moves] = result.median_s if result.ok and result.median_s is not None else INF
    spec_s = _finite(timed[()])
    if is_pass:
        return candidates[0], _finite(timed[candidates[0]]), spec_s
    pool = [*candidates, ()]
    best = min(pool, key=lambda m: (timed[m], pool.index(m)))
    return best, _finite(timed[best]), spec_s
