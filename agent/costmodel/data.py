"""The cost model's data: every evaluation log any command wrote, as groups of programs measured
together.

    groups = read_groups([Path("lib/logs"), Path("runs/tune.jsonl")], host)
    groups[0].spec_hash, groups[0].features, groups[0].times_s

A log (`agent.evaluate`) opens with its spec, the prefix of moves that made its start, its target
and its search; each evaluation names the moves after the prefix and the hash of the program they
made. Here every program is rebuilt by replaying those moves from the spec (`dojo_ir.moves.apply`,
a move that no longer applies skipped as the evaluator skips it), a program already rebuilt serving
as the start of those that extend it, and kept only if its hash is the one logged: the features are
then those of the program that was timed. A log older than its first line names no spec; one that
`dojo library build` wrote (`LIB/logs/NAME.METHOD.GRAPH.jsonl`) has it beside the library's
kernel as `LIB/NAME.spec.dojo`, and is read with it when the hashes say so.

One log is one group: one spec, one target, one machine, one run, so that times in it compare. Its
features are normalised by the facts of the machine that timed it, which a local runner's logs
record in their first line (peak, bandwidth, cores, vector width, caches); a log without them
(older, or timed by a remote runner) is read as if timed on the reader's `host`. A
failed or unverified evaluation (`ok` false, no time) is left out: the model orders programs that
run. Unlike the agent's experience (`agent.perfllm.experience`), logs of the heuristic graph are
read too: the model learns what programs cost, not which moves the expert chose, so the expert's
programs are data like any other, and they are the fast ones a ranking most needs to see.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.evaluate import read_log, text_hash
from dojo_ir import DojoError, Program, load
from dojo_ir.moves import apply
from dojo_ir.paths import without_comments

from .features import Host, features


@dataclass(frozen=True)
class Group:
    """The programs of one log that ran: their features, moves from the spec and times."""

    source: str  # the log's path
    spec_hash: str  # the spec's: what a held-out split holds out
    name: str  # the kernel's
    target: str
    method: str
    moves: tuple[tuple[str, ...], ...]
    features: np.ndarray  # (programs, WIDTH)
    times_s: np.ndarray  # (programs,)

    def __len__(self) -> int:
        return len(self.times_s)


def log_paths(paths: Iterable[Path]) -> list[Path]:
    """The logs `paths` name: files as given, and every `*.jsonl` or `*.jsonl.gz` under a directory."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.name.endswith((".jsonl", ".jsonl.gz"))))
        else:
            found.append(path)
    return found


def _library_spec(path: Path) -> str | None:
    """The spec beside a library's log (`LIB/logs/NAME.*.jsonl` -> `LIB/NAME.spec.dojo`), if any."""
    spec = path.parent.parent / f"{path.name.split('.', 1)[0]}.spec.dojo"
    return spec.read_text(encoding="utf-8") if path.parent.name == "logs" and spec.exists() else None


class _Replayer:
    """Programs from one spec by their moves, each built from the longest prefix already built."""

    def __init__(self, spec: Program):
        self._built: dict[tuple[str, ...], Program] = {(): without_comments(spec)}

    def program(self, moves: Sequence[str]) -> Program:
        moves = tuple(moves)
        known = next(k for k in range(len(moves), -1, -1) if moves[:k] in self._built)
        program = self._built[moves[:known]]
        for k in range(known, len(moves)):
            try:
                program = apply(program, moves[k])
            except DojoError:  # stale, as `agent.evaluate.replay_moves` skips it
                pass
            self._built[moves[:k + 1]] = program
        return program


def _spec(path: Path, header: dict | None) -> Program | None:
    """The spec of the log at `path` whose first line is `header`, if it names one that loads."""
    text = header["spec"] if header else _library_spec(path)
    try:
        return None if text is None else load(text)
    except DojoError:
        return None


def rebuilt(group: Group) -> list[Program]:
    """The programs of `group`, in its order, rebuilt from its log's spec."""
    header, _ = read_log(Path(group.source))
    spec = _spec(Path(group.source), header)
    if spec is None:
        raise ValueError(f"{group.source} no longer names its spec")
    replayer = _Replayer(spec)
    return [replayer.program(moves) for moves in group.moves]


def read_group(path: Path, host: Host) -> Group | None:
    """The group of the log at `path`, or None when it has no spec to rebuild from or fewer than two
    programs that ran and were rebuilt."""
    header, evaluations = read_log(path)
    spec = _spec(path, header)
    if spec is None:
        return None
    prefix = tuple(header.get("prefix", ())) if header else ()
    host = _host_of(header, host)
    replayer = _Replayer(spec)
    kept_moves, rows, times = [], [], []
    for evaluation in evaluations:
        if not evaluation.ok or evaluation.median_s is None or not math.isfinite(evaluation.median_s):
            continue
        moves = prefix + evaluation.moves
        program = replayer.program(moves)
        if text_hash(program) != evaluation.hash:  # not the program that was timed: a spec it did not start from
            continue
        kept_moves.append(moves)
        rows.append(features(program, host, moves))
        times.append(evaluation.median_s)
    if len(times) < 2:
        return None
    # a library's log without a first line is named NAME.METHOD.GRAPH.jsonl
    method = header.get("method", "") if header else ".".join(path.name.split(".")[1:3])
    return Group(str(path), text_hash(spec), spec.name, header.get("target", "native") if header else "native",
                 method, tuple(kept_moves), np.stack(rows).astype(np.float32), np.asarray(times, dtype=np.float64))


def _host_of(header: dict | None, host: Host) -> Host:
    """The machine that timed a log's programs as its first line records it, else `host`."""
    try:
        return Host.from_facts(header["machine"]) if header and "machine" in header else host
    except (KeyError, TypeError, ValueError):  # a record that is not one: the reader's own machine
        return host


def read_groups(paths: Iterable[Path], host: Host) -> list[Group]:
    """The groups of every log `paths` name (`log_paths`), logs with nothing to learn left out."""
    return [g for g in (read_group(p, host) for p in log_paths(paths)) if g is not None]
