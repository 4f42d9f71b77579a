"""`dojo model tune`: a model's library, its budget spent where the model's time goes.

    result = tune_model(Path("encoder.onnx"), Path("lib"), budget=200)
    result.before.total_s, result.after.total_s   # the model's time, heuristic library and tuned
    ModelRunner("encoder.onnx", "lib")            # runs on it as `dojo model run` does

1. The model is imported (`--fuse`: fused), its specs written to DIR/import/ as `dojo import`
   writes them.
2. Every kernel gets the heuristic pass, and DIR becomes the library of those (`build_library`,
   as `dojo library build --method heuristic` does).
3. The model is profiled on it (libgen/onnx/profile.py, in a fresh process).
4. Rounds of a few evaluations each go to the kernel whose expected gain in model time is largest
   (libgen/onnx/schedule.py, TVM's gradient-based task scheduler), its search going on from where
   its last round stopped (`tune_kernel`: the search retraces its logged evaluations at no cost).
   The search is `method`; by default (`auto`) a race between simulated annealing on the heuristic
   graph and the learned agent continuing the heuristic pass's program: each gets a round of the
   kernel, then the kernel's rounds go to whichever found the faster program (libgen/onnx/race.py
   says why). The agent always starts from the heuristic pass's program here: that is the library
   the tune starts from. Between profiles a
   kernel's time in the model is its profiled time scaled by how much faster its own best program
   got; once those estimates say the model got `REPROFILE_GAIN` faster, the library is rebuilt and
   the model profiled again. The rounds stop when the budget (evaluations of the searches, over
   every kernel) is spent, at the time limit (from the start), or when every search has run out
   of programs.
5. DIR's library is rebuilt of each kernel's best program, and the model profiled on it and on
   the heuristic library (kept in DIR/heuristic/), their runs in turn so that the machine's other
   work weighs on both alike. A kernel whose tuned program took longer in the model than its
   heuristic one (the rounds timed it alone) gets the heuristic one back, and the two are
   profiled again. The summary (the model's time before and after, and where the
   budget went) is printed and written to DIR/tune.txt.

DIR/tune.json holds the state after each round: an interrupted tune, run again with `resume`,
goes on from the last round it finished (the interrupted round's evaluations are in its kernel's
log and cost nothing the second time), with the same model and options; a larger budget goes on
further. A tune that finished is not run again, but its libraries are written again (and the
model profiled on them) when the C this version generates for their programs differs. On a
`Cluster`, the `cluster.slots` kernels of largest expected gain each get a round at once.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.evaluate import read_log, replay_moves, text_hash
from agent.methods import AGENT, AUTO, CONTENDERS, GRAPH, METHODS, SEARCHES
from agent.tune import KernelTuneOptions
from dojo_ir import to_text
from dojo_ir.derivation import record
from dojo_ir.paths import without_comments
from runner.files import write_atomically
from runner.measure import Runner
from runner.result import format_time

from ..build import (
    BuildEvent,
    BuildOptions,
    TuningPlan,
    build_library,
    interruptible_result,
    search_log,
    stale_sources,
    tune_kernel,
    write_library,
)
from ..cluster import Cluster
from ..kernels import KernelSpec, LibraryError
from ..manifest import Tuned, read_json, read_tuned, write_json
from .profile import DEFAULT_REPEATS, ModelProfile, profile_in_subprocess
from .race import Entrant, next_entrant
from .run import RunError
from .schedule import Task, estimated_model_s, next_tasks

STATE, SUMMARY, IMPORT, HEURISTIC = "tune.json", "tune.txt", "import", "heuristic"
ROUND = 8  # evaluations a round gives a kernel: enough for a search to move, few enough to switch often
BUDGET_PER_KERNEL = 20  # the budget when neither it nor a time limit is given: this many per kernel
REPROFILE_GAIN = 0.1
MIN_TIME_S = 0.2  # the final measurement of each round's best programs, each at least this long
STATE_FORMAT = 2


class TuneError(Exception):
    """Bad options, a model that cannot be tuned, or a directory holding another tune; the message
    names what is wrong."""


@dataclass(frozen=True)
class TuneOptions:
    """How the kernels are tuned: `method` and `graph` as `dojo tune` takes them, or `auto` (the
    race of CONTENDERS), `round_size` evaluations a round, the profiles' `repeats`, the library's
    `name`."""

    method: str = AUTO
    graph: str = GRAPH
    seed: int = 0
    fuse: bool = False
    round_size: int = ROUND
    target: str = "native"
    name: str = "dojo"
    repeats: int = DEFAULT_REPEATS
    min_time_s: float = MIN_TIME_S
    checkpoint: Path | None = None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # as --input-shape fixes them

    def identity(self) -> dict[str, Any]:
        """What a resumed tune must share with the one it goes on from."""
        searches = any(method in SEARCHES for method in self.contenders)
        return {"method": self.method, "graph": self.graph if searches else "", "seed": self.seed,
                "fuse": self.fuse, "round_size": self.round_size, "target": self.target, "name": self.name,
                **({"input_shapes": {n: list(s) for n, s in self.input_shapes}} if self.input_shapes else {})}

    @property
    def contenders(self) -> tuple[str, ...]:
        """The methods each kernel's rounds may go to."""
        return CONTENDERS if self.method == AUTO else (self.method,)


