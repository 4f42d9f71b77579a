"""The roofline: how fast a kernel could possibly run on this machine.

    w = work(program)                 # bytes it must move, flops it must do
    machine = machine_limits()        # measured once, then read from the cache
    bound_s(w, machine)               # no schedule of this program runs faster (roughly)
    warm_bound_s(w, machine, caches)  # nor when its data stays in the caches from one run to the next

`work` is a pure function of the IR. Bytes are compulsory traffic only: every
kernel input read once and every kernel output written once, per buffer, at
its stored size. Temporaries count zero: the bound assumes they stay in cache
(or in registers), which is what fusion and storage reuse aim for, so the
bound stays a bound for every schedule the moves can reach, even where the
spec itself materialises a large temporary. Flops are the arithmetic of the
operations' values (each `+ - * /`, unary minus and function call counts 1;
a reduction's combine counts 1) times the iterations of the scopes around
them. Index arithmetic is address computation, not work, and a subexpression
of literals only (`-inf`) is folded by the compiler, so neither counts.

`machine_limits` measures the machine's own limits with a small C program
compiled by the system gcc (`-O3 -march=native -fopenmp`, built and cached by
`codegen.build`) and run on every core: a STREAM-like memory test (triad and
read) and a peak f32 FMA test, each the best of several runs. The FMA test also
times one dependent chain (the latency), and the ratio of latency to issue
interval is how many independent accumulators a core needs in flight
(`fma_in_flight`: latency x FMA ports, 8 on Sapphire Rapids and Zen 4),
which sysfs does not say and the register-tile heuristic reads. A read test
over a chunk of each core's own that fits its level-2 cache, and another that
fits its share of the last level, gives what those caches deliver (`l2_Bps`,
`l3_Bps`, all cores): sysfs gives their sizes, never their speed, and the cost
model's loop-order times are traffic between levels at these rates. Vendor figures are
not used because a virtual machine's share of the memory system is what a
kernel gets. The result is cached as JSON in the build cache directory, keyed
by the CPU model and core count, so it costs about a second once and a file
read after.

The peak is f32 FMA throughput (2 flops per lane per FMA), the best case:
f64 halves it and code without FMAs (a lone add, `exp`) reaches a fraction of
it, so `bound_s` is optimistic for such kernels, as a roofline should be.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path
from types import MappingProxyType
from typing import Any

from codegen.build import BuildError, build, default_cache_dir
from codegen.targets import Caches, Target, host_caches, native_vector_bytes, native_vector_registers
from dojo_ir import Program
from dojo_ir.tree import Access, Binary, Call, Expr, Name, Num, Op, Ref, Unary, walk_ops

from .files import exclusive, write_atomically

__all__ = ["Machine", "MachineError", "Work", "bound_s", "warm_bound_s", "fma_in_flight", "machine_cache_path",
           "machine_limits", "machine_record", "measured_machine", "op_flops", "work"]

# Bump when the measurement changes, so that caches of the old one are not trusted.
_VERSION = 3
_MIB = 1 << 20
# Each of the three arrays is at least this big and at least the last-level
# cache, so that no pass over them is served from cache.
_MIN_ARRAY_BYTES = 64 * _MIB
# ... but at most this, so that a server's huge cache does not make the first
# touch of the arrays (page faults, slow on a virtual machine) cost seconds.
_MAX_ARRAY_BYTES = 256 * _MIB
_BANDWIDTH_REPEATS = 8
# Many short FMA runs rather than a few long ones: on a shared machine the best
# of many short runs is the likeliest to have had every core to itself.
_FMA_REPEATS = 20
_FMA_PER_THREAD = 24_000_000  # FMAs per thread and run: about 5-10 ms at 150-350 GFLOP/s
_RUN_TIMEOUT_S = 120
# Bytes each core reads per cache test and run: tens of passes over a chunk, a few milliseconds.
_CACHE_READ_BYTES = 256 * _MIB


# -- the work of a program ---------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """What a program must do at least: `bytes` of compulsory memory traffic and `flops` arithmetic operations."""

    bytes: int
    flops: int


def _constant(expr: Expr) -> bool:
    """Whether `expr` is made of literals only (`-inf`, `2 * 0.5`): the compiler folds it."""
    if isinstance(expr, Num):
        return True
    if isinstance(expr, Unary):
        return _constant(expr.operand)
    if isinstance(expr, Binary):
        return _constant(expr.left) and _constant(expr.right)
    if isinstance(expr, Call):
        return all(_constant(a) for a in expr.args)
    return False


def _flops(expr: Expr, calls: Mapping[str, int]) -> int:
    """Arithmetic operations in one evaluation of `expr`, a function call counting `calls[name]` (1 if
    absent). An access's indices are addresses, computed by integer units and often hoisted, so they
    do not count."""
    if isinstance(expr, (Num, Ref, Access, Name)) or _constant(expr):
        return 0
    if isinstance(expr, Unary):
        return 1 + _flops(expr.operand, calls)
    if isinstance(expr, Binary):
        return 1 + _flops(expr.left, calls) + _flops(expr.right, calls)
    if isinstance(expr, Call):
        return calls.get(expr.func, 1) + sum(_flops(a, calls) for a in expr.args)
    raise TypeError(f"not an expression: {expr!r}")


def op_flops(op: Op, calls: Mapping[str, int] = MappingProxyType({})) -> int:
    """The arithmetic of one execution of `op`: its value's, plus 1 for a reduction's combine. A
    function call is one flop, as rooflines count it, unless `calls` says what it costs."""
    return _flops(op.value, calls) + (op.reduction is not None)


def work(program: Program) -> Work:
    """The bytes `program` must move and the flops it must do, from its IR alone.

    Bytes: each buffer that holds an input is read once and each that holds an
    output written once (a buffer that is both counts twice), at its stored
    size; temporaries count zero, on the assumption that they stay in cache.
    Flops: per operation, the arithmetic in its value plus 1 for a reduction's
    combine, times the product of the sizes of the scopes around it."""
    flops = sum(op_flops(op) * prod(scope.size for scope in chain) for op, chain in walk_ops(program.body))
    return Work(bytes=compulsory_bytes(program), flops=flops)


def compulsory_bytes(program: Program) -> int:
    """`work`'s bytes: each buffer holding an input read once, each holding an output written once."""
    buffer_of = program.buffer_of
    read = {buffer_of[a].name: buffer_of[a] for a in program.inputs}
    written = {buffer_of[a].name: buffer_of[a] for a in program.outputs}
    return sum(b.storage_bytes for b in (*read.values(), *written.values()))


