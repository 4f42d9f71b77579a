"""Test doubles that the PerfLLM tests share, and the specification they meet.

- `FakeEmbedder`: a deterministic pseudo-random unit vector per canonical text, so that tests of
  the learning mechanics run in milliseconds without the model. It meets the `Embedding`
  protocol that training and playing ask of an embedder.
- `real_embedder()`: the default model, loaded once per test session (as `shared` does).
- `speedup_cost(rule)`: a cost model, a pure function of the moves.
- `TextRunner`: a runner whose time is a pure function of the program's text, for an Evaluator
  that compiles nothing.
- `one_thread()`: torch on one thread for the duration (a module fixture in each test module):
  the agent's tensors are tiny, threads cost more than they give on them, and the machine is
  shared with benchmarks.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator

import torch

from agent.perfllm.embed import Embedder, canonical_text, shared
from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from runner.result import RunResult


class FakeEmbedder:
    def __init__(self, dim: int = 16, name: str = "fake"):
        self._dim, self.name, self.calls = dim, name, 0
        self.on_every_core, self.calls_on_every_core = False, 0

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def identity(self) -> dict:
        return {"name": self.name, "dim": self._dim, "max_tokens": 0, "fingerprint": self.name, "model_dir": None}

    @contextlib.contextmanager
    def every_core(self):
        self.on_every_core = True
        try:
            yield
        finally:
            self.on_every_core = False

    def embed_many(self, items) -> torch.Tensor:
        self.calls += 1
        self.calls_on_every_core += self.on_every_core
        rows = []
        for item in items:
            seed = int(hashlib.sha256(canonical_text(item).encode()).hexdigest()[:12], 16)
            row = torch.randn(self._dim, generator=torch.Generator().manual_seed(seed))
            rows.append(torch.nn.functional.normalize(row, dim=0))
        return torch.stack(rows) if rows else torch.empty(0, self._dim)


def real_embedder() -> Embedder:
    return shared()


def speedup_cost(rule: Callable[[str], float], base: float = 1e-3) -> Callable[[list[str]], float]:
    """The time of a program is `base` times `rule(move)` for each move that made it."""
    return lambda moves: base * math.prod(rule(m) for m in moves)


class TextRunner:
    """1 ms, less 10% for each parallel scope; `runs` counts the programs it timed."""

    def __init__(self):
        self.runs = 0

    def run(self, program, target="native", repeats=10, warmup=2, spec=None) -> RunResult:
        self.runs += 1
        median = 1e-3 * 0.9 ** to_text(program).count(":p")
        return RunResult(target, median, median, median, repeats, 0.0, True, 0.0, None, (median,) * repeats)


def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_fake_embedder_is_deterministic_unit_length_and_tells_texts_apart() -> None:
    embedder = FakeEmbedder()
    first = embedder.embed_many(["a", "b", "a"])
    again = FakeEmbedder().embed_many(["a"])
    assert first.shape == (3, 16)
    assert torch.allclose(first.norm(dim=1), torch.ones(3))
    assert torch.equal(first[0], first[2]) and torch.equal(first[0], again[0])
    assert not torch.allclose(first[0], first[1])


def test_the_fake_embedder_reads_a_program_as_its_canonical_text() -> None:
    program = load(KERNELS["add"].small())
    embedder = FakeEmbedder()
    assert torch.equal(embedder.embed_many([program])[0], embedder.embed_many([canonical_text(program)])[0])
    assert canonical_text(program) != to_text(program)  # the library's header comment is not read


def test_speedup_cost_multiplies_the_moves_factors() -> None:
    cost = speedup_cost(lambda m: 0.5 if m.startswith("fast") else 2.0)
    assert cost([]) == 1e-3
    assert cost(["fast(x=1)", "slow(x=1)", "fast(x=2)"]) == 1e-3 * 0.5 * 2.0 * 0.5
