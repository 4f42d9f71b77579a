"""Experience from logs: what `dojo tune`, `dojo agent` and `dojo library build` measured, as the
agent's transitions.

    games, skipped = read_games(paths, target="native")   # the heuristic-free logs among `paths`
    for transition, vectors in transitions(game, embedder):
        buffer.push(transition, vectors)

A log (`agent.evaluate`) holds the spec, the moves before the start, and every program measured:
its moves from the start and its time. An evaluation whose moves are those of a program measured
before it plus one move is a step of the game: at that parent, that move, the reward c / T(child)
with c the start's time (0 when the child failed), and the child as the next state. Every program
measured also gives the stop action at it, with reward c / T. These are the transitions that
training and the search record as they play, and Q-learning does not care which policy took a
step, so a logged search teaches the agent as much as its own games of the same length: more,
since random sampling and simulated annealing visit programs the agent would not.

Only heuristic-free searches are read: random sampling and simulated annealing on the edges graph,
and the agent's own games. The heuristic graph's candidates start from the expert pass, and the
passes are the expert: learning from them would teach the agent the expert's choices, which it is
meant to find from times alone (the paper's section 4.3). A log without the first line that names
its search (older logs), of another target, or of a search that knows the hardware is skipped,
with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from dojo_ir import DojoError, Program, load
from dojo_ir.moves import apply

from ..evaluate import Evaluation, read_log, replay_moves, text_hash
from .actions import Observation, observe
from .embed import Embedding
from .replay import Transition

HEURISTIC_FREE = {("random", "edges"), ("sa", "edges"), ("agent", "edges")}


@dataclass(frozen=True)
class LoggedGame:
    """A heuristic-free log: where it is, its starting program and time, and its evaluations after
    the start (moves from the start), in the order they were made."""

    path: Path
    start: Program
    start_s: float
    evaluations: tuple[Evaluation, ...]


def read_game(path: Path, target: str) -> LoggedGame | str:
    """The log at `path` as a game, or why it is not one to learn from."""
    try:
        header, evaluations = read_log(path)
    except (OSError, UnicodeDecodeError) as error:
        return f"{path}: not a log of evaluations ({error})"
    if header is None or not isinstance(header.get("spec"), str):
        return f"{path}: no first line naming its spec and search (a log older than that)"
    source = (header.get("method"), header.get("graph"))
    if source not in HEURISTIC_FREE:
        return f"{path}: {source[0]} on the {source[1] or 'no'} graph knows the hardware; only {_free()} are read"
    if header.get("target") != target:
        return f"{path}: timed for the target {header.get('target')}, not {target}"
    try:
        spec = load(header["spec"])
    except DojoError as error:
        return f"{path}: its spec does not parse: {error.diagnostics[0].message}"
    start, applied = replay_moves(spec, header.get("prefix", []))
    if applied != header.get("prefix", []):
        return f"{path}: its starting moves do not apply to its spec"
    if not evaluations or evaluations[0].index != 0 or math.isinf(evaluations[0].cost):
        return f"{path}: no time for its starting program"
    skip = len(header.get("prefix", []))
    return LoggedGame(path, start, evaluations[0].cost,
                      tuple(replace(e, moves=e.moves[skip:]) for e in evaluations[1:]))


def read_games(paths: Sequence[Path], target: str) -> tuple[list[LoggedGame], list[str]]:
    """The games of the logs among `paths` that can be learned from, and why each other was skipped."""
    games, skipped = [], []
    for path in paths:
        game = read_game(path, target)
        (skipped if isinstance(game, str) else games).append(game)
    return games, skipped


def transitions(game: LoggedGame, embedder: Embedding, target: str) -> Iterator[tuple[Transition,
                                                                                    dict[str, torch.Tensor]]]:
    """Every step of `game` (see the module's docstring), then the stop action at every program
    measured, each with the vectors it names."""
    replayed: dict[tuple[str, ...], Program] = {(): game.start}
    measured = {text_hash(game.start): (game.start, game.start_s)}  # by program text: the program, its time
    seen: dict[str, Observation] = {}

    def observed(program: Program) -> Observation:
        key = text_hash(program)
        if key not in seen:
            seen[key] = observe(program, embedder, target)
        return seen[key]

    for evaluation in game.evaluations:
        parent = _replay(replayed, evaluation.moves[:-1])
        if not evaluation.moves or parent is None:
            continue  # the start, or moves that no longer apply
        before = observed(parent)
        if evaluation.moves[-1] not in before.moves:
            continue  # not a legal move for this target there
        taken = before.moves.index(evaluation.moves[-1]) + 1
        replayed[evaluation.moves] = before.programs[taken]
        after = observed(before.programs[taken])
        measured[after.state] = (before.programs[taken], evaluation.cost)
        yield (Transition(before.state, before.actions, taken, game.start_s / evaluation.cost, after.state,
                          after.actions, False), {**before.vectors, **after.vectors})
    for program, time_s in measured.values():
        if not math.isinf(time_s):
            at = observed(program)
            yield Transition(at.state, at.actions, 0, game.start_s / time_s, at.state, (), True), at.vectors


def _replay(replayed: dict[tuple[str, ...], Program], moves: tuple[str, ...]) -> Program | None:
    """The program `moves` make from the start, replayed from the longest prefix replayed before
    (a search's log names a program by the first moves that reached it, and simulated annealing
    reaches many by others), remembering each prefix; None when a move does not apply."""
    known = len(moves)
    while moves[:known] not in replayed:
        known -= 1
    program = replayed[moves[:known]]
    for end in range(known + 1, len(moves) + 1):
        try:
            program = apply(program, moves[end - 1])
        except DojoError:
            return None
        replayed[moves[:end]] = program
    return program


def _free() -> str:
    return ", ".join(f"{method} on {graph}" for method, graph in sorted(HEURISTIC_FREE))
