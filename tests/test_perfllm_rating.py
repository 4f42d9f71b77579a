"""agent/perfllm/rating.py: a move's rating is Q(s, a) / Q(s, stop), for every legal move of the
program (`rate_all`) or for those asked (`rate`, the same numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_perfllm_fakes
import torch
from test_perfllm_fakes import FakeEmbedder

from agent.perfllm.checkpoint import policy_state, save_atomically
from agent.perfllm.game import legal_moves
from agent.perfllm.learner import Learner
from agent.perfllm.rating import Rater
from dojo_ir import load
from dojo_ir.library import KERNELS

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)


@pytest.fixture()
def rater(tmp_path: Path) -> Rater:
    path = tmp_path / "policy.pt"
    save_atomically(policy_state(Learner(16), FakeEmbedder()), path)
    return Rater(path, FakeEmbedder())


def test_every_legal_move_is_rated_as_its_value_over_the_stop_actions(rater: Rater,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Q(s, stop) = 2, then -1, 0, 1, 2, ... for the moves in the order they are listed
    monkeypatch.setattr(Learner, "q_values", lambda self, state, actions: torch.cat(
        [torch.tensor([2.0]), torch.arange(len(actions) - 1, dtype=torch.float32) - 1]))
    program = load(KERNELS["softmax"].small())
    legal = [str(m) for m in legal_moves(program)]
    rated = rater.rate_all(program)
    assert list(rated) == legal
    assert list(rated.values()) == [max(0.0, i - 1) / 2 for i in range(len(legal))]
    some = legal[::3]
    assert rater.rate(program, some) == [rated[m] for m in some]


def test_a_move_that_is_not_legal_is_named(rater: Rater) -> None:
    program = load(KERNELS["softmax"].small())
    with pytest.raises(ValueError, match="split_scope"):
        rater.rate(program, ["split_scope(op=nothing, depth=9, factor=7)"])
    assert rater.rate(program, []) == []
