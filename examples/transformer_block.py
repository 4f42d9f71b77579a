"""A transformer block whose kernels come from a library PerfDojo tuned (docs/library.md).

    python examples/transformer_block.py --out build/block --method heuristic
    python examples/transformer_block.py --out build/block --method sa --budget 40 --ray auto

The block is a pre-norm encoder layer of a small model (256 tokens of 256 features, one attention
head, a SwiGLU feed-forward of 512): layer norm, the query, key, value and output projections,
softmax attention, then layer norm, SwiGLU and the down projection, each with its residual. Its
kernels are the library's generators at these shapes (dojo_ir/library): `layernorm`, `matmul` as
`proj` (T x D by D x D), `scores` (T x D by D x T), `attend` (T x T by T x D) and `down`
(T x F by F x D), `softmax` and `swiglu`. `dojo library build` tunes them into a library whose
PyTorch operators `DojoBlock` calls where `TorchBlock` calls PyTorch's own; both hold the same
weights. The script builds the library (a second run reuses it), checks that both blocks give
the same outputs and prints their times (bench/transformer_block.py measures them carefully).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from libgen import BuildEvent, BuildOptions, KernelSpec, KernelTuneOptions, build_library, library_kernel

TOKENS, FEATURES, HIDDEN = 256, 256, 512
NAME = "block"  # the library: libblock.so, block.py, torch.ops.block
EPS = 1e-5  # the library's layer norm adds 1e-5, as F.layer_norm's default


def kernels(tokens: int = TOKENS, features: int = FEATURES, hidden: int = HIDDEN) -> list[KernelSpec]:
    """The block's kernels at its shapes."""
    t, d, f = tokens, features, hidden
    return [library_kernel("layernorm1", "layernorm", m=t, n=d),
            library_kernel("matmul", "proj", m=t, k=d, n=d),
            library_kernel("matmul", "scores", m=t, k=d, n=t),
            library_kernel("softmax", m=t, n=t),
            library_kernel("matmul", "attend", m=t, k=t, n=d),
            library_kernel("swiglu", b=1, t=t, d=d, h=f),
            library_kernel("matmul", "down", m=t, k=f, n=d)]


class TorchBlock(nn.Module):
    """The block in eager PyTorch. The weights are stored as the library's matmul reads them
    (input features by output features), and the query weights carry the 1/sqrt(D) scaling."""

    def __init__(self, features: int = FEATURES, hidden: int = HIDDEN, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)

        def weight(*shape: int, scale: float = 1.0) -> nn.Parameter:
            values = torch.randn(*shape, generator=generator) * scale / shape[0] ** 0.5
            return nn.Parameter(values, requires_grad=False)

        self.norm1_g, self.norm2_g = weight(features, scale=16), weight(features, scale=16)
        self.norm1_b, self.norm2_b = weight(features, scale=1.6), weight(features, scale=1.6)
        self.wq = weight(features, features, scale=features ** -0.5)
        self.wk, self.wv, self.wo = (weight(features, features) for _ in range(3))
        self.w1, self.v1 = weight(features, hidden), weight(features, hidden)
        self.w2 = weight(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1]
        h = F.layer_norm(x, (d,), self.norm1_g, self.norm1_b, EPS)
        q, k, v = h @ self.wq, h @ self.wk, h @ self.wv
        x = x + (torch.softmax(q @ k.T, dim=-1) @ v) @ self.wo
        h = F.layer_norm(x, (d,), self.norm2_g, self.norm2_b, EPS)
        return x + (F.silu(h @ self.w1) * (h @ self.v1)) @ self.w2


class DojoBlock(nn.Module):
    """The same block, and the same weights, with every kernel from the library: `ops` is its
    `torch.ops` namespace. Only the residual additions and one transpose are PyTorch's."""

    def __init__(self, block: TorchBlock, ops: object):
        super().__init__()
        self.block, self.ops = block, ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, ops = self.block, self.ops
        h = ops.layernorm(x, b.norm1_g, b.norm1_b)
        q, k, v = ops.proj(h, b.wq), ops.proj(h, b.wk), ops.proj(h, b.wv)
        x = x + ops.proj(ops.attend(ops.softmax(ops.scores(q, k.T.contiguous())), v), b.wo)
        h = ops.layernorm(x, b.norm2_g, b.norm2_b)
        return x + ops.down(ops.swiglu(h[None], b.w1, b.v1)[0], b.w2)


def load_library(out: Path) -> ModuleType:
    """The library's Python module, which registers `torch.ops.block`."""
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module(NAME)
    finally:
        sys.path.remove(str(out))


def build(out: Path, tuning: KernelTuneOptions, ray: str | None = None,
          shape: tuple[int, int, int] = (TOKENS, FEATURES, HIDDEN)) -> ModuleType:
    """Tune the block's kernels at `shape` (tokens, features, hidden) as `tuning` says into the
    library in `out` (a kernel already tuned there with the same method and budget is kept) and
    load it."""
    def say(event: BuildEvent) -> None:
        if event.kind != "progress":
            print(event.message, file=sys.stderr, flush=True)

    if ray:
        from libgen.cluster import Cluster

        with Cluster(ray) as cluster:
            build_library(kernels(*shape), out, BuildOptions(tuning, name=NAME), cluster=cluster, on_event=say)
    else:
        build_library(kernels(*shape), out, BuildOptions(tuning, name=NAME), on_event=say)
    return load_library(out)


def median_time(block: nn.Module, x: torch.Tensor, repeats: int) -> float:
    with torch.inference_mode():
        for _ in range(3):
            block(x)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            block(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/transformer_block"), help="the library's directory")
    parser.add_argument("--method", default="heuristic", help="how to tune each kernel (default: heuristic)")
    parser.add_argument("--budget", type=int, default=1, help="evaluations per kernel (default: 1)")
    parser.add_argument("--ray", help="tune on a Ray cluster: auto, local or its address")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    build(args.out, KernelTuneOptions(args.method, args.budget), args.ray)
    reference = TorchBlock().eval()
    ours = DojoBlock(reference, getattr(torch.ops, NAME)).eval()
    x = torch.randn(TOKENS, FEATURES, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected, got = reference(x), ours(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    eager, dojo = median_time(reference, x, args.repeats), median_time(ours, x, args.repeats)
    print(f"same outputs (largest difference {float((got - expected).abs().max()):.2g}); "
          f"eager PyTorch {eager * 1e3:.3f} ms, PerfDojo's library {dojo * 1e3:.3f} ms: {eager / dojo:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
