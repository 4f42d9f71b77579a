"""Searches that rank before they measure: the cost model scores every candidate, and only the best few
(with the one the roofline bound expects fastest, and one or two of other kinds) are timed; after
each batch the model is refit on what was measured.

    result = continue_ranked(program, model, host, 10, evaluator)   # play 10 moves from `program`
    result = search_ranked(program, model, host, evaluator)         # until the evaluator's budget is spent

A candidate is a program one step from one already measured: a legal move, or a compound step made
of single moves that alone are no faster than the program before them (`agent.compound`: a register
tile, fused nests with their temporaries folded). Its value is
the model's score of the best program within `lookahead` moves of it (itself included): a move that
pays only with the next one (an accumulator before the vector scope that it makes legal) is worth what the pair is
worth. The scores are the model's alone; the search adds no rule about which move pays.

Measured, a batch teaches the model this kernel: once `Ranked.refit_after` programs are measured, they
are one group for a few steps of refitting (`CostModel.refit`) after each batch, so that the next
batch is ranked by a model that has seen where it was wrong here. The model's file is left as it was.

`continue_ranked` plays one move a batch: the fastest candidate measured, or among those within the
timer's noise of it, the one of most value (a move that changes nothing measurable but makes a
paying one legal). The lookahead ranks what to measure; a measured time outweighs a prediction.
`search_ranked` keeps every program it measured, and takes each batch's candidates from the few
fastest of them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from codegen.targets import get_target
from dojo_ir import DojoError, Program
from dojo_ir.analysis import Analysis
from dojo_ir.moves import apply

from ..compound import compound_steps
from ..evaluate import BudgetExhausted, Evaluator
from ..legal import legal_moves
from ..lru import LeastRecentlyUsed
from ..perfllm.game import Cost, Costs
from ..perfllm.play import PlayResult, Step
from .data import Group
from .features import NAMES, Host, features
from .model import CostModel, Training


@dataclass(frozen=True)
class Ranked:
    """How a ranked search spends its measurements: `measure` candidates a batch by value, plus `explore`
    of kinds not measured yet or drawn at random (a search's programs get at most one move deeper a
    batch, so smaller batches reach further: on five kernels of real models at 60 evaluations, three
    seeds, batches of three rather than four gave 0.68 of the heuristic pass's speed-up against 0.64
    in scratch runs, 0.645 against 0.652 in bench/results/agent_real_kernels_zen4_batch3.md: no
    worse; batches of two did worse on the seeds tried); `lookahead` moves deep, through the
    `breadth` best-scored candidates at each depth (a search keeps what it measured and can come back,
    so it looks four moves ahead: on the same kernels that took the agent from 0.59 to 0.64, a strided
    convolution from 0.32-0.61 to 0.76); `refit_steps` gradient steps on what was measured after each
    batch (0: the model as it came) once `refit_after` programs have been measured (on fewer a refit
    fits their order and forgets what the model knew: on `make demo`'s softmax, refitting from the
    first batch took the ten-move game from 8-9x down to 4.5-4.9x); `parents`: how many of the fastest
    programs measured offer their moves to a batch of `search_ranked`; `by_roofline`: how many of the
    rest a batch takes by the roofline bound that the features compute from the loop structure and
    the machine's measured limits, a second opinion where the model is wrong about a kernel (on the
    five kernels of real models at 60 evaluations on an Intel Xeon, one a batch took the agent from
    0.457 of the heuristic pass's speed-up to 0.481 in geometric mean in the benchmark, three seeds,
    bench/results/agent_real_kernels_xeon207.md, and from 0.50 to 0.62 in scratch runs of two seeds
    run in turn; on `make demo`'s softmax, see CONTINUING)."""

    measure: int = 2
    explore: int = 1
    by_roofline: int = 1
    lookahead: int = 4
    breadth: int = 8
    refit_steps: int = 60
    refit_after: int = 30
    parents: int = 3


