"""Training and continuing (agent/perfllm/train.py, play.continue_, checkpoint.py): the files a
run leaves, resuming exactly after an interruption, refusing what does not belong, learning the
move that pays, and one end-to-end run with the real model and the local runner."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import test_perfllm_fakes
import torch
from test_perfllm_fakes import FakeEmbedder, speedup_cost

from agent.evaluate import Evaluator, read_log, replay_moves
from agent.perfllm.checkpoint import EmbeddingMismatch
from agent.perfllm.learner import LearnerConfig
from agent.perfllm.play import continue_
from agent.perfllm.train import TrainOptions, train
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments
from runner.local import LocalRunner

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)

SMALL = LearnerConfig(hidden=32, batch_size=8, replay_capacity=200)
KEYS = {"episode", "kernel", "steps", "ended", "epsilon", "start_s", "best_s", "best_speedup", "final_speedup",
        "loss", "updates", "transitions", "wall_s"}


def spec(name: str):
    return without_comments(load(KERNELS[name].small()))


def accumulate_pays(moves: list[str]) -> float:
    """Accumulating in a register makes a kernel 2.5 times faster; every other move, 10% slower."""
    return speedup_cost(lambda m: 0.4 if m.startswith("accumulate") else 1.1)(moves)


def kernels():
    return [("matmul", spec("matmul")), ("softmax", spec("softmax"))]


def run(out, episodes: int, **options):
    """`train` on `kernels()` with small settings, `options` overriding settings and callbacks alike."""
    options = {"max_steps": 3, "evaluate": lambda name, spec: accumulate_pays, "embedder": FakeEmbedder(),
               "config": SMALL, "seed": 0, **options}
    settings = {key: options.pop(key) for key in list(options) if key in TrainOptions.__dataclass_fields__}
    return train(options.pop("kernels", kernels()), out, TrainOptions(episodes=episodes, **settings), **options)


def test_a_runs_settings_are_one_frozen_object_checked_when_made() -> None:
    with pytest.raises(ValueError, match="episodes >= 0 and max_steps >= 1, not 2 and 0"):
        TrainOptions(episodes=2, max_steps=0)
    with pytest.raises(ValueError, match="not -1 and 3"):
        TrainOptions(episodes=-1, max_steps=3)
    logs = [Path("a.jsonl")]
    options = TrainOptions(episodes=1, max_steps=2, experience=logs)
    logs.append(Path("b.jsonl"))
    assert options.experience == (Path("a.jsonl"),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.episodes = 5


def test_a_run_leaves_its_checkpoint_policy_and_curve(tmp_path) -> None:
    progress = []
    result = run(tmp_path, 5, on_progress=progress.append)
    assert result.episodes == 5 and not result.stopped_early
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "curve.jsonl", "curve.png", "policy.pt"]
    records = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert records == result.curve == progress
    assert [r["episode"] for r in records] == [1, 2, 3, 4, 5] and set(records[0]) == KEYS
    assert {r["kernel"] for r in records} <= {"matmul", "softmax"}
    assert all(r["best_speedup"] >= 1.0 and r["steps"] <= 3 for r in records)
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert set(saved) >= {"learner", "replay", "rng", "episode", "epsilon", "curve", "embedding", "kernels"}
    assert set(saved["learner"]) >= {"online", "target", "optimizer"}
    assert saved["embedding"] == FakeEmbedder().identity and saved["episode"] == 5


def test_an_interrupted_run_resumed_is_the_run_that_was_not_interrupted(tmp_path) -> None:
    whole = run(tmp_path / "whole", 8)
    polls = iter(range(1000))
    # stopped in the middle of an episode: that episode is dropped and played again on resuming
    first = run(tmp_path / "resumed", 8, should_stop=lambda: next(polls) == 9)
    assert first.stopped_early and 0 < first.episodes < 8
    resumed = run(tmp_path / "resumed", 8, resume=True)
    assert resumed.curve == [dict(r, wall_s=w["wall_s"]) for r, w in zip(whole.curve, resumed.curve, strict=True)]
    one, other = (torch.load(tmp_path / d / "checkpoint.pt", weights_only=True) for d in ("whole", "resumed"))
    for name in ("online", "target"):
        for key, tensor in one["learner"][name].items():
            assert torch.equal(tensor, other["learner"][name][key]), key
    assert one["rng"] == other["rng"] and one["replay"]["transitions"] == other["replay"]["transitions"]


def test_a_directory_that_holds_a_run_is_not_overwritten(tmp_path) -> None:
    run(tmp_path, 1)
    with pytest.raises(FileExistsError, match="holds a training run already"):
        run(tmp_path, 2)


def test_a_run_is_resumed_only_with_its_embedding_kernels_and_configuration(tmp_path) -> None:
    run(tmp_path, 1)
    with pytest.raises(EmbeddingMismatch, match="`fake` .*not `other`"):
        run(tmp_path, 2, resume=True, embedder=FakeEmbedder(name="other"))
    with pytest.raises(ValueError, match="trained on the kernels matmul, softmax"):
        run(tmp_path, 2, resume=True, kernels=[("matmul", spec("matmul"))])
    with pytest.raises(ValueError, match="configuration"):
        run(tmp_path, 2, resume=True, config=LearnerConfig(hidden=64))
    assert run(tmp_path, 2, resume=True, config=None).episodes == 2


def test_a_kernel_whose_spec_fails_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match="the spec of softmax failed"):
        run(tmp_path, 3, evaluate=lambda name, spec: accumulate_pays if name == "matmul" else lambda moves: math.inf,
            kernels=[("softmax", spec("softmax"))])


def test_continuing_refuses_an_agent_trained_on_another_embedding(tmp_path) -> None:
    run(tmp_path, 1)
    with pytest.raises(EmbeddingMismatch, match="dimension 16.*dimension 8"):
        continue_(spec("matmul"), tmp_path, 2, accumulate_pays, embedder=FakeEmbedder(dim=8))


def test_a_trained_agent_continues_a_program_with_the_move_that_pays(tmp_path) -> None:
    matmul = spec("matmul")
    config = LearnerConfig(hidden=64, batch_size=16, replay_capacity=1000)
    run(tmp_path, 50, kernels=[("matmul", matmul)], config=config)
    steps = []
    result = continue_(matmul, tmp_path, 3, accumulate_pays, embedder=FakeEmbedder(), on_step=steps.append)
    assert result.steps == steps
    assert result.steps[0].move.startswith("accumulate")
    assert result.speedup == pytest.approx(2.5)
    assert replay_moves(matmul, result.moves)[0] == result.program


def test_end_to_end_with_the_real_model_and_the_local_runner(tmp_path) -> None:
    embedder = test_perfllm_fakes.real_embedder()
    add = spec("add")
    trained = train([("add", add)], tmp_path, TrainOptions(episodes=1, max_steps=2, config=SMALL, seed=1),
                    embedder=embedder)
    record = trained.curve[0]
    assert record["start_s"] > 0 and record["steps"] >= 1
    log = tmp_path / "evaluations" / "add.jsonl"
    assert read_log(log)[1][0].ok and read_log(log)[0]["method"] == "agent"
    evaluator = Evaluator(add, runner=LocalRunner(), repeats=3)
    result = continue_(add, tmp_path, 2, evaluator, may_stop=False)
    assert len(result.steps) == 2 and all(s.time_s is not None and s.time_s > 0 for s in result.steps)
    assert result.time_s == min(evaluator.cache.values()) and not math.isinf(result.time_s)
    assert evaluator.evaluations == 2
