"""What the agent sees of a move (agent/perfllm/actions.py): programs one move apart are nearly the
same text embedding, and the embedded descriptions of their moves tell them apart."""

from __future__ import annotations

import itertools

import pytest
import test_perfllm_fakes
import torch
from test_perfllm_fakes import FakeEmbedder, real_embedder

from agent.perfllm.actions import STOP, changed_lines, describe, observe
from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply

one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)

SOFTMAX = load(KERNELS["softmax"].quick())
TILED = apply(SOFTMAX, "split_scope(op=m#1, depth=0, factor=16)")
MOVES = ("vectorize_scope(op=m#1, depth=1)",     # a `:v`
         "split_scope(op=m#1, depth=0, factor=2)",  # two tile sizes
         "split_scope(op=m#1, depth=0, factor=3)",
         "join_scopes(op=m#2, depth=0)",            # a fusion
         "parallelize_scope(op=m#1, depth=0)")


def test_a_move_is_described_by_itself_then_the_lines_it_removes_and_adds() -> None:
    before = to_text(TILED)
    after = to_text(apply(TILED, MOVES[0]))
    assert describe(MOVES[0], before, after) == "\n".join([
        MOVES[0], "-48 16 m[{0}*16+{1}] = -inf", "+48 16:v m[{0}*16+{1}] = -inf"])
    assert changed_lines(before, after) == (["48 16 m[{0}*16+{1}] = -inf"], ["48 16:v m[{0}*16+{1}] = -inf"])


def test_an_observation_lists_stop_then_every_legal_move_with_where_it_leads() -> None:
    seen = observe(TILED, FakeEmbedder())
    assert seen.keys[0] == seen.state and len(seen.keys) == len(seen.actions) == len(seen.moves) + 1
    assert seen.actions[0] != seen.actions[1]
    for i, move in enumerate(seen.moves, start=1):
        assert to_text(seen.programs[i]) == to_text(apply(seen.program, move))
    fake = FakeEmbedder()
    assert seen.action_vectors([0])[0].equal(torch.cat([fake.embed_many([STOP])[0], torch.zeros(fake.dim)]))
    # an action: the move's embedding, then the change its lines make
    vectorize = seen.moves.index(MOVES[0]) + 1
    move, removed, added = fake.embed_many([MOVES[0], "48 16 m[{0}*16+{1}] = -inf", "48 16:v m[{0}*16+{1}] = -inf"])
    assert torch.allclose(seen.action_vectors([vectorize])[0], torch.cat([move, added - removed]))


def test_programs_one_move_apart_blur_in_the_text_embedding_and_their_moves_do_not() -> None:
    """The reason actions are descriptions: one move changes a program's embedding by well under
    2% in cosine, while the descriptions of two different moves are at least five times further
    apart than the programs they make."""
    seen = observe(TILED, real_embedder())
    picked = [seen.moves.index(move) + 1 for move in MOVES]
    programs = real_embedder().embed_many([seen.programs[i] for i in picked])
    actions = seen.action_vectors(picked)

    def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.nn.functional.cosine_similarity(a, b, dim=0))

    assert all(cosine(seen.state_vector, p) > 0.98 for p in programs)
    for a, b in itertools.combinations(range(len(MOVES)), 2):
        assert 1 - cosine(actions[a], actions[b]) >= 5 * (1 - cosine(programs[a], programs[b])), (MOVES[a], MOVES[b])