NOISE = 0.05  # relative differences of times measured once that may be the timer's: a tie for `continue_ranked`
# A continuation plays every step, so a batch that misses the move that pays costs the rest of the
# game; a search can come back for it. On `make demo`'s softmax (ten moves, three seeds and the demo's
# run), one exploring candidate a batch reached 2.7x, 3.0x, 8.0x and 8.1x; two reached 8.2-8.3x.
# It looks two moves ahead, not four: a game of ten moves has no time for what pays four moves on, and
# looking that far it measured promises instead of gains (two runs of the demo: 3.2x and 3.0x, against 11.1x).
# It measures three by value where a search measures two: it gets a move deeper every batch whatever the size.
# Its batches take the roofline's candidate too: on the demo's softmax the shipped model ranked the
# vector exp, the one move that halves the time, eighth of 133, and the kinds it explored found vector
# scopes on other lines first; without the roofline's candidate, ten moves could end without timing it.
CONTINUING = Ranked(measure=3, explore=2, lookahead=2)
_ROOFLINE = NAMES.index("program.bound_s")
_Reached = tuple[tuple[str, ...], Program]  # a program and its moves from the search's start
REMEMBERED = 1 << 14  # programs whose successors, and whose features (5 KB each), a game keeps at most


class _Identity:
    """A program as a key of the sets of programs met: its tree hashed once, where a set would hash
    it again at every lookup. Every program here comes from the uncommented start by moves, so two
    compute the same when their trees are equal."""

    __slots__ = ("program", "_hash")

    def __init__(self, program: Program):
        self.program, self._hash = program, hash(program)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and self._hash == other._hash and self.program == other.program


class _Step(NamedTuple):
    """What one step of the search adds to a program: a single move, or a compound step's moves
    (`agent.compound`); `text` says it in a game's steps, `kind` is what `Game.batch` explores by."""

    moves: tuple[str, ...]
    text: str
    kind: str
    program: Program
    identity: _Identity


@dataclass(frozen=True)
class _Candidate:
    moves: tuple[str, ...]  # from the search's start
    program: Program
    score: float  # the model's, of this program
    value: float  # the model's best score within the lookahead from it
    step: str  # the last step, as a game reports it
    kind: str  # the last step's kind


