"""The machines code is generated for: a compiler, its flags and how to run
the result.

Every C target compiles the same source; what differs is the compiler, the
`-march` flags and, for a foreign architecture, the qemu-user launcher that
runs its (statically linked) binaries here. The common C flags keep the
interpreter's meaning: no `-ffast-math` (it breaks NaN), `-fwrapv` (integers
wrap as numpy's do), `-ffp-contract=off` (no fused multiply-add, so results
round as the interpreter's do; drop it to trade exactness for speed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_C_FLAGS = ("-O3", "-std=c11", "-fno-math-errno", "-fwrapv", "-ffp-contract=off", "-fopenmp")
_LIBS = ("-lm",)
_CPUINFO = Path("/proc/cpuinfo")


@cache
def cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags (empty where /proc/cpuinfo has none)."""
    try:
        text = _CPUINFO.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@cache
def gpu_present(language: str) -> bool:
    """Whether the vendor's own tool sees a GPU: nvidia-smi for CUDA,
    rocminfo for HIP."""
    probe = {"cuda": ["nvidia-smi", "-L"], "hip": ["rocminfo"]}[language]
    if shutil.which(probe[0]) is None:
        return False
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def native_vector_bytes() -> int:
    flags = cpu_flags()
    return 64 if "avx512f" in flags else 32 if "avx2" in flags else 16


@dataclass(frozen=True)
class Target:
    """`compiler + flags` builds a binary (flags come after the source file, so
    libraries link in order); `launcher + [binary, ...]` runs it.
    `vector_bytes` is the width of one vector register and `cores` the
    threads the search may use. `cpu_flags` are host CPU features without
    which the binaries cannot run here."""

    name: str
    language: str  # "c" | "cuda" | "hip"
    compiler: tuple[str, ...]
    flags: tuple[str, ...]
    vector_bytes: int
    launcher: tuple[str, ...] = ()
    cores: int = 1
    cpu_flags: tuple[str, ...] = ()

    def buildable(self) -> bool:
        """Whether the compiler (the command's last word: `env VAR=... cc`) is on PATH."""
        return shutil.which(self.compiler[-1]) is not None

    def runnable(self) -> bool:
        """Whether binaries for this target can run on this machine: it
        builds, its launcher is on PATH, the host has its CPU features, and a
        GPU target has a GPU of its kind (a runner on a GPU box)."""
        return (self.buildable()
                and (not self.launcher or shutil.which(self.launcher[0]) is not None)
                and set(self.cpu_flags) <= cpu_flags()
                and (self.language == "c" or gpu_present(self.language)))


def _c_target(name: str, compiler: str, march: tuple[str, ...], vector_bytes: int,
              launcher: tuple[str, ...] = (), requires: tuple[str, ...] = ()) -> Target:
    # qemu-user runs a static binary without the target's shared libraries
    static = ("-static",) if launcher else ()
    return Target(name, "c", (compiler,), _C_FLAGS + march + static + _LIBS, vector_bytes, launcher,
                  os.cpu_count() or 1, requires)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        _c_target("native", "gcc", ("-march=native",), native_vector_bytes()),
        _c_target("x86-avx2", "gcc", ("-march=haswell",), 32, requires=("avx2",)),
        _c_target("x86-avx512", "gcc", ("-march=skylake-avx512",), 64, requires=("avx512f",)),
        _c_target("arm-neon", "aarch64-linux-gnu-gcc", ("-march=armv8-a",), 16,
                  ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")),
        # GCC 12 compiles vector types for RVV as scalar code (it has no RVV
        # autovectorizer); the width is fixed at VLEN = 256 bits.
        _c_target("riscv-rvv", "riscv64-linux-gnu-gcc", ("-march=rv64gcv", "-mabi=lp64d"), 32,
                  ("qemu-riscv64", "-cpu", "rv64,v=true,vlen=256,vext_spec=v1.0", "-L", "/usr/riscv64-linux-gnu")),
        # The GPU backend (codegen/gpu.py). `-arch=sm_80` also embeds PTX, which
        # newer NVIDIA GPUs compile at load. hipcc targets NVIDIA when it finds
        # CUDA installed, so `env` pins AMD.
        Target("cuda", "cuda", ("nvcc",), ("-O3", "-arch=sm_80"), 16),
        Target("hip", "hip", ("env", "HIP_PLATFORM=amd", "hipcc"), ("-O3", "--offload-arch=gfx90a"), 16),
    )
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target `{name}`; the targets are {', '.join(TARGETS)}") from None