@dataclass(frozen=True)
class TuneEvent:
    """What a tune tells as it goes: `kind` is "stage", "progress" (within a round) or "round";
    `spent` evaluations of `budget` (None: no budget), `elapsed_s` of `time_limit_s`."""

    kind: str
    message: str
    spent: int
    budget: int | None
    elapsed_s: float
    time_limit_s: float | None


@dataclass(frozen=True)
class TuneResult:
    """`before` and `after` are the model on the heuristic library and on the tuned one, profiled
    in turn; `tasks` say what each kernel got."""

    directory: Path
    before: ModelProfile
    after: ModelProfile
    tasks: tuple[Task, ...]
    spent: int
    budget: int | None
    elapsed_s: float
    summary: str
    reverted: tuple[str, ...] = ()  # kernels whose tuned program ran slower in the model: the heuristic's kept
    programs: tuple[tuple[str, str], ...] = ()  # (kernel, the method whose program the library holds)

    @property
    def speedup(self) -> float:
        return self.before.total_s / self.after.total_s if self.after.total_s > 0 else 0.0


@dataclass
class _Tune:
    """One tune's state, as DIR/tune.json holds it."""

    model: Path
    out: Path
    options: TuneOptions
    specs: list[KernelSpec]
    budget: int | None
    time_limit_s: float | None
    emit: Callable[[TuneEvent], None]
    started: float = field(default_factory=time.monotonic)
    identity: dict[str, Any] = field(default_factory=dict)
    initial: ModelProfile | None = None  # the heuristic library's, which the rounds started from
    latest: ModelProfile | None = None
    tasks: list[Task] = field(default_factory=list)
    best: dict[str, Tuned] = field(default_factory=dict)  # each kernel's program as its rounds chose it
    heuristic: dict[str, Tuned] = field(default_factory=dict)  # each kernel's heuristic program
    entrants: dict[str, tuple[Entrant, ...]] = field(default_factory=dict)  # each kernel's, one a contender
    rounds: list[dict[str, Any]] = field(default_factory=list)
    spent: int = 0
    elapsed_before_s: float = 0.0  # what the interrupted runs of this tune took

    # -- the state ----------------------------------------------------------------------------------

    @property
    def elapsed_s(self) -> float:
        return self.elapsed_before_s + time.monotonic() - self.started

    def remaining_s(self) -> float | None:
        return None if self.time_limit_s is None else self.time_limit_s - (time.monotonic() - self.started)

    def tell(self, kind: str, message: str) -> None:
        self.emit(TuneEvent(kind, message, self.spent, self.budget, time.monotonic() - self.started,
                            self.time_limit_s))

    def save(self, summary: dict[str, Any] | None = None) -> None:
        assert self.initial is not None and self.latest is not None
        state = {"format": STATE_FORMAT, "identity": self.identity, "initial": self.initial.to_json(),
                 "latest": self.latest.to_json(), "tasks": [asdict(task) for task in self.tasks],
                 "best": {name: tuned.to_json() for name, tuned in self.best.items()},
                 "entrants": {name: [asdict(e) for e in entrants] for name, entrants in self.entrants.items()},
                 "heuristic": {name: tuned.to_json() for name, tuned in self.heuristic.items()}, "rounds": self.rounds,
                 "spent": self.spent, "elapsed_s": round(self.elapsed_s, 3)}
        write_json(self.out / STATE, {**state, **({"summary": summary} if summary else {})})

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise TuneError(f"{self.out / STATE}: error: the state of a tune by another version of PerfDojo "
                            f"(format {state.get('format')!r}, not {STATE_FORMAT}); remove it to start afresh")
        try:
            self.initial = ModelProfile.from_json(state["initial"])
            self.latest = ModelProfile.from_json(state["latest"])
            self.tasks = [Task(**{**task, "history": tuple(task["history"])}) for task in state["tasks"]]
            self.best = {name: Tuned.from_json(data) for name, data in state["best"].items()}
            self.heuristic = {name: Tuned.from_json(data) for name, data in state["heuristic"].items()}
            self.entrants = {name: tuple(Entrant(**e) for e in entrants)
                             for name, entrants in state["entrants"].items()}
            self.rounds, self.spent = list(state["rounds"]), int(state["spent"])
            self.elapsed_before_s = float(state["elapsed_s"])
        except (KeyError, TypeError, ValueError) as error:
            raise TuneError(f"{self.out / STATE}: error: not the state of `dojo model tune` ({error!r}); remove "
                            "it to start afresh") from None

    # -- the stages ---------------------------------------------------------------------------------

    def profile(self, *others: Path) -> list[ModelProfile]:
        """The model profiled on DIR's library as it is now, and on the libraries `others`."""
        self.tell("stage", f"{self.model.name}: profiling on {', '.join(map(str, [self.out, *others]))}")
        try:
            return profile_in_subprocess(self.model, [self.out, *others], self.options.fuse, self.options.repeats,
                                         self.options.seed, dict(self.options.input_shapes))
        except RunError as error:
            raise TuneError(f"{self.model}: error: cannot profile the model on its library: {error}") from None

    def write(self) -> None:
        """DIR's library of each kernel's best program, its files naming that program."""
        by_name = {spec.name: spec for spec in self.specs}
        for name, tuned in self.best.items():
            spec = by_name[name]
            program, _ = replay_moves(spec.program, tuned.moves)
            derived = record(without_comments(program), list(tuned.moves), spec=f"{name}.spec.dojo")
            write_atomically(self.out / "kernels" / f"{name}.dojo", to_text(derived).encode())
            write_json(self.out / "kernels" / f"{name}.json", tuned.to_json())
        write_library(self.out, self.options.name, self.specs, self.best, self.options.target)

    def build_heuristic(self, runner: Runner | None, cluster: Cluster | None,
                        should_stop: Callable[[], bool] | None) -> None:
        """Stages 2 and 3: the heuristic library and its profile, which the tasks start from."""
        self.tell("stage", f"{self.model.name}: {len(self.specs)} kernels, the heuristic pass on each")

        def forward(event: BuildEvent) -> None:
            if event.kind in ("tuned", "skipped"):
                self.tell("progress", event.message)

        tuning = KernelTuneOptions("heuristic", 1, target=self.options.target, final_min_time_s=self.options.min_time_s)
        build_library(self.specs, self.out, BuildOptions(tuning, name=self.options.name), runner=runner,
                      cluster=cluster, on_event=forward, should_stop=should_stop)
        self.best = {spec.name: _record(self.out, spec) for spec in self.specs}
        self.heuristic = dict(self.best)
        self.keep_heuristic()
        [self.initial] = self.profile()
        self.latest = self.initial
        for spec in self.specs:
            own = self.best[spec.name].time_s
            calls = next((k for k in self.initial.kernels if k.kernel == spec.name), None)
            self.tasks.append(Task(spec.name, calls.time_s if calls else 0.0, own or 0.0, (own or 0.0,),
                                   done=calls is None or not own))
            self.entrants[spec.name] = tuple(Entrant(method, self.inherit(spec, method))
                                             for method in self.options.contenders)
        self.save()

    def keep_heuristic(self) -> None:
        """DIR/heuristic: the library DIR holds now, the heuristic pass's, kept to profile the tuned one against."""
        manifest = read_json(self.out / "manifest.json")
        kept = self.out / HEURISTIC
        kept.mkdir(exist_ok=True)
        for name in (manifest["shared_library"], "manifest.json"):
            shutil.copy2(self.out / name, kept / name)

    def rewrite_heuristic(self) -> None:
        """DIR/heuristic written again from the heuristic pass's programs, by this version's generator."""
        write_library(self.out, self.options.name, self.specs, self.heuristic, self.options.target)
        self.keep_heuristic()

    def start_of(self, spec: KernelSpec, method: str) -> KernelSpec:
        """The kernel as `method`'s rounds search it: the agent continues the heuristic pass's
        program, the others start from the spec (the searches' graphs hold the pass's moves)."""
        return replace(spec, prefix=self.heuristic[spec.name].moves) if _continues(method) else spec

    def inherit(self, spec: KernelSpec, method: str) -> int:
        """Start `method`'s log of `spec` with the heuristic pass's evaluations, which a search
        from the spec (whose graph starts from the pass's moves) then need not make again; how many
        it got."""
        pass_log = search_log(self.out, spec.name, "heuristic")
        log = search_log(self.out, spec.name, method, self.options.graph if method in SEARCHES else "")
        if not pass_log.exists() or _continues(method):
            return 0
        if log != pass_log:  # with --method heuristic, the rounds go on in the pass's own log
            shutil.copy2(pass_log, log)
        return sum(1 for evaluation in read_log(log)[1] if evaluation.index > 0)

    def reprofile(self) -> None:
        assert self.latest is not None
        self.write()
        [self.latest] = self.profile()
        times = {k.kernel: k.time_s for k in self.latest.kernels}
        self.tasks = [task.profiled(times.get(task.kernel, 0.0)) for task in self.tasks]

    def rest_s(self) -> float:
        """The model's time that no kernel takes: ONNX Runtime's parts and the copies."""
        assert self.latest is not None
        return self.latest.total_s - sum(k.time_s for k in self.latest.kernels)