class _Game:
    """The model, what has been measured, and the candidates' scores."""

    def __init__(self, start: Program, model: CostModel, host: Host, evaluate: Evaluator | Cost, target: str,
                 prefix: Sequence[str], ranked: Ranked, seed: int):
        self.model, self.host, self.ranked = model, host, ranked
        self.facts = get_target(target)
        self.costs = Costs(start, evaluate)
        self.prefix = tuple(prefix)
        self.rng = random.Random(seed)
        self.met: set[_Identity] = {_Identity(self.costs.start)}
        # A batch's parents and lookahead are mostly the last batch's, so what a program's moves make
        # and what the model reads of it are kept for the game (on ShuffleNet's depthwise convolution,
        # printing programs to tell them apart and reading their features took 0.85 of a search's time).
        self._children = LeastRecentlyUsed(REMEMBERED)  # program -> (_Step, ...), its single moves
        self._compounds = LeastRecentlyUsed(REMEMBERED)  # program -> (_Step, ...), its compound steps
        self._features = LeastRecentlyUsed(REMEMBERED)  # moves from the start -> the model's features
        self.measured: list[tuple[tuple[str, ...], Program, float]] = []  # the programs that ran
        self.rows: list[np.ndarray] = []  # their features, when the search refits
        self.kinds_measured: set[str] = set()
        self.start_cost = self.costs.start_cost()
        self._ran((), self.costs.start, self.start_cost)
        self.best = (self.start_cost, self.costs.start, ())

    def _ran(self, moves: tuple[str, ...], program: Program, cost: float) -> None:
        self.measured.append((moves, program, cost))
        if self.ranked.refit_steps > 0:
            self.rows.append(self.features(moves, program))

    def features(self, moves: tuple[str, ...], program: Program) -> np.ndarray:
        found = self._features.get_fresh(moves)
        if found is None:
            found = features(program, self.host, self.prefix + moves)
            self._features.put(moves, found)
        return found

    def children(self, moves: tuple[str, ...], program: Program, seen: set[_Identity], compound: bool = False
                 ) -> list[tuple[_Reached, _Step]]:
        """The programs one step from `program` that are not in `seen` (which gains them), each with
        its moves from the search's start and the step that made it: a single move, or with `compound`
        also a compound step."""
        key = _Identity(program)
        every = self._children.get_fresh(key)
        if every is None:
            every = tuple(self._successors(program))
            self._children.put(key, every)
        if compound:
            steps = self._compounds.get_fresh(key)
            if steps is None:
                steps = tuple(_Step(c.moves, c.text, c.kind, c.program, _Identity(c.program))
                              for c in compound_steps(program, self.facts))
                self._compounds.put(key, steps)
            every += steps
        found = []
        for step in every:
            if step.identity not in seen:
                seen.add(step.identity)
                found.append((((*moves, *step.moves), step.program), step))
        return found

    def _successors(self, program: Program) -> Iterator[_Step]:
        analysis = Analysis(program)
        for move in legal_moves(program, self.facts):
            try:
                after = apply(program, move, analysis)
            except DojoError:
                continue
            yield _Step((str(move),), str(move), move.name, after, _Identity(after))

    def scores(self, programs: Sequence[_Reached]) -> np.ndarray:
        if not programs:
            return np.zeros(0)
        return self.model.score_features(np.stack([self.features(m, p) for m, p in programs]))

    def candidates(self, parents: Sequence[_Reached]) -> list[_Candidate]:
        """The unmet programs one step from `parents`, each valued by the best score within the lookahead
        (through single moves: through the compound steps too, it scores five times as many programs)."""
        seen = set(self.met)
        children = [child for moves, program in parents
                    for child in self.children(moves, program, seen, compound=True)]
        found = [reached for reached, _ in children]
        scores = self.scores(found)
        value = scores.copy()
        # the best-scored candidates look further; a program met on the way counts for the first that met it
        frontier = {i: [found[i]] for i in np.argsort(scores)[:self.ranked.breadth]}
        for _ in range(self.ranked.lookahead - 1):
            reached = {i: [c for m, p in programs for c, _ in self.children(m, p, seen)]
                       for i, programs in frontier.items()}
            flat = [(i, c) for i, cs in reached.items() for c in cs]
            deeper = self.scores([c for _, c in flat])
            for (i, _), s in zip(flat, deeper, strict=True):
                value[i] = min(value[i], s)
            best = np.argsort(deeper)[:self.ranked.breadth]
            frontier = {}
            for k in best:
                frontier.setdefault(flat[k][0], []).append(flat[k][1])
        return [_Candidate(m, p, float(s), float(v), step.text, step.kind)
                for ((m, p), step), s, v in zip(children, scores, value, strict=True)]

    def batch(self, candidates: list[_Candidate]) -> list[_Candidate]:
        """The candidates to measure: the best by value, the `by_roofline` best by the roofline bound,
        then `explore` of other kinds of move. The model learns what a kind is worth on this kernel
        only once one of that kind is measured here, so these are the best-valued candidate of a
        kind not measured yet in this search while there is one, then one of a kind drawn at random
        (a program offers a dozen splits for each move of another kind, so a kind is drawn before a
        move)."""
        order = sorted(candidates, key=lambda c: c.value)
        chosen, rest = order[:self.ranked.measure], order[self.ranked.measure:]
        if self.ranked.by_roofline and rest:
            bounds = [self.features(c.moves, c.program)[_ROOFLINE] for c in rest]
            for k in sorted(np.argsort(bounds, kind="stable")[:self.ranked.by_roofline], reverse=True):
                chosen.append(rest.pop(k))
        for _ in range(self.ranked.explore):
            taken = self.kinds_measured | {c.kind for c in chosen}
            unmeasured = [c for c in rest if c.kind not in taken]
            if unmeasured:
                pick = unmeasured[0]
            elif rest:
                drawn = self.rng.choice(sorted({c.kind for c in rest}))
                pick = self.rng.choice([c for c in rest if c.kind == drawn])
            else:
                break
            chosen.append(pick)
            rest.remove(pick)
        return chosen

    def measure(self, candidate: _Candidate) -> float:
        """The candidate's time (+inf when it failed); BudgetExhausted when the budget is spent."""
        cost = self.costs(list(candidate.moves), candidate.program)
        self.met.add(_Identity(candidate.program))
        self.kinds_measured.add(candidate.kind)
        if not math.isinf(cost):
            self._ran(candidate.moves, candidate.program, cost)
        self.best = min(self.best, (cost, candidate.program, candidate.moves), key=lambda b: b[0])
        return cost

    def result(self, steps: list[Step], ended: str) -> PlayResult:
        cost, program, moves = self.best
        return PlayResult(program, list(moves), cost, self.start_cost, steps, ended)

    def refit(self) -> None:
        if self.ranked.refit_steps <= 0 or len(self.measured) < max(2, self.ranked.refit_after):
            return
        group = Group("search", "", "", "", "", tuple(m for m, _, _ in self.measured), np.stack(self.rows),
                      np.asarray([t for _, _, t in self.measured]))
        self.model = self.model.refit([group], Training(steps=self.ranked.refit_steps, groups_per_step=1,
                                                        seed=len(self.measured)))


