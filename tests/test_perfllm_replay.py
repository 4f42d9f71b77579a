"""Experience replay (agent/perfllm/replay.py): capacity, eviction, seeded sampling, checkpoints."""

from __future__ import annotations

import io

import pytest
import torch

from agent.perfllm.replay import ReplayBuffer, Transition


def vector(key: str) -> torch.Tensor:
    return torch.full((4,), float(sum(map(ord, key))))


def step(i: int, terminal: bool = False) -> tuple[Transition, dict[str, torch.Tensor]]:
    """State s{i}, whose actions lead to itself (stop) and to s{i+1}; the move taken."""
    state, after = f"s{i}", f"s{i + 1}"
    following = () if terminal else (after, f"s{i + 2}")
    transition = Transition(state, (state, after), 0 if terminal else 1, float(i), state if terminal else after,
                            following, terminal)
    return transition, {key: vector(key) for key in transition.keys()}


def filled(n: int, capacity: int = 100, seed: int = 0) -> ReplayBuffer:
    buffer = ReplayBuffer(capacity, seed)
    for i in range(n):
        buffer.push(*step(i))
    return buffer


def test_a_transition_names_the_action_taken_among_the_states_actions() -> None:
    transition, _ = step(3)
    assert transition.actions[transition.taken] == transition.next_state == "s4"
    with pytest.raises(ValueError, match="not one of the 2 legal actions"):
        Transition("s", ("s", "t"), 2, 1.0, "t", ("t",), False)
    with pytest.raises(ValueError, match="needs the next state's actions"):
        Transition("s", ("s", "t"), 1, 1.0, "t", (), False)


def test_the_buffer_holds_at_most_its_capacity_and_forgets_the_oldest_first() -> None:
    buffer = filled(10, capacity=4)
    assert len(buffer) == 4
    assert {t.reward for t in buffer.sample(200)} == {6.0, 7.0, 8.0, 9.0}


def test_an_embedding_is_kept_while_a_transition_names_it_and_no_longer() -> None:
    buffer = filled(10, capacity=4)
    # transitions 6..9 name s6..s11
    assert buffer.stored_vectors == 6
    assert torch.equal(buffer.vectors(["s6", "s11"]), torch.stack([vector("s6"), vector("s11")]))
    with pytest.raises(KeyError):
        buffer.vectors(["s5"])


def test_a_transition_whose_embeddings_are_missing_is_refused() -> None:
    transition, vectors = step(0)
    del vectors["s2"]
    with pytest.raises(KeyError, match="no embedding for 1"):
        ReplayBuffer(10).push(transition, vectors)


def test_sampling_is_uniform_and_determined_by_the_seed() -> None:
    draws = [t.reward for t in filled(5, seed=7).sample(5000)]
    assert [t.reward for t in filled(5, seed=7).sample(5000)] == draws
    assert [t.reward for t in filled(5, seed=8).sample(5000)] != draws
    for reward in range(5):
        assert draws.count(float(reward)) == pytest.approx(1000, rel=0.1)


def test_sampling_an_empty_buffer_says_so() -> None:
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(3).sample(1)


def test_a_buffer_restored_from_a_checkpoint_holds_and_samples_what_the_original_would() -> None:
    buffer = filled(10, capacity=6, seed=3)
    buffer.sample(17)  # the generator has moved on
    file = io.BytesIO()
    torch.save(buffer.state_dict(), file)
    file.seek(0)
    restored = ReplayBuffer.from_state_dict(torch.load(file, weights_only=True))
    assert len(restored) == 6 and restored.stored_vectors == buffer.stored_vectors
    assert restored.sample(50) == buffer.sample(50)
    assert torch.equal(restored.vectors(["s9", "s11"]), buffer.vectors(["s9", "s11"]))
    restored.push(*step(10, terminal=True))
    assert len(restored) == 6  # its capacity came along too