def _continues(method: str) -> bool:
    """Whether `method`'s rounds start from the heuristic pass's program rather than the spec."""
    return method == AGENT


def _record(out: Path, spec: KernelSpec) -> Tuned:
    tuned = read_tuned(out / "kernels" / f"{spec.name}.json")
    assert tuned is not None  # build_library wrote it
    return tuned


def _specs(model: Path, options: TuneOptions) -> tuple[Any, list[KernelSpec]]:
    from .importer import ModelError, import_model
    from .shapes import ShapeError

    try:
        imported = import_model(model, fuse=options.fuse, input_shapes=dict(options.input_shapes))
    except (ModelError, ShapeError) as error:
        raise TuneError(str(error)) from None
    if not imported.kernels:
        raise TuneError(f"{model}: error: no node of the model has a kernel: there is nothing to tune")
    return imported, [KernelSpec(name, text, f"{imported.model}: kernel {name}")
                      for name, text in imported.kernels.items()]


def _check(model: Path, out: Path, budget: int | None, time_limit_s: float | None, options: TuneOptions) -> None:
    if not model.is_file():
        raise TuneError(f"{model}: error: no such file")
    if out.exists() and not out.is_dir():
        raise TuneError(f"{out}: error: not a directory")
    if budget is not None and budget < 0:
        raise TuneError(f"the budget must be at least 0 evaluations, not {budget}")
    if time_limit_s is not None and time_limit_s <= 0:
        raise TuneError(f"the time limit must be above 0 seconds, not {time_limit_s:g}")
    if options.method not in (AUTO, *METHODS):
        raise TuneError(f"unknown method `{options.method}`; expected one of {', '.join((AUTO, *METHODS))}")
    if options.round_size < 1:
        raise TuneError(f"a round must give at least 1 evaluation, not {options.round_size}")
    if options.repeats < 1:
        raise TuneError(f"the profiles' repeats must be at least 1, not {options.repeats}")