# -- the machine -------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """A machine's limits: memory bandwidth in bytes/s, peak f32 FMA rate in flop/s (all cores), its core count and
    CPU model, the independent FMAs a core must have under way to reach the peak (`fma_in_flight`), and the
    read bandwidth of the level-2 and last-level caches in bytes/s, all cores (None where not measured)."""

    bandwidth_Bps: float
    peak_flops: float
    cores: int
    cpu: str
    fma_in_flight: int = 1
    l2_Bps: float | None = None
    l3_Bps: float | None = None


class MachineError(Exception):
    """The limits could not be measured: no compiler, a failed run or nonsense numbers."""


def bound_s(work: Work, machine: Machine) -> float:
    """The roofline bound in seconds: the slower of moving the bytes at full bandwidth and doing the flops at peak."""
    return max(work.bytes / machine.bandwidth_Bps, work.flops / machine.peak_flops)


def warm_bound_s(work: Work, machine: Machine, caches: Caches) -> float:
    """The roofline bound of a kernel timed run after run, whose data the caches keep between runs:
    its bytes at the bandwidth of the nearest level that holds them all (the level-1 caches' is not
    measured, so bytes they hold count nothing; each core's own levels hold a share), its flops at
    peak. `bound_s` is no bound for such a kernel: a layer norm of 1 MiB times well under it. A level
    never counts slower than memory: a server's last level, shared over a mesh, can read slower for one
    core than the memory's triad over all of them measures, though what it holds needs no memory."""
    held = [(caches.l1d * machine.cores, math.inf), (caches.l2 * machine.cores, machine.l2_Bps),
            (caches.l3, machine.l3_Bps)]
    rate = next((max(bps, machine.bandwidth_Bps) for size, bps in held if bps and work.bytes <= size),
                machine.bandwidth_Bps)
    return max(work.bytes / rate, work.flops / machine.peak_flops)


# The measurement. Arrays are 2 MiB aligned and advised as huge pages: page
# faults on a virtual machine cost more than the test itself otherwise, and
# fewer TLB misses mean the timed loops see memory, not the page walker. Every
# loop uses the same static schedule as the first touch, so each thread works
# on the pages it faulted in. The triad writes `a` with non-temporal stores
# where AVX is available, so the line is not first read (write-allocate) and
# the bytes it must move are exactly: read b, read c, write a. Without them it
# counts the write-allocate read of `a` too (4 arrays' worth), since the memory
# system really moves it. The read test sums b and c with four independent
# vector accumulators so that add latency does not limit it.
_SOURCE = r"""
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define LANES (VBYTES / 4)
/* keeps a vector in a vector register: the compiler must assume the empty asm changed it */
#if defined(__x86_64__) || defined(__i386__)
#define PIN(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__)
#define PIN(v) __asm__("" : "+w"(v))
#else
#define PIN(v) ((void)0)
#endif
typedef float vf __attribute__((vector_size(VBYTES)));

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, n * sizeof(float)) != 0) { fprintf(stderr, "out of memory\n"); exit(1); }
#ifdef MADV_HUGEPAGE
    madvise(p, n * sizeof(float), MADV_HUGEPAGE);
#endif
    return p;
}

/* Every thread reads a chunk of `chunk` floats of its own, `passes` times, after one pass that brings
   it into its caches; the best of `repeats` runs, in seconds. Eight independent accumulators keep
   enough loads under way that neither the add latency nor the loop limits the rate. */
static double cache_read(const float *base, size_t chunk, long passes, int repeats, double *checksum)
{
    double best = 1e30;
    for (int r = 0; r <= repeats; r++) {
        float total = 0;
        double t0 = now();
        #pragma omp parallel reduction(+:total)
        {
            const float *p = base + (size_t)omp_get_thread_num() * chunk;
            vf sum[8] = {0};
            for (long k = 0; k < (r == 0 ? 1 : passes); k++)
                for (size_t i = 0; i < chunk; i += 8 * LANES) {
                    for (int j = 0; j < 8; j++) {
                        vf x;
                        memcpy(&x, p + i + j * LANES, VBYTES);
                        sum[j] += x;
                    }
                }
            vf all = sum[0];
            for (int j = 1; j < 8; j++) all += sum[j];
            for (int l = 0; l < LANES; l++) total += all[l];
        }
        double t1 = now();
        if (r > 0 && t1 - t0 < best) best = t1 - t0;  /* run 0 is the pass that warms the caches */
        *checksum += total;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s FLOATS BW_REPEATS FMA_REPEATS FMA_ITERATIONS L2_CHUNK L3_CHUNK\n", argv[0]);
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10) / 64 * 64;
    int repeats = atoi(argv[2]), fma_repeats = atoi(argv[3]);
    long iterations = atol(argv[4]);
    size_t chunks[2] = {strtoull(argv[5], NULL, 10) / 128 * 128, strtoull(argv[6], NULL, 10) / 128 * 128};
    if (n == 0 || repeats < 1 || fma_repeats < 1 || iterations < 1) { fprintf(stderr, "bad arguments\n"); return 2; }

    double t_init = now();
    float *a = alloc(n), *b = alloc(n), *c = alloc(n);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f + (float)(i & 7); c[i] = 2.0f; }
    t_init = now() - t_init;

    /* from argc, so that the compiler cannot precompute anything */
    float s = (float)argc * 0.125f;
    double triad = 1e30, read = 1e30, checksum = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
#if defined(__AVX512F__) && VBYTES == 64
        #pragma omp parallel
        {
            __m512 vs = _mm512_set1_ps(s);
            #pragma omp for schedule(static) nowait
            for (size_t i = 0; i < n; i += 16)
                _mm512_stream_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(vs, _mm512_load_ps(c + i))));
            _mm_sfence();  /* streaming stores are weakly ordered: drain them before the barrier */
        }
#elif defined(__AVX__)
        #pragma omp parallel
        {
            __m256 vs = _mm256_set1_ps(s);
            #pragma omp for schedule(static) nowait
            for (size_t i = 0; i < n; i += 8)
                _mm256_stream_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i))));
            _mm_sfence();
        }
#else
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
#endif
        double t1 = now();
        if (t1 - t0 < triad) triad = t1 - t0;
        checksum += a[(n / 2 + r) % n];

        float total = 0;
        t0 = now();
        #pragma omp parallel reduction(+:total)
        {
            vf sum[4] = {0};
            #pragma omp for schedule(static) nowait
            for (size_t i = 0; i < n; i += 2 * LANES) {
                vf x0, x1, y0, y1;
                memcpy(&x0, b + i, VBYTES); memcpy(&x1, b + i + LANES, VBYTES);
                memcpy(&y0, c + i, VBYTES); memcpy(&y1, c + i + LANES, VBYTES);
                sum[0] += x0; sum[1] += x1; sum[2] += y0; sum[3] += y1;
            }
            vf all = sum[0] + sum[1] + sum[2] + sum[3];
            for (int l = 0; l < LANES; l++) total += all[l];
        }
        t1 = now();
        if (t1 - t0 < read) read = t1 - t0;
        checksum += total;
    }

    /* On one core: one dependent chain, whose time per FMA is the latency, and CHAINS independent
       chains, more than latency x FMA ports so that the units never wait, whose time per FMA is the
       issue interval. Then the peak: CHAINS chains on every core. The multiplier and addend are
       broadcast and pinned to registers (the empty asm): built lane by lane, GCC keeps them in
       memory and every FMA carries a load, which capped the rate at 332 of the 470 GFLOP/s that
       a 2-core Sapphire Rapids has. The results are printed so nothing is dead code. */
    double latency = 1e30, interval = 1e30, fma = 1e30;
    for (int r = 0; r < fma_repeats; r++) {
        vf x = (vf){} + (float)argc, acc[CHAINS];
        vf m = (vf){} + (1.0f - 1e-7f * (float)argc), add = (vf){} + 1e-6f;
        PIN(m); PIN(add);
        double t0 = now();
        for (long it = 0; it < iterations; it++) x = x * m + add;
        double t1 = now();
        if (t1 - t0 < latency) latency = t1 - t0;
        for (int j = 0; j < CHAINS; j++) acc[j] = x + (float)j;
        t0 = now();
        for (long it = 0; it < iterations; it++) {
            #pragma GCC unroll 32
            for (int j = 0; j < CHAINS; j++) acc[j] = acc[j] * m + add;
        }
        t1 = now();
        if (t1 - t0 < interval) interval = t1 - t0;
        for (int j = 0; j < CHAINS; j++) checksum += acc[j][0];
    }
    for (int r = 0; r < fma_repeats; r++) {
        float total = 0;
        double t0 = now();
        #pragma omp parallel reduction(+:total)
        {
            vf acc[CHAINS];
            vf m = (vf){} + (1.0f - 1e-7f * (float)argc), add = (vf){} + 1e-6f;
            PIN(m); PIN(add);
            for (int j = 0; j < CHAINS; j++)
                for (int l = 0; l < LANES; l++) acc[j][l] = (float)(j + l + omp_get_thread_num());
            for (long it = 0; it < iterations; it++) {
                #pragma GCC unroll 32
                for (int j = 0; j < CHAINS; j++) acc[j] = acc[j] * m + add;
            }
            vf all = acc[0];
            for (int j = 1; j < CHAINS; j++) all += acc[j];
            for (int l = 0; l < LANES; l++) total += all[l];
        }
        double t1 = now();
        if (t1 - t0 < fma) fma = t1 - t0;
        checksum += total;
    }

    /* a chunk of 0 (or more than the arrays hold for every thread) is not measured */
    int threads = omp_get_max_threads();
    double cache_Bps[2] = {0, 0}, cache_s[2] = {0, 0};
    for (int level = 0; level < 2; level++) {
        if (chunks[level] == 0 || chunks[level] * threads > n) continue;
        long passes = (long)(CACHE_READ_BYTES / (chunks[level] * sizeof(float)));
        if (passes < 1) passes = 1;
        cache_s[level] = cache_read(c, chunks[level], passes, repeats, &checksum);
        cache_Bps[level] = (double)chunks[level] * sizeof(float) * passes * threads / cache_s[level];
    }

#if defined(__AVX__)
    int nontemporal = 1;
#else
    int nontemporal = 0;
#endif
    double bytes = (double)n * sizeof(float);
    double triad_bytes = (nontemporal ? 3.0 : 4.0) * bytes;
    double flops = 2.0 * LANES * CHAINS * (double)iterations * threads;
    printf("{\"threads\": %d, \"array_bytes\": %.0f, \"init_s\": %.6g, \"nontemporal\": %s, "
           "\"triad_bytes\": %.0f, \"triad_s\": %.9g, \"triad_Bps\": %.9g, "
           "\"read_bytes\": %.0f, \"read_s\": %.9g, \"read_Bps\": %.9g, "
           "\"vector_bytes\": %d, \"chains\": %d, \"fma_flops\": %.0f, \"fma_s\": %.9g, \"peak_flops\": %.9g, "
           "\"fma_latency_s\": %.9g, \"fma_interval_s\": %.9g, "
           "\"l2_chunk_bytes\": %.0f, \"l2_s\": %.9g, \"l2_Bps\": %.9g, "
           "\"l3_chunk_bytes\": %.0f, \"l3_s\": %.9g, \"l3_Bps\": %.9g, "
           "\"checksum\": %.9g}\n",
           threads, bytes, t_init, nontemporal ? "true" : "false",
           triad_bytes, triad, triad_bytes / triad, 2.0 * bytes, read, 2.0 * bytes / read,
           VBYTES, CHAINS, flops, fma, flops / fma, latency / iterations,
           interval / ((double)iterations * CHAINS),
           (double)chunks[0] * sizeof(float), cache_s[0], cache_Bps[0],
           (double)chunks[1] * sizeof(float), cache_s[1], cache_Bps[1], checksum);
    free(a); free(b); free(c);
    return 0;
}
"""


def _cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (x86: `model name`; some Arm kernels: `Hardware`)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for wanted in ("model name", "Hardware", "cpu model", "uarch"):
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == wanted and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def _cores() -> int:
    # the count the C targets give OpenMP (codegen.targets), so the limits are those a kernel gets
    return os.cpu_count() or 1


def _array_floats() -> int:
    """Floats per array: each at least the last-level cache (so the three are
    three times it) and 64 MiB, but at most 256 MiB and a 48th of memory."""
    wanted = min(max(_MIN_ARRAY_BYTES, host_caches().l3), _MAX_ARRAY_BYTES)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        wanted = min(wanted, max(_MIN_ARRAY_BYTES, memory // 16 // 3))
    except (ValueError, OSError):
        pass
    return wanted // 4


def machine_cache_path(cache_dir: Path | None = None) -> Path:
    """Where the limits of this machine are cached: one file per CPU model and core count (and measurement
    version)."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    identity = json.dumps([_cpu_model(), _cores(), _VERSION])
    return directory / f"machine-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


def _read_record(path: Path) -> dict[str, Any] | None:
    """The cached record, or None when it is missing, unreadable or not one this version wrote."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    valid = (isinstance(record, dict) and record.get("version") == _VERSION
             and record.get("cpu") == _cpu_model() and record.get("cores") == _cores()
             and all(_positive(record.get(k)) for k in ("bandwidth_Bps", "peak_flops", "fma_in_flight")))
    return record if valid else None


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _cache_chunks(cores: int) -> tuple[int, int]:
    """Floats each core reads in the level-2 and last-level cache tests: half its level 2, and half
    its share of the last level. 0 (not measured) where that share is not at least twice the level
    2, so that a chunk would not really leave it: no last level beyond it, or one too small."""
    caches = host_caches()
    l3_chunk = caches.l3 // cores // 2
    return caches.l2 // 2 // 4, (l3_chunk // 4 if l3_chunk >= 2 * caches.l2 else 0)


def _measure(directory: Path, vector_bytes: int | None = None, march: str = "-march=native",
             floats: int | None = None, vector_registers: int | None = None,
             caches: bool = True) -> dict[str, Any]:
    """Build and run the measurement, with vectors of `vector_bytes` (default: the widest this
    machine has) and `vector_registers` of them, built for `march`, over arrays of `floats`, the
    caches' read bandwidth too if `caches`; the record to cache."""
    cores = _cores()
    vector_bytes = vector_bytes or native_vector_bytes()
    # as many independent chains as the registers hold beside the multiplier, the addend and two
    # spare: more than any core's FMA latency times its ports (4 x 2 on recent x86), without a spill
    chains = (vector_registers or native_vector_registers()) - 4
    # -ffp-contract=fast: `a * b + c` must become one FMA, as in the kernels the project generates
    target = Target("roofline", "c", ("gcc",), ("-O3", march, "-fopenmp", "-ffp-contract=fast", "-std=gnu11"),
                    vector_bytes, cores=cores)
    source = (f"#define VBYTES {vector_bytes}\n#define CHAINS {chains}\n"
              f"#define CACHE_READ_BYTES {_CACHE_READ_BYTES}.0\n{_SOURCE}")
    try:
        binary = build(source, target, directory)
    except BuildError as error:
        raise MachineError(f"cannot build the machine measurement: {error}") from None
    command = [str(binary.path), str(floats or _array_floats()), str(_BANDWIDTH_REPEATS), str(_FMA_REPEATS),
               str(_FMA_PER_THREAD // chains), *(str(c) for c in (_cache_chunks(cores) if caches else (0, 0)))]
    # every core, one thread bound to each, as the runner runs kernels
    environment = os.environ | {"OMP_NUM_THREADS": str(cores), "OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S, env=environment)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise MachineError(f"the machine measurement did not run: {error}") from None
    if result.returncode != 0:
        raise MachineError(f"the machine measurement failed (exit {result.returncode}): {result.stderr.strip()}")
    try:
        detail = json.loads(result.stdout)
    except ValueError:
        raise MachineError(f"the machine measurement printed no JSON: {result.stdout[:200]!r}") from None
    for key in ("read_Bps", "triad_Bps", "peak_flops", "fma_latency_s", "fma_interval_s"):
        if not _positive(detail.get(key)):
            raise MachineError(f"the machine measurement gave {key} = {detail.get(key)!r}")
    detail["run_s"] = round(time.perf_counter() - started, 3)
    # other processes make every number low; the load says whether a --refresh on a quieter machine is worth it
    detail["load_average"] = round(os.getloadavg()[0], 2)
    detail["compile_s"] = round(binary.compile_s, 3)
    return {
        "version": _VERSION,
        "cpu": _cpu_model(),
        "cores": cores,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # the larger effective bandwidth of the two: each test is limited differently (the read test by the
        # loads one core keeps in flight, the triad by writes too), and the roof is what some code reaches
        "bandwidth_Bps": max(detail["read_Bps"], detail["triad_Bps"]),
        "peak_flops": detail["peak_flops"],
        "fma_in_flight": fma_in_flight(detail["fma_latency_s"], detail["fma_interval_s"]),
        # None where the cache has no test of its own (`_cache_chunks`)
        "l2_Bps": detail["l2_Bps"] or None,
        "l3_Bps": detail["l3_Bps"] or None,
        "detail": detail,
    }


def machine_record(refresh: bool = False, cache_dir: Path | None = None) -> dict[str, Any]:
    """This machine's limits with how they were measured: `cpu`, `cores`, `bandwidth_Bps`, `peak_flops`,
    `l2_Bps` and `l3_Bps` (None where not measured),
    `measured` (a timestamp) and `detail` (read and triad bandwidth, their times and bytes, whether the triad
    used streaming stores, the FMA test's vector width and chains). Read from the cache unless `refresh` or
    there is none; else measured (about a second) and cached. Raises MachineError when it cannot measure."""
    path = machine_cache_path(cache_dir)
    if not refresh and (record := _read_record(path)) is not None:
        return record
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(path.parent / "bench.lock"):
        # another process may have measured while this one waited for the lock
        if not refresh and (record := _read_record(path)) is not None:
            return record
        record = _measure(path.parent)
        write_atomically(path, (json.dumps(record, indent=1) + "\n").encode())
    return record


def peak_flops(target: Target, cache_dir: Path | None = None) -> float:
    """The f32 FMA peak, all cores, of code built for a C `target` with its vectors (measured now,
    not cached): what a kernel built for `x86-avx2` can reach on a machine with wider vectors."""
    march = next(flag for flag in target.flags if flag.startswith("-march="))
    directory = machine_cache_path(cache_dir).parent
    directory.mkdir(parents=True, exist_ok=True)
    return float(_measure(directory, target.vector_bytes, march, floats=1 << 16,
                          vector_registers=target.vector_registers, caches=False)["peak_flops"])


def machine_limits(refresh: bool = False, cache_dir: Path | None = None) -> Machine:
    """This machine's limits, measured once and cached in `cache_dir` (default: the build cache directory)."""
    return _machine(machine_record(refresh, cache_dir))


def measured_machine(cache_dir: Path | None = None) -> Machine | None:
    """This machine's limits if they have been measured (`dojo machine`, a benchmark, the language
    server's bounds), else None: for code that must not start a measurement of its own."""
    record = _read_record(machine_cache_path(cache_dir))
    return None if record is None else _machine(record)


def _machine(record: dict[str, Any]) -> Machine:
    cache_Bps = {k: float(record[k]) if _positive(record.get(k)) else None for k in ("l2_Bps", "l3_Bps")}
    return Machine(bandwidth_Bps=float(record["bandwidth_Bps"]), peak_flops=float(record["peak_flops"]),
                   cores=int(record["cores"]), cpu=str(record["cpu"]), fma_in_flight=int(record["fma_in_flight"]),
                   **cache_Bps)


def fma_in_flight(latency_s: float, interval_s: float) -> int:
    """How many independent FMAs a core must have under way to issue one every `interval_s` when
    each takes `latency_s`: its FMA latency times its FMA ports, the fewest accumulators that keep
    the units busy. Rounded: both times come from the same clock, so the ratio is a whole number
    of cycles times a whole number of ports, give or take the timer's noise."""
    return max(1, round(latency_s / interval_s))
