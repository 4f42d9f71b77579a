"""The machines code is generated for: a compiler, its flags and how to run
the result.

Every C target compiles the same source; what differs is the compiler, the
`-march` flags and, for a foreign architecture, the qemu-user launcher that
runs its (statically linked) binaries here. The common C flags keep the
interpreter's meaning: no `-ffast-math` (it breaks NaN), `-fwrapv` (integers
wrap as numpy's do). `-ffp-contract=fast` lets `a * b + c` be one fused
multiply-add, rounded once instead of twice: results differ from the
interpreter's in the last bits (well within the verification tolerance; every
library kernel and the random walks of tests/test_codegen_c.py agree), and a
matmul reaches the FMA peak instead of half of it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# -fno-predictive-commoning: in a register tile of output positions whose window taps overlap (a 3x3
# convolution at stride 2 reads x[2r + k]), gcc carries the reused inputs from one tap to the next
# through the stack and spills in the innermost loop: ResNet's 3x3 stride 2 at 28x28 ran 1.25 ms with
# it, 0.83 ms without; the library's kernels are unchanged (conv2, matmul, conv1, relu_ffn within 3%)
_C_FLAGS = ("-O3", "-std=c11", "-fno-math-errno", "-fwrapv", "-ffp-contract=fast", "-fno-predictive-commoning",
            "-fopenmp")
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


def native_vector_registers() -> int:
    """AVX-512 has 32 vector registers, earlier x86 16; Arm and RISC-V vector units have 32."""
    return 32 if "avx512f" in cpu_flags() or not _HOST_X86 else 16


@dataclass(frozen=True)
class Caches:
    """The data caches one core of a target sees, in bytes: its level 1 data cache, level 2, the last
    level (shared by the cores), and the largest that is its own. The defaults are a typical x86 core's
    of recent years, for a machine that is not this one."""

    l1d: int = 32 << 10
    l2: int = 1 << 20
    l3: int = 32 << 20
    private: int = 1 << 20


@dataclass(frozen=True)
class Target:
    """`compiler + flags` builds a binary (flags come after the source file, so
    libraries link in order); `launcher + [binary, ...]` runs it.
    `vector_bytes` is the width of one vector register, `vector_registers`
    how many there are, `caches` the data caches of one core, and `cores` the threads the search may use.
    `cpu_flags` are host CPU features without which the binaries cannot run here."""

    name: str
    language: str  # "c" | "cuda" | "hip"
    compiler: tuple[str, ...]
    flags: tuple[str, ...]
    vector_bytes: int
    launcher: tuple[str, ...] = ()
    cores: int = 1
    cpu_flags: tuple[str, ...] = ()
    x86: bool = False  # the C backend may use x86 streaming stores
    vector_registers: int = 16
    caches: Caches = Caches()

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


def _c_target(name: str, compiler: str, march: tuple[str, ...], vector_bytes: int, vector_registers: int,
              launcher: tuple[str, ...] = (), requires: tuple[str, ...] = (), x86: bool = False) -> Target:
    # qemu-user runs a static binary without the target's shared libraries
    static = ("-static",) if launcher else ()
    # a binary that runs on this machine (not under an emulator) meets this machine's caches
    caches = Caches() if launcher else host_caches()
    return Target(name, "c", (compiler,), _C_FLAGS + march + static + _LIBS, vector_bytes, launcher,
                  os.cpu_count() or 1, requires, x86, vector_registers, caches)


_HOST_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@cache
def host_caches() -> Caches:
    """This machine's data caches as sysfs shows them for CPU 0: each level's size, and the largest
    level that serves that CPU alone (its private cache). A level sysfs does not show keeps
    `Caches()`'s typical size, and the private cache then counts as the second level."""
    sizes: dict[int, int] = {}
    private = 0
    try:
        for index in _CACHE.glob("index*"):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level, size = int((index / "level").read_text()), _size((index / "size").read_text())
            sizes[level] = max(size, sizes.get(level, 0))
            shared = (index / "shared_cpu_list").read_text().strip()
            if "," not in shared and "-" not in shared:
                private = max(private, size)
    except (OSError, ValueError):
        pass
    typical = Caches()
    return Caches(sizes.get(1, typical.l1d), sizes.get(2, typical.l2), sizes.get(3, sizes.get(2, typical.l3)),
                  private or sizes.get(2, typical.private))


@cache
def streaming_threshold_bytes() -> int:
    """The output size from which the C backend stores with streaming stores:
    what the cores' private caches hold, capped by the last-level cache.
    Not the last-level cache itself: on a virtual machine sysfs reports the
    host's whole L3 (260 MiB here, shared with other tenants), yet
    write-allocate already costs a kernel writing 4 MiB (bench/results/codegen_speed.md)."""
    caches = host_caches()
    return min(caches.private * (os.cpu_count() or 1), caches.l3)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        _c_target("native", "gcc", ("-march=native",), native_vector_bytes(), native_vector_registers(),
                  x86=_HOST_X86),
        _c_target("x86-avx2", "gcc", ("-march=haswell",), 32, 16, requires=("avx2",), x86=True),
        _c_target("x86-avx512", "gcc", ("-march=skylake-avx512",), 64, 32, requires=("avx512f",), x86=True),
        _c_target("arm-neon", "aarch64-linux-gnu-gcc", ("-march=armv8-a",), 16, 32,
                  ("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu")),
        # GCC 12 compiles vector types for RVV as scalar code (it has no RVV
        # autovectorizer); the width is fixed at VLEN = 256 bits.
        _c_target("riscv-rvv", "riscv64-linux-gnu-gcc", ("-march=rv64gcv", "-mabi=lp64d"), 32, 32,
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