def tune_model(model: Path, out: Path, *, budget: int | None = None, time_limit_s: float | None = None,
               options: TuneOptions = TuneOptions(), resume: bool = False, runner: Runner | None = None,
               cluster: Cluster | None = None, on_event: Callable[[TuneEvent], None] | None = None,
               should_stop: Callable[[], bool] | None = None) -> TuneResult:
    """Tune the library of the model at `model` into `out` within `budget` evaluations and/or
    `time_limit_s` seconds (neither: `BUDGET_PER_KERNEL` evaluations per kernel); see the module's
    docstring. Raises TuneError for bad options, a model
    that cannot be imported or a directory that holds another tune, KeyboardInterrupt when
    interrupted (DIR/tune.json then holds every round that finished)."""
    _check(model, out, budget, time_limit_s, options)
    imported, specs = _specs(model, options)
    if budget is None and time_limit_s is None:
        budget = BUDGET_PER_KERNEL * len(specs)
    tune = _Tune(model, out, options, specs, budget, time_limit_s, on_event or (lambda _: None))
    tune.identity = {"model": imported.model, "kernels": {s.name: text_hash(s.program) for s in specs},
                     **options.identity()}
    state = read_json(out / STATE) if (out / STATE).exists() else None
    if state is not None and not resume:
        finished = _finished(tune, state)
        if finished is None:
            raise TuneError(f"{out}: error: it holds a tune already ({out / STATE}), unfinished or with another "
                            "budget, time limit or options; --resume goes on with it, or give another directory")
        return finished
    if state is not None:
        if state.get("identity") != tune.identity:
            raise TuneError(f"{out}: error: --resume: its tune is of another model or import, or with other "
                            f"options ({_differences(state.get('identity'), tune.identity)}); give another "
                            "directory")
        tune.restore(state)
        tune.tell("stage", f"{model.name}: resuming after {len(tune.rounds)} rounds, {tune.spent} evaluations")
    from .importer import write_import

    out.mkdir(parents=True, exist_ok=True)
    write_import(imported, out / IMPORT)
    if state is None:
        tune.build_heuristic(runner, cluster, should_stop)
    _rounds(tune, runner, cluster, should_stop)
    return _finish(tune)


