"""Tuning a library on a local Ray instance with 2 worker processes, one of them killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from agent.evaluate import read_log  # noqa: E402
from libgen import BuildOptions, KernelTuneOptions, build_library, resolve  # noqa: E402
from libgen.cluster import Cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ["softmax", "layernorm1", "matmul", "swiglu"]
BUDGET = 10
TASK_TITLE = "ray::evaluate_on_node"  # what Ray calls a worker process while it runs our task


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    # the workers inherit a build cache of their own, so that every evaluation compiles: the compiler's
    # processes live long enough to be seen on their CPUs
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DOJO_CACHE", str(tmp_path_factory.mktemp("cache")))
        with Cluster("local", cpus=2) as started:
            yield started


def _watch_cpus(seen: list[dict[int, frozenset[int]]], stop: threading.Event) -> None:
    """Sample, while the build runs, the CPUs that each evaluating worker's children (the compiler,
    the timed binary) may run on, by worker."""
    while not stop.is_set():
        sample = {}
        for process in psutil.process_iter(["pid", "cmdline"]):
            if " ".join(process.info["cmdline"] or []).startswith(TASK_TITLE):
                try:
                    for child in process.children(recursive=True):
                        if cpus := child.cpu_affinity():  # none for a child that is exiting
                            sample.setdefault(process.info["pid"], set()).update(cpus)
                except psutil.Error:
                    continue
        if sample:
            seen.append({pid: frozenset(cpus) for pid, cpus in sample.items()})
        time.sleep(0.01)


def _kill_one_evaluating_worker(killed: list[int], stop: threading.Event) -> None:
    """Kill, once, a worker process in the middle of an evaluation."""
    while not stop.is_set() and not killed:
        for process in psutil.process_iter(["pid", "cmdline"]):
            if " ".join(process.info["cmdline"] or []).startswith(TASK_TITLE):
                os.kill(process.info["pid"], signal.SIGKILL)
                killed.append(process.info["pid"])
                return
        time.sleep(0.02)


def test_the_command_line_tunes_on_a_local_ray_instance(tmp_path: Path) -> None:
    # before the module's own instance starts: this one is the command's
    done = subprocess.run([sys.executable, "-m", "server.cli", "library", "build", "relu", "add", "--small",
                           "--method", "random", "--budget", "3", "--min-time", "0", "--out", str(tmp_path),
                           "--name", "lg_ray_cli", "--ray", "local", "--workers", "2", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["tuned"] == ["relu", "add"] and (tmp_path / "liblg_ray_cli.so").exists()


def test_a_worker_killed_mid_search_loses_no_evaluation_and_its_work_is_retried(cluster: Cluster,
                                                                                 tmp_path: Path) -> None:
    assert cluster.slots == 2
    killed: list[int] = []
    stop = threading.Event()
    # the evaluations before the kill are done; let a few finish first
    log = tmp_path / "logs" / "softmax.sa.heuristic.jsonl"

    def killer() -> None:
        while not stop.is_set() and not (log.exists() and len(read_log(log)[1]) >= 3):
            time.sleep(0.02)
        _kill_one_evaluating_worker(killed, stop)

    seen: list[dict[int, frozenset[int]]] = []
    threads = [threading.Thread(target=killer, daemon=True),
               threading.Thread(target=_watch_cpus, args=(seen, stop), daemon=True)]
    for thread in threads:
        thread.start()
    try:
        options = BuildOptions(KernelTuneOptions("sa", BUDGET, final_min_time_s=0.01), name="lg_ray", workers=2)
        result = build_library(resolve(KERNELS, base="small"), tmp_path, options, cluster=cluster)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert len(killed) == 1 and not psutil.pid_exists(killed[0])
    # each evaluation compiled and timed on one CPU of its own, never on another's
    assert seen and all(len(cpus) == 1 for sample in seen for cpus in sample.values())
    together = [sample for sample in seen if len(sample) == 2]
    assert together and all(len(set(sample.values())) == 2 for sample in together)
    assert result.tuned == tuple(KERNELS)
    for name in KERNELS:
        entries = [e.to_json() for e in read_log(tmp_path / "logs" / f"{name}.sa.heuristic.jsonl")[1]]
        assert [e["index"] for e in entries] == list(range(len(entries)))
        # the evaluation whose worker died was run again elsewhere: no evaluation failed
        assert all(e["ok"] for e in entries), [e["error"] for e in entries if not e["ok"]]
        assert len(entries) == BUDGET + 1
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert all(k["time_s"] and k["time_s"] > 0 for k in manifest["kernels"])
    assert (tmp_path / "liblg_ray.so").exists()


def test_a_kernel_survives_a_build_stopped_on_the_cluster_and_resumes_locally(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    """The logs the cluster's evaluations went to are the same as a local build's: a build stopped
    on the cluster goes on without it."""
    kernels = resolve(["softmax", "matmul"], base="small")
    matmul_log = tmp_path / "logs" / "matmul.random.heuristic.jsonl"

    def stopped() -> bool:
        return matmul_log.exists() and len(read_log(matmul_log)[1]) >= 2

    options = BuildOptions(KernelTuneOptions("random", 6, final_min_time_s=0.01), name="lg_ray2")
    with pytest.raises(KeyboardInterrupt):
        build_library(kernels, tmp_path, replace(options, workers=1), cluster=cluster, should_stop=stopped)
    before = matmul_log.read_text().splitlines()
    result = build_library(kernels, tmp_path, options)
    after = matmul_log.read_text().splitlines()
    assert after[:len(before)] == before and "matmul" in result.tuned
