"""runner/affinity.py: a run uses the CPUs the process was given, or those a caller assigned on
purpose, whatever an OpenMP runtime did to the calling thread's affinity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runner.affinity import CPUS, assigned, cores, on_cpus

ROOT = Path(__file__).resolve().parent.parent
TWO_CPUS = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")

CHILD_CPUS = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]


def child_cpus() -> list[int]:
    return json.loads(subprocess.run(CHILD_CPUS, capture_output=True, text=True, check=True).stdout)


@TWO_CPUS
def test_a_thread_narrowed_to_one_cpu_still_starts_its_runs_on_every_cpu() -> None:
    def narrowed() -> None:
        os.sched_setaffinity(0, {min(CPUS)})  # what OMP_PROC_BIND does to a thread that loads OpenMP
        seen["before"] = child_cpus()
        seen["assigned"] = sorted(assigned())
        with on_cpus():
            seen["inside"] = child_cpus()
        seen["after"] = sorted(os.sched_getaffinity(0))

    seen: dict[str, list[int]] = {}
    thread = threading.Thread(target=narrowed)
    thread.start()
    thread.join()
    assert seen["before"] == seen["after"] == [min(CPUS)]
    assert seen["assigned"] == seen["inside"] == sorted(CPUS)


@TWO_CPUS
def test_cpus_assigned_on_purpose_are_what_runs_use_and_are_given_back() -> None:
    one = {max(CPUS)}
    with on_cpus(one) as cpus:
        assert cpus == assigned() == one and cores() == 1
        assert child_cpus() == sorted(one)
        with on_cpus():  # a nested start keeps to the assignment
            assert child_cpus() == sorted(one)
    assert assigned() == CPUS and set(child_cpus()) == set(os.sched_getaffinity(0))


@TWO_CPUS
def test_the_runner_times_on_every_cpu_from_a_thread_narrowed_to_one(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from codegen.targets import get_target
    from dojo_ir import load
    from dojo_ir.library import KERNELS
    from runner import local

    spawned: list[tuple[str, set[int]]] = []
    popen = subprocess.Popen

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if "OMP_NUM_THREADS" in (kwargs.get("env") or {}):  # a timed or reference run, not the compiler
            spawned.append((kwargs["env"]["OMP_NUM_THREADS"], os.sched_getaffinity(0)))
        return popen(*args, **kwargs)

    monkeypatch.setattr(local.subprocess, "Popen", recording)
    results = []

    def narrowed() -> None:
        os.sched_setaffinity(0, {min(CPUS)})
        results.append(local.LocalRunner(tmp_path).run(load(KERNELS["relu"].small()), repeats=2, warmup=0))

    thread = threading.Thread(target=narrowed)
    thread.start()
    thread.join()
    assert results and results[0].error is None
    threads = str(min(len(CPUS), get_target("native").cores))
    assert spawned and all(count == threads and cpus == set(CPUS) for count, cpus in spawned)


@TWO_CPUS
def test_pytorch_loaded_under_omp_proc_bind_leaves_the_runner_every_cpu() -> None:
    script = ("import os, runner.affinity as a; import torch; from runner.local import openmp_environment; "
              "from codegen.targets import get_target; import json; "
              "print(json.dumps([sorted(os.sched_getaffinity(0)), "
              "openmp_environment(get_target('native'), a.assigned())['OMP_NUM_THREADS']]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    pinned, threads = json.loads(done.stdout)
    assert len(pinned) == 1  # PyTorch's OpenMP pinned the thread, as it does
    assert int(threads) == min(len(CPUS), os.cpu_count() or 1)  # the runner's binaries still get every core