def _finished(tune: _Tune, state: dict[str, Any]) -> TuneResult | None:
    """The result of the tune that `state` holds when it finished with the same model, options,
    budget and time limit: run again, the command has nothing to do, unless an earlier version of
    PerfDojo wrote its libraries' C; then they are written again from the same programs and
    profiled as at the end of a tune."""
    summary = state.get("summary")
    if state.get("identity") != tune.identity or not isinstance(summary, dict) or \
            summary.get("budget") != tune.budget or summary.get("time_limit_s") != tune.time_limit_s:
        return None
    tune.restore(state)
    try:
        before, after = ModelProfile.from_json(summary["before"]), ModelProfile.from_json(summary["after"])
        text = (tune.out / SUMMARY).read_text(encoding="utf-8").rstrip("\n")
        reverted = tuple(summary["reverted"])
    except (KeyError, TypeError, ValueError, OSError):
        return None
    stale = stale_sources(tune.out, tune.options.name, tune.specs, tune.best, tune.options.target)
    if stale:
        # the programs stand, but the C of an earlier version's generator would keep its faults and miss its gains
        tune.tell("stage", f"{tune.model.name}: tuned in {tune.out} by an earlier version of PerfDojo ({len(stale)} "
                           "C units differ from what it writes now): writing both libraries again")
        tune.rewrite_heuristic()
        return _finish(tune)
    tune.tell("stage", f"{tune.model.name}: already tuned in {tune.out} with this budget and these options "
                       "(--resume with a larger budget goes on)")
    return TuneResult(tune.out, before, after, tuple(tune.tasks), tune.spent, tune.budget, tune.elapsed_s, text,
                      reverted, _programs(tune))


