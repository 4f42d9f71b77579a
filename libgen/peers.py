"""The peers' times for a library kernel: numpy, PyTorch, torch.compile, ONNX Runtime (bench/peers).

The peers live in the repository's bench/, which is not part of the installed package, so they are
imported when asked for: run `dojo library build --peers` from the repository (or with it on
PYTHONPATH). A peer computes what the library kernel's spec computes at the same shape; a kernel
from a `.dojo` file has no peer. Each peer is timed on this machine with fresh inputs for at
least `min_time_s`, holding the runner's whole-machine lock (runner/local.py), and checked against
a float64 reference; a peer that fails or gives other numbers has no time (None).
"""

from __future__ import annotations

from collections.abc import Sequence

from codegen.build import default_cache_dir
from dojo_ir import random_inputs
from runner.files import exclusive

from .kernels import KernelSpec, LibraryError

DEFAULT = ("numpy", "torch", "torch.compile", "onnxruntime")


def peer_times(spec: KernelSpec, peers: Sequence[str], min_time_s: float = 0.5) -> tuple[tuple[str, float | None], ...]:
    """Each of `peers`' median time on `spec` (None where it failed); () for a kernel of a file."""
    try:
        from bench import peers as bench_peers
    except ImportError as error:
        raise LibraryError(f"--peers needs the repository's bench/peers on the Python path ({error})") from None
    unknown = [p for p in peers if p not in bench_peers.PEERS]
    if unknown:
        raise LibraryError(f"unknown peer {', '.join(unknown)}; the peers are {', '.join(bench_peers.PEERS)}")
    if spec.library is None:
        return ()
    shape = dict(spec.shape)
    inputs = random_inputs(spec.program, 0)
    expected = bench_peers.reference(spec.library, inputs)
    lock = default_cache_dir() / "bench.lock"
    times = []
    for peer in peers:
        outcome = bench_peers.evaluate(peer, spec.library, shape, inputs, expected, min_time_s=min_time_s,
                                       lock=lambda: exclusive(lock))
        times.append((peer, outcome.median_s if outcome.ok else None))
    return tuple(times)
