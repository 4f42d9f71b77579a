"""The roofline: exact work counts of library kernels, the bound, and the measured, cached machine limits."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import runner.roofline as roofline
from codegen.targets import Caches, host_caches
from dojo_ir import load
from dojo_ir.library import KERNELS
from runner.roofline import (
    Machine,
    Work,
    bound_s,
    fma_in_flight,
    machine_cache_path,
    machine_limits,
    machine_record,
    measured_machine,
    warm_bound_s,
    work,
)

ROOT = Path(__file__).resolve().parent.parent


def kernel(name: str, **shape: int):
    return load(KERNELS[name].text(**shape))


# -- work ----------------------------------------------------------------------------


def test_add_reads_two_arrays_writes_one_and_adds_once_per_element() -> None:
    m, n = KERNELS["add"].small_params.values()
    assert work(kernel("add", m=m, n=n)) == Work(bytes=3 * m * n * 4, flops=m * n)


def test_matmul_counts_a_multiply_and_an_add_per_step_and_no_flop_for_the_zero() -> None:
    m, k, n = 3, 4, 5
    # c = 0 is a store, c += a * b one multiplication and one addition (the combine) per (i, j, k)
    assert work(kernel("matmul", m=m, k=k, n=n)) == Work(bytes=4 * (m * k + k * n + m * n), flops=2 * m * n * k)


def test_bmm_and_conv_scale_with_every_scope() -> None:
    b, m, k, n = 2, 3, 4, 5
    assert work(kernel("bmm", b=b, m=m, k=k, n=n)) == Work(4 * b * (m * k + k * n + m * n), 2 * b * m * n * k)
    s = KERNELS["conv1"].small_params
    oh, ow = s["h"] - s["k"] + 1, s["w"] - s["k"] + 1
    x, w, y = s["n"] * s["ci"] * s["h"] * s["w"], s["co"] * s["ci"] * s["k"] ** 2, s["n"] * s["co"] * oh * ow
    assert work(kernel("conv1", **s)) == Work(4 * (x + w + y), 2 * y * s["ci"] * s["k"] ** 2)


def test_softmax_counts_exp_and_leaves_temporaries_in_cache() -> None:
    m, n = 3, 5
    # max= 1, exp(x - m) 2, s += 1, e / s 1 per element; `-inf` and `0` are constants; m, e, s are temporaries
    assert work(kernel("softmax", m=m, n=n)) == Work(bytes=2 * m * n * 4, flops=5 * m * n)


def test_relu_counts_max_as_one_call() -> None:
    m, n = 4, 6
    assert work(kernel("relu", m=m, n=n)) == Work(bytes=2 * m * n * 4, flops=m * n)


def test_layernorm_counts_every_operator() -> None:
    m, n = 3, 5
    # mean += (1/elt), mean / n (1/row), var += (x-mean)*(x-mean) (4/elt), var / n (1/row),
    # y = (x - mean) / sqrt(var + 1e-5) * g + b (6/elt)
    flops = m * n * (1 + 4 + 6) + m * 2
    assert work(kernel("layernorm1", m=m, n=n)) == Work(bytes=4 * (m * n + 2 * n + m * n), flops=flops)


def test_swiglu_counts_unary_minus() -> None:
    s = {"b": 2, "t": 3, "d": 4, "h": 5}
    rows, out = s["b"] * s["t"], s["b"] * s["t"] * s["h"]
    # two products of d each (2 flops per step), then a / (1 + exp(-a)) * c: -, exp, +, /, * per element
    flops = 2 * 2 * out * s["d"] + 5 * out
    moved = 4 * (rows * s["d"] + 2 * s["d"] * s["h"] + out)
    assert work(kernel("swiglu", **s)) == Work(moved, flops)


def test_the_bytes_follow_the_dtype_and_the_flops_a_schedule_does_not_change() -> None:
    text = """kernel k(x) -> y

x f64 [6, 4] heap
y f64 [6] heap

