"""Training PerfLLM: episodes of the game on a set of kernels, learning while it plays.

    kernels = [(name, load(KERNELS[name].small())) for name in ("softmax", "matmul")]
    result = train(kernels, Path("runs/agent"), TrainOptions(episodes=500, max_steps=20))
    result = train(kernels, Path("runs/agent"), TrainOptions(episodes=1000, max_steps=20, resume=True))  # goes on
    result = train(kernels, out, TrainOptions(episodes=100, max_steps=10, experience=logs, pretrain_updates=4000))

A run's settings are one `TrainOptions`; what the run calls back (the evaluators' factory, the
embedding, progress, stop and pre-training reports) stays `train`'s own parameters.

Before its first episode a run can learn offline from `experience`, logs of evaluations that
searches wrote (`agent.perfllm.experience`: the heuristic-free ones): every step they hold goes
into the replay buffer, and `pretrain_updates` gradient steps on it follow, with the same Max-Q
target; the episodes then fine-tune online, their transitions joining the logged ones.

Each episode draws a kernel at random, starts from its spec and plays up to `max_steps` moves
epsilon-greedily (`play.play`); every transition goes into the replay buffer, and once the buffer
holds a minibatch each is followed by `updates_per_step` gradient steps (`Learner.learn`). The
reward is the spec's time over the time after the move, a speed-up. Epsilon falls linearly over
the first `epsilon_decay_episodes` episodes (by default half of `episodes`).

Programs are timed by the evaluator that `evaluate(name, spec)` makes for each kernel, once per
run: by default (`measured`) an `agent.evaluate.Evaluator` with the local runner, which times each
program once and logs it to `out/evaluations/NAME.jsonl`, and reads that log back when it exists,
so that a resumed run pays nothing for programs timed before. Any function of the moves from the
spec to seconds can stand in for it (a cost model).

The directory `out` holds, each file replaced atomically after every episode (but the plot):

    checkpoint.pt      what resuming needs: the online and target networks, the optimiser, the
                       replay buffer with the embeddings it refers to, the random generators'
                       states, the episode counter, epsilon, the configuration, the curve, the
                       kernels' names and the hashes of their specs, and the embedding's identity
    policy.pt          the online network alone with its configuration and the embedding's
                       identity: what `play.continue_` loads
    curve.jsonl        one record per episode (`agent.perfllm.curve`)
    curve.png          the plot of it, every PLOT_EVERY episodes and at the end of a run
    evaluations/       the default evaluators' logs

An interruption (a crash, Ctrl-C, or `should_stop()`, polled before each step) loses the episode
under way and nothing else: `resume=True` reloads the checkpoint and plays that episode again, on
the same random draws, with the times its first attempt measured already in the evaluators'
logs. With a deterministic cost and embedding a resumed run is the run that was not interrupted;
with a real model the embeddings of a resumed run may differ in their last bits, as the batches
the model reads differ.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from dojo_ir import Program
from runner.measure import Runner

from ..evaluate import Evaluator, text_hash
from .checkpoint import CHECKPOINT, FORMAT, POLICY, check_embedding, load, policy_state, save_atomically
from .curve import plot, write_jsonl
from .embed import Embedding, shared
from .experience import read_games, transitions
from .game import Cost, Costs
from .learner import Learner, LearnerConfig
from .play import PlayResult, play
from .replay import ReplayBuffer, Transition

EvaluatorFactory = Callable[[str, Program], Evaluator | Cost]
PLOT_EVERY = 25  # episodes between two drawings of curve.png, which take longer than a cheap episode


@dataclass(frozen=True)
class TrainResult:
    """Where the run ended: the episodes done in all, the curve (one record per episode, see
    `agent.perfllm.curve`), the directory, and whether `should_stop` ended it early."""

    episodes: int
    curve: list[dict[str, Any]]
    out: Path
    stopped_early: bool


def measured(out: Path, *, target: str = "native", runner: Runner | None = None,
             repeats: int = 3) -> EvaluatorFactory:
    """The default evaluators: the local runner (or `runner`), one log per kernel in
    `out/evaluations`, read back when it exists."""

    def make(name: str, spec: Program) -> Evaluator:
        log = out / "evaluations" / f"{name}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        evaluator = Evaluator(spec, runner=runner, target=target, repeats=repeats, log=log,
                              source={"method": "agent", "graph": "edges"})
        evaluator.resume(log)
        return evaluator

    return make


class _Run:
    """The state of a training run, as the checkpoint holds it."""

    def __init__(self, learner: Learner, buffer: ReplayBuffer, rng: random.Random, episode: int,
                 curve: list[dict[str, Any]]):
        self.learner, self.buffer, self.rng, self.episode, self.curve = learner, buffer, rng, episode, curve
        self.losses: list[float] = []  # the episode's

    def learn(self, transition: Transition, vectors: dict[str, torch.Tensor]) -> None:
        self.losses += self.learner.record(self.buffer, transition, vectors)

    def state(self, embedder: Embedding, specs: dict[str, str]) -> dict[str, Any]:
        return {"format": FORMAT, "embedding": embedder.identity, "kernels": specs, "episode": self.episode,
                "epsilon": self.learner.config.epsilon(self.episode),
                "learner": self.learner.state_dict(), "replay": self.buffer.state_dict(),
                "rng": self.rng.getstate(), "curve": self.curve}


def _fresh(dim: int, config: LearnerConfig, seed: int) -> _Run:
    return _Run(Learner(dim, config, seed), ReplayBuffer(config.replay_capacity, seed), random.Random(seed), 0, [])


def _resumed(path: Path, embedder: Embedding, specs: dict[str, str], config: LearnerConfig | None) -> _Run:
    saved = load(path)
    check_embedding(saved, embedder, path)
    if saved["kernels"] != specs:
        raise ValueError(f"{path} was trained on the kernels {', '.join(saved['kernels'])} (or other specs of them); "
                         f"resume it with those, or train in another directory")
    learner = Learner.from_state_dict(saved["learner"])
    if config is not None and config.epsilon_decay_episodes is None:
        config = replace(config, epsilon_decay_episodes=learner.config.epsilon_decay_episodes)
    if config is not None and config != learner.config:
        raise ValueError(f"{path} was trained with {learner.config}; resume it with that configuration or none")
    rng = random.Random()
    rng.setstate(saved["rng"])
    return _Run(learner, ReplayBuffer.from_state_dict(saved["replay"]), rng, int(saved["episode"]),
                list(saved["curve"]))


@dataclass(frozen=True)
class TrainOptions:
    """The settings of a training run: train until `episodes` episodes are done in all, each of
    at most `max_steps` moves, timed for `target`. `seed` seeds a fresh run's networks and random
    draws; `config` is the learner's (default `LearnerConfig()`, its epsilon decaying over half of
    `episodes`). `resume` goes on with the run the directory holds, its configuration and random
    generators (`config`, if given, must be the same; `seed` is not used). A fresh run first takes
    `pretrain_updates` gradient steps on the logged searches of `experience`."""

    episodes: int
    max_steps: int
    target: str = "native"
    seed: int = 0
    config: LearnerConfig | None = None
    resume: bool = False
    experience: tuple[Path, ...] = ()
    pretrain_updates: int = 0

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.max_steps < 1:
            raise ValueError(f"training needs episodes >= 0 and max_steps >= 1, not {self.episodes} and "
                             f"{self.max_steps}")
        object.__setattr__(self, "experience", tuple(self.experience))  # a list given: the options stay immutable


def train(kernels: Sequence[tuple[str, Program]], out: Path, options: TrainOptions, *,
          evaluate: EvaluatorFactory | None = None, embedder: Embedding | None = None,
          on_progress: Callable[[dict[str, Any]], None] | None = None,
          should_stop: Callable[[], bool] | None = None,
          on_pretrain: Callable[[str], None] | None = None) -> TrainResult:
    """Train as `options` say; see the module's docstring. `kernels` are (name, spec) pairs with
    distinct names. A directory that holds a run is refused unless `options.resume`.
    `on_progress` receives each episode's curve record, and `on_pretrain` a line on each log read
    or skipped and on the offline updates."""
    if not kernels:
        raise ValueError("training needs at least one kernel")
    if len({name for name, _ in kernels}) != len(kernels):
        raise ValueError("the kernels' names must be distinct: they name their evaluation logs")
    episodes, target, config = options.episodes, options.target, options.config
    out.mkdir(parents=True, exist_ok=True)
    embedder = embedder or shared()
    specs = {name: text_hash(spec) for name, spec in kernels}
    path = out / CHECKPOINT
    if path.exists() and not options.resume:
        raise FileExistsError(f"{out} holds a training run already: resume it, or train in another directory")
    if path.exists():
        run = _resumed(path, embedder, specs, config)
    else:
        config = config or LearnerConfig()
        if config.epsilon_decay_episodes is None:
            config = replace(config, epsilon_decay_episodes=max(1, episodes // 2))
        run = _fresh(embedder.dim, config, options.seed)
        if options.experience:
            _pretrain(run, options.experience, options.pretrain_updates, embedder, target,
                      on_pretrain or (lambda line: None))
            _save(run, out, embedder, specs)
    config = run.learner.config
    factory = evaluate or measured(out, target=target)
    costs: dict[str, Costs] = {}
    stopped = False
    while run.episode < episodes:
        if should_stop is not None and should_stop():
            stopped = True
            break
        name, spec = kernels[run.rng.randrange(len(kernels))]
        if name not in costs:
            costs[name] = Costs(spec, factory(name, spec))
            if math.isinf(costs[name]([], costs[name].start)):
                raise ValueError(f"the spec of {name} failed or did not verify: the agent needs its time as the unit "
                                 f"of reward")
        epsilon = config.epsilon(run.episode)
        run.losses = []
        began = time.monotonic()
        result = play(run.learner, embedder, costs[name], max_steps=options.max_steps, epsilon=epsilon, rng=run.rng,
                      target=target, learn=run.learn, should_stop=should_stop)
        if result.ended == "stopped":
            stopped = True  # the episode is dropped: the checkpoint is from before it
            break
        run.episode += 1
        run.curve.append(_record(run, name, epsilon, result, time.monotonic() - began))
        _save(run, out, embedder, specs)
        if run.episode % PLOT_EVERY == 0:
            plot(run.curve, out / "curve.png")
        if on_progress is not None:
            on_progress(run.curve[-1])
    if run.curve:
        plot(run.curve, out / "curve.png")
    return TrainResult(run.episode, list(run.curve), out, stopped)


def _pretrain(run: _Run, logs: Sequence[Path], updates: int, embedder: Embedding, target: str,
              say: Callable[[str], None]) -> None:
    """Fill the run's replay buffer with the steps of `logs` and take `updates` gradient steps on it."""
    games, skipped = read_games(logs, target)
    for reason in skipped:
        say(f"skipped {reason}")
    with embedder.every_core():  # nothing compiles or times while the logs are read
        for game in games:
            before = len(run.buffer)
            for transition, vectors in transitions(game, embedder, target):
                run.buffer.push(transition, vectors)
            say(f"read {len(run.buffer) - before} transitions from {game.path}")
    if not len(run.buffer):
        raise ValueError("no log given holds a heuristic-free search to learn from")
    batch = run.learner.config.batch_size
    for update in range(1, updates + 1):
        run.losses.append(run.learner.learn(run.buffer.sample(batch), run.buffer))
        if update % 500 == 0 or update == updates:
            recent = run.losses[-500:]
            say(f"offline update {update}/{updates}: loss {sum(recent) / len(recent):.4g}")
    run.losses = []


def _record(run: _Run, kernel: str, epsilon: float, result: PlayResult, wall_s: float) -> dict[str, Any]:
    """The episode's line of the curve (agent.perfllm.curve)."""
    final = result.steps[-1].time_s if result.steps else result.start_s
    return {"episode": run.episode, "kernel": kernel, "steps": len(result.steps), "ended": result.ended,
            "epsilon": round(epsilon, 4), "start_s": result.start_s, "best_s": result.time_s,
            "best_speedup": result.speedup,
            "final_speedup": result.start_s / final if final and result.start_s else None,
            "loss": sum(run.losses) / len(run.losses) if run.losses else None, "updates": run.learner.updates,
            "transitions": len(run.buffer), "wall_s": round(wall_s, 3)}


def _save(run: _Run, out: Path, embedder: Embedding, specs: dict[str, str]) -> None:
    # the checkpoint first: it holds the curve too, so the files written after it can be lost
    save_atomically(run.state(embedder, specs), out / CHECKPOINT)
    save_atomically(policy_state(run.learner, embedder), out / POLICY)
    write_jsonl(run.curve, out / "curve.jsonl")