def _differences(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "unreadable"
    keys = [k for k in new if old.get(k) != new[k]]
    return ", ".join(f"{k}: {old.get(k)!r} there, {new[k]!r} now" if k != "kernels" else "the kernels' specs"
                     for k in keys) or "unreadable"


def _rounds(tune: _Tune, runner: Runner | None, cluster: Cluster | None,
            should_stop: Callable[[], bool] | None) -> None:
    """Stage 4: rounds until the budget, the time or the searches run out."""
    parallel = 1
    if cluster is not None:
        runner, parallel = cluster.runner(), max(1, cluster.slots)
    assert tune.latest is not None
    profiled_s = tune.latest.total_s
    while True:
        left = None if tune.budget is None else tune.budget - tune.spent
        remaining = tune.remaining_s()
        chosen = next_tasks(tune.tasks, parallel)
        if not chosen or (left is not None and left <= 0) or (remaining is not None and remaining <= 0):
            return
        for i, (entrant, tuned) in _run_rounds(tune, _grants(chosen, tune.options.round_size, left), runner,
                                               remaining, should_stop).items():
            _absorb(tune, i, entrant, tuned)
        tune.save()
        remaining = tune.remaining_s()
        more = (tune.budget is None or tune.spent < tune.budget) and (remaining is None or remaining > 0)
        if more and estimated_model_s(tune.tasks, tune.rest_s()) <= (1 - REPROFILE_GAIN) * profiled_s:
            tune.reprofile()
            profiled_s = tune.latest.total_s
            tune.save()


def _grants(chosen: Sequence[int], round_size: int, left: int | None) -> dict[int, int]:
    """The evaluations each chosen task gets this round, within what is left of the budget."""
    grants = {}
    for i in chosen:
        grant = round_size if left is None else min(round_size, left)
        if grant <= 0:
            break
        grants[i] = grant
        left = None if left is None else left - grant
    return grants


def _run_rounds(tune: _Tune, grants: dict[int, int], runner: Runner | None, remaining: float | None,
                should_stop: Callable[[], bool] | None) -> dict[int, tuple[int, Tuned]]:
    """A round for each task of `grants`, at once on their own threads when there are several
    (on a cluster); an interruption stops them all after their current evaluation."""
    if len(grants) == 1:
        [(i, grant)] = grants.items()
        return {i: _round(tune, i, grant, runner, remaining, should_stop)}
    stopping = threading.Event()

    def stop() -> bool:
        if should_stop is not None and should_stop():
            stopping.set()
        return stopping.is_set()

    with ThreadPoolExecutor(max_workers=len(grants), thread_name_prefix="dojo-model-tune") as pool:
        futures = {i: pool.submit(_round, tune, i, grant, runner, remaining, stop) for i, grant in grants.items()}
        try:
            return {i: interruptible_result(future) for i, future in futures.items()}
        except BaseException:
            stopping.set()
            raise


def _round(tune: _Tune, i: int, grant: int, runner: Runner | None, remaining: float | None,
           should_stop: Callable[[], bool] | None) -> tuple[int, Tuned]:
    """Task `i`'s round of `grant` evaluations, by the method its entrants choose; which that was
    and what it gave."""
    task = tune.tasks[i]
    spec = next(s for s in tune.specs if s.name == task.kernel)
    chosen = next_entrant(tune.entrants[task.kernel])
    entrant = tune.entrants[task.kernel][chosen]
    before = tune.spent

    def forward(event: BuildEvent) -> None:
        if event.kind == "progress" and event.evaluations is not None:
            spent = before + max(0, event.evaluations - entrant.logged)
            tune.emit(TuneEvent("progress", f"{entrant.method}: {event.message}", spent, tune.budget,
                                time.monotonic() - tune.started, tune.time_limit_s))

    options = tune.options
    try:
        tuning = KernelTuneOptions(entrant.method, entrant.logged + grant, graph=options.graph, target=options.target,
                                   seed=options.seed, time_limit_s=remaining, final_min_time_s=options.min_time_s,
                                   checkpoint=options.checkpoint)
        plan = TuningPlan(tune.out, tuning)
        return chosen, tune_kernel(tune.start_of(spec, entrant.method), plan, runner, forward, should_stop)
    except (LibraryError, ValueError) as error:
        raise TuneError(f"{tune.model}: error: tuning kernel {spec.name}: {error}") from None


def _absorb(tune: _Tune, i: int, chosen: int, tuned: Tuned) -> None:
    """Task `i` after its round by its entrant `chosen` gave `tuned`."""
    task = tune.tasks[i]
    entrants = list(tune.entrants[task.kernel])
    entrant = entrants[chosen]
    spent = max(0, tuned.evaluations - entrant.logged)
    tune.spent += spent
    entrants[chosen] = entrant.after_round(entrant.logged + spent, tuned.time_s)
    tune.entrants[task.kernel] = tuple(entrants)
    best = tune.best.get(task.kernel)
    # a round measures its method's best few and the heuristic pass's program again, so its choice
    # replaces those; another method's program stays unless this one is faster
    if tuned.time_s is not None and (best is None or best.method in (tuned.method, "heuristic") or best.time_s is None
                                     or tuned.time_s < best.time_s):
        tune.best[task.kernel] = tuned
    task = replace(task.after_round(tuned.time_s, spent), done=all(e.exhausted for e in entrants))
    tune.tasks[i] = task
    tune.rounds.append({"kernel": task.kernel, "method": entrant.method, "evaluations": spent,
                        "best_s": task.best_s})
    estimate = estimated_model_s(tune.tasks, tune.rest_s())
    tune.tell("round", f"{task.kernel}: {entrant.method}, {spent} evaluations, best {format_time(task.best_s)} "
                       f"({task.history[0] / task.best_s:.2f}x its heuristic); model about {format_time(estimate)}")


def _finish(tune: _Tune) -> TuneResult:
    """Stage 5: the library of the best programs, its profile and the summary."""
    tune.tell("stage", f"{tune.model.name}: writing the library of the best programs")
    tune.write()
    after, before = tune.profile(tune.out / HEURISTIC)
    reverted = _slower(tune, before, after)
    if reverted:
        tune.tell("stage", f"{tune.model.name}: {', '.join(reverted)} ran slower in the model than the heuristic "
                           "pass's program: keeping that")
        tune.best.update((name, tune.heuristic[name]) for name in reverted)
        tune.write()
        after, before = tune.profile(tune.out / HEURISTIC)
    tune.latest = after
    summary = _summary(tune, before, after, reverted)
    write_atomically(tune.out / SUMMARY, (summary + "\n").encode())
    tune.save({"before_s": before.total_s, "after_s": after.total_s, "spent": tune.spent, "budget": tune.budget,
               "time_limit_s": tune.time_limit_s, "elapsed_s": round(tune.elapsed_s, 3), "before": before.to_json(),
               "after": after.to_json(), "reverted": reverted})
    return TuneResult(tune.out, before, after, tuple(tune.tasks), tune.spent, tune.budget, tune.elapsed_s,
                      summary, tuple(reverted), _programs(tune))


def _slower(tune: _Tune, before: ModelProfile, after: ModelProfile) -> list[str]:
    """The kernels whose tuned program took longer in the model than the heuristic pass's, the
    two libraries' runs taken in turn: the rounds measured each kernel alone, the model is what
    counts."""
    then = {k.kernel: k.time_s for k in before.kernels}
    return [k.kernel for k in after.kernels if tune.best[k.kernel].moves != tune.heuristic[k.kernel].moves
            and k.kernel in then and k.time_s > then[k.kernel]]


def _programs(tune: _Tune) -> tuple[tuple[str, str], ...]:
    return tuple((name, _made_by(tune, name)) for name in tune.best)


def _made_by(tune: _Tune, kernel: str) -> str:
    """The method whose program the library holds for `kernel`."""
    best = tune.best[kernel]
    return "heuristic" if best.moves == tune.heuristic[kernel].moves else best.method


def _summary(tune: _Tune, before: ModelProfile, after: ModelProfile, reverted: Sequence[str]) -> str:
    assert tune.initial is not None
    options = tune.options
    how = options.method + (f" ({options.graph} graph)" if options.method in SEARCHES else "")
    if options.method == AUTO:
        how += f" (sa on the {options.graph} graph against the agent continuing the heuristic pass's program)"
    elif options.method == AGENT:
        how += " (continuing the heuristic pass's program)"
    budget = "" if tune.budget is None else f" of {tune.budget}"
    lines = [f"{before.model}: {how}, {tune.spent}{budget} evaluations in {len(tune.rounds)} rounds, "
             f"{tune.elapsed_s:.0f} s in all",
             f"model time: {format_time(before.total_s)} with the heuristic library -> {format_time(after.total_s)} "
             f"tuned: {before.total_s / after.total_s:.2f}x (medians of {options.repeats} runs of each, in turn)"]
    rows = [("kernel", "share", "evaluations", "rounds", "program", "before", "after", "speedup")]
    shares = {k.kernel: k.share for k in tune.initial.kernels}  # what the rounds were given by
    then = {k.kernel: k for k in before.kernels}
    now = {k.kernel: k for k in after.kernels}
    for task in sorted(tune.tasks, key=lambda t: -then[t.kernel].time_s if t.kernel in then else 0.0):
        if task.kernel not in then or task.kernel not in now:
            continue
        was, new = then[task.kernel].time_s, now[task.kernel].time_s
        rows.append((task.kernel, f"{shares.get(task.kernel, 0.0):.1%}", str(task.evaluations), str(task.rounds),
                     _made_by(tune, task.kernel), format_time(was), format_time(new),
                     f"{was / new:.2f}x" if new > 0 else ""))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                        for c, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    rest = before.total_s - sum(k.time_s for k in before.kernels), after.total_s - sum(k.time_s for k in after.kernels)
    lines.append(f"ONNX Runtime and copies: {format_time(rest[0])} -> {format_time(rest[1])}")
    if reverted:
        lines.append(f"kept the heuristic pass's program of {', '.join(reverted)}: the tuned one ran slower in the "
                     "model")
    return "\n".join(lines)