6 y[{0}] = 0
6 4 y[{0}] += x[{0},{1}] * 2
"""
    tiled = text.replace("6 y[{0}] = 0\n6 4", "6 y[{0}] = 0\n3 2 4").replace("y[{0}] +=", "y[{0}*2+{1}] +=")
    tiled = tiled.replace("x[{0},{1}]", "x[{0}*2+{1},{2}]")
    assert work(load(text)) == work(load(tiled)) == Work(bytes=8 * (6 * 4 + 6), flops=2 * 6 * 4)


def test_every_library_kernel_has_work() -> None:
    for entry in KERNELS.values():
        w = work(load(entry.small()))
        assert w.bytes > 0 and w.flops > 0, entry.name


# -- bound_s -------------------------------------------------------------------------


def test_bound_picks_the_slower_side() -> None:
    machine = Machine(bandwidth_Bps=10e9, peak_flops=100e9, cores=2, cpu="test")
    assert bound_s(Work(bytes=10**9, flops=10**9), machine) == pytest.approx(0.1)  # memory-bound
    assert bound_s(Work(bytes=10**6, flops=10**11), machine) == pytest.approx(1.0)  # compute-bound
    assert bound_s(Work(bytes=0, flops=0), machine) == 0.0


def test_a_warm_bound_reads_the_bytes_from_the_nearest_level_that_holds_them() -> None:
    machine = Machine(bandwidth_Bps=10e9, peak_flops=100e9, cores=2, cpu="test", l2_Bps=200e9, l3_Bps=50e9)
    caches = Caches(l1d=32 << 10, l2=1 << 20, l3=32 << 20)
    for size, bound in [(48 << 10, 1e-9), (1 << 20, (1 << 20) / 200e9), (16 << 20, (16 << 20) / 50e9),
                        (64 << 20, (64 << 20) / 10e9)]:
        work = Work(bytes=size, flops=100)  # the flops take 1 ns
        assert warm_bound_s(work, machine, caches) == pytest.approx(bound)
        assert warm_bound_s(work, machine, caches) <= bound_s(work, machine)
    unmeasured = Machine(bandwidth_Bps=10e9, peak_flops=100e9, cores=2, cpu="test")
    assert warm_bound_s(Work(bytes=1 << 20, flops=0), unmeasured, caches) == bound_s(Work(1 << 20, 0), unmeasured)


# -- machine_limits ------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory in which the limits were measured once, for real."""
    directory = tmp_path_factory.mktemp("cache")
    machine_limits(cache_dir=directory)
    return directory


def test_the_limits_are_positive_and_finite(measured: Path) -> None:
    machine = machine_limits(cache_dir=measured)
    for value in (machine.bandwidth_Bps, machine.peak_flops):
        assert math.isfinite(value) and value > 0
    assert machine.cores == os.cpu_count()
    assert machine.cpu
    detail = machine_record(cache_dir=measured)["detail"]
    assert machine.bandwidth_Bps == max(detail["read_Bps"], detail["triad_Bps"])
    assert detail["threads"] == machine.cores


def test_the_fma_probe_measures_latency_and_interval(measured: Path) -> None:
    """One dependent FMA takes longer than the interval between independent ones, and the peak's
    chains outnumber the FMAs a core must have in flight (else the peak is a latency bound)."""
    machine, detail = machine_limits(cache_dir=measured), machine_record(cache_dir=measured)["detail"]
    assert detail["fma_latency_s"] > detail["fma_interval_s"] > 0
    assert machine.fma_in_flight == fma_in_flight(detail["fma_latency_s"], detail["fma_interval_s"])
    assert 2 <= machine.fma_in_flight < detail["chains"]