def continue_ranked(program: Program, model: CostModel, host: Host, steps: int, evaluate: Evaluator | Cost, *,
                    target: str = "native", prefix: Sequence[str] = (), ranked: Ranked = CONTINUING, seed: int = 0,
                    on_step: Callable[[Step], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Play up to `steps` moves from `program`, one a batch (see the module's docstring); `prefix` is the
    derivation that made `program`, which the model reads with the moves after it. Every step is
    the move played and its measured time; the result is the best program met."""
    game = _Game(program, model, host, evaluate, target, prefix, ranked, seed)
    current: _Reached = ((), game.costs.start)
    played: list[Step] = []
    ended = "steps"
    while len(played) < steps:
        if should_stop is not None and should_stop():
            ended = "stopped"
            break
        candidates = game.candidates([current])
        if not candidates:
            ended = "dead end"
            break
        timed = []
        try:
            for candidate in game.batch(candidates):
                timed.append((candidate, game.measure(candidate)))
        except BudgetExhausted:
            ended = "budget"
        ran = [(c, t) for c, t in timed if not math.isinf(t)]
        if not ran:
            if ended != "budget":
                ended = "dead end"
            break
        # the fastest measured; among those within the timer's noise of it, the one the model expects most of next
        fastest = min(t for _, t in ran)
        chosen, cost = min(((c, t) for c, t in ran if t <= fastest * (1 + NOISE)), key=lambda ct: ct[0].value)
        current = (chosen.moves, chosen.program)
        played.append(Step(len(played) + 1, chosen.step, cost, game.start_cost / cost, game.best[0]))
        if on_step is not None:
            on_step(played[-1])
        if ended == "budget":
            break
        game.refit()
    return game.result(played, ended)


def search_ranked(program: Program, model: CostModel, host: Host, evaluate: Evaluator | Cost, *,
                  target: str = "native", prefix: Sequence[str] = (), ranked: Ranked = Ranked(), seed: int = 0,
                  steps: int | None = None, on_step: Callable[[Step], None] | None = None,
                  should_stop: Callable[[], bool] | None = None) -> PlayResult:
    """Measure programs reached from `program` batch by batch (see the module's docstring) until `steps`
    measurements, the evaluator's budget, `should_stop()` or no unmet program is left; the result is
    the best program met."""
    game = _Game(program, model, host, evaluate, target, prefix, ranked, seed)
    taken: list[Step] = []
    ended = "steps"
    while steps is None or len(taken) < steps:
        if should_stop is not None and should_stop():
            ended = "stopped"
            break
        fastest = sorted(game.measured, key=lambda m: m[2])[:ranked.parents]
        candidates = game.candidates([(m, p) for m, p, _ in fastest])
        if not candidates:
            ended = "dead end"
            break
        try:
            for candidate in game.batch(candidates):
                if (steps is not None and len(taken) >= steps) or (should_stop is not None and should_stop()):
                    break
                cost = game.measure(candidate)
                taken.append(Step(len(taken) + 1, candidate.step, None if math.isinf(cost) else cost,
                                  game.start_cost / cost, game.best[0]))
                if on_step is not None:
                    on_step(taken[-1])
        except BudgetExhausted:
            ended = "budget"
            break
        game.refit()
    return game.result(taken, ended)