def test_the_caches_read_faster_than_memory(measured: Path) -> None:
    """Each core's chunk of the level-2 test fits its level 2 and that of the last-level test its share
    of the last level, and what they deliver is the machine's, not a constant. Level 2 reads faster
    than memory; the last level need not: on an Intel Xeon (family 6 model 207) whose last level is
    shared over a mesh with other machines' cores, a core's reads from it ran at 29.5 GB/s against
    the memory's 35.4 GB/s triad in one run, and at 46 against 47 in another."""
    machine, detail = machine_limits(cache_dir=measured), machine_record(cache_dir=measured)["detail"]
    caches = host_caches()
    assert detail["l2_chunk_bytes"] <= caches.l2 // 2 and machine.l2_Bps == detail["l2_Bps"] > machine.bandwidth_Bps
    if detail["l3_chunk_bytes"]:  # measured where the last level has room beyond level 2
        assert 2 * caches.l2 <= detail["l3_chunk_bytes"] <= caches.l3 // machine.cores // 2
        assert machine.l3_Bps == detail["l3_Bps"] > 0
    else:
        assert machine.l3_Bps is None


def test_measured_machine_reads_the_record_and_never_measures(measured: Path, tmp_path: Path) -> None:
    assert measured_machine(measured) == machine_limits(cache_dir=measured)
    assert measured_machine(tmp_path) is None
    assert not any(tmp_path.iterdir())  # nothing built, nothing cached


def test_fma_in_flight_is_latency_times_ports() -> None:
    # 4 cycles of latency and two ports at 1 GHz: a new FMA every half cycle, 8 under way
    assert fma_in_flight(4e-9, 0.5e-9) == 8
    assert fma_in_flight(4.1e-9, 0.51e-9) == 8  # a noisy reading rounds to the whole number
    assert fma_in_flight(1e-9, 2e-9) == 1  # never fewer than one


def test_the_second_call_reads_the_cache(measured: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = machine_cache_path(measured)
    assert path.parent == measured and path.is_file()
    before = path.stat().st_mtime_ns, machine_limits(cache_dir=measured)

    def measure(directory: Path) -> dict:
        raise AssertionError("measured again although the cache holds the limits")

    monkeypatch.setattr(roofline, "_measure", measure)
    assert (path.stat().st_mtime_ns, machine_limits(cache_dir=measured)) == before


def test_refresh_measures_again_and_a_bad_cache_file_is_replaced(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []

    def measure(directory: Path) -> dict:
        runs.append(directory)
        return {"version": roofline._VERSION, "cpu": roofline._cpu_model(), "cores": roofline._cores(),
                "bandwidth_Bps": 1e10 * len(runs), "peak_flops": 1e11, "fma_in_flight": 8, "detail": {}}

    monkeypatch.setattr(roofline, "_measure", measure)
    assert machine_limits(cache_dir=tmp_path).bandwidth_Bps == 1e10
    assert machine_limits(cache_dir=tmp_path).bandwidth_Bps == 1e10
    assert machine_limits(refresh=True, cache_dir=tmp_path).bandwidth_Bps == 2e10
    machine_cache_path(tmp_path).write_text("{not json")
    assert machine_limits(cache_dir=tmp_path).bandwidth_Bps == 3e10
    assert runs == [tmp_path] * 3


def test_the_cli_prints_the_limits(measured: Path) -> None:
    environment = os.environ | {"DOJO_CACHE": str(measured)}
    result = subprocess.run([sys.executable, "-m", "server.cli", "machine"], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    machine = machine_limits(cache_dir=measured)
    pattern = (r"bandwidth (\d+\.\d) GB/s \(read \d+\.\d, triad \d+\.\d\), L2 (\d+) GB/s, (?:L3 \d+ GB/s, )?"
               rf"peak (\d+) GFLOP/s f32 FMA, (\d+) cores?, {re.escape(machine.cpu)}\n")
    match = re.fullmatch(pattern, result.stdout)
    assert match, result.stdout
    assert float(match[1]) == pytest.approx(machine.bandwidth_Bps / 1e9, abs=0.05)
    assert int(match[2]) == round(machine.l2_Bps / 1e9)
    assert int(match[4]) == machine.cores

    result = subprocess.run([sys.executable, "-m", "server.cli", "machine", "--json"], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["peak_flops"] == machine.peak_flops
