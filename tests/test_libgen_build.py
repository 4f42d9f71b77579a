"""`dojo library build`: what is skipped and what resumes after an interruption, the records and
the errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.evaluate import read_log, text_hash
from dojo_ir import load
from dojo_ir.library import KERNELS
from libgen import BuildEvent, BuildOptions, KernelTuneOptions, LibraryError, build_library, resolve

ROOT = Path(__file__).resolve().parent.parent
NAIVE = KernelTuneOptions("naive", 1)


def dojo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def _log(path: Path) -> list[dict]:
    return [e.to_json() for e in read_log(path)[1]]


def test_an_interrupted_build_keeps_finished_kernels_and_resumes_the_half_finished_search(tmp_path: Path) -> None:
    kernels = resolve(["softmax", "matmul"], base="small")
    matmul_log = tmp_path / "logs" / "matmul.sa.heuristic.jsonl"
    options = BuildOptions(KernelTuneOptions("sa", 8, final_min_time_s=0.01), name="lg_resume")

    def interrupted() -> bool:  # like Ctrl-C once the second kernel has three evaluations logged
        return matmul_log.exists() and len(_log(matmul_log)) >= 3

    with pytest.raises(KeyboardInterrupt):
        build_library(kernels, tmp_path, options, should_stop=interrupted)
    assert (tmp_path / "kernels" / "softmax.json").exists()
    assert not (tmp_path / "kernels" / "matmul.json").exists()  # not finished: no record
    assert not (tmp_path / "manifest.json").exists()
    softmax_record = (tmp_path / "kernels" / "softmax.json").read_bytes()
    softmax_log = (tmp_path / "logs" / "softmax.sa.heuristic.jsonl").read_bytes()
    before = _log(matmul_log)
    assert len(before) >= 3

    events: list[BuildEvent] = []
    result = build_library(kernels, tmp_path, options, on_event=events.append)
    kinds = {(e.kernel, e.kind) for e in events}
    assert ("softmax", "skipped") in kinds and ("softmax", "tuning") not in kinds
    assert ("matmul", "resuming") in kinds
    assert result.skipped == ("softmax",) and result.tuned == ("matmul",)
    assert (tmp_path / "kernels" / "softmax.json").read_bytes() == softmax_record
    assert (tmp_path / "logs" / "softmax.sa.heuristic.jsonl").read_bytes() == softmax_log
    after = _log(matmul_log)
    assert after[:len(before)] == before  # the finished evaluations were kept, not redone
    assert [e["index"] for e in after] == list(range(len(after))) and len(after) <= options.tuning.budget + 1
    assert len({e["hash"] for e in after}) == len(after)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    matmul = next(k for k in manifest["kernels"] if k["name"] == "matmul")
    assert matmul["evaluations"] == len(after) - 1 and matmul["spec_hash"] == text_hash(kernels[1].program)


def test_a_ctrl_c_that_the_os_hands_to_the_tuning_thread_stops_the_search_it_interrupts(tmp_path: Path) -> None:
    """The kernel may deliver SIGINT to any thread; Python's handler runs in the main thread, which
    waits on the tuning one. The build must stop the search under way, not finish it first."""
    kernels = resolve(["softmax", "matmul"], base="small")
    matmul_log = tmp_path / "logs" / "matmul.sa.heuristic.jsonl"
    budget = 60

    def interrupt_the_tuning_thread() -> None:
        while not (matmul_log.exists() and len(_log(matmul_log)) >= 2):
            time.sleep(0.01)
        tuning = next(t for t in threading.enumerate() if t.name.startswith("dojo-library"))
        signal.pthread_kill(tuning.ident, signal.SIGINT)

    threading.Thread(target=interrupt_the_tuning_thread, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        build_library(kernels, tmp_path, BuildOptions(KernelTuneOptions("sa", budget, final_min_time_s=0.01),
                                                      name="lg_thread_interrupt"))
    assert (tmp_path / "kernels" / "softmax.json").exists()
    assert not (tmp_path / "kernels" / "matmul.json").exists()
    assert len(_log(matmul_log)) < budget


def test_another_shape_or_budget_is_tuned_again(tmp_path: Path) -> None:
    options = BuildOptions(KernelTuneOptions("random", 2, final_min_time_s=0.01), name="lg_again")
    build_library(resolve(["softmax"], ["m=3"], base="small"), tmp_path, options)
    log = tmp_path / "logs" / "softmax.random.heuristic.jsonl"
    first = _log(log)
    events: list[BuildEvent] = []
    build_library(resolve(["softmax"], ["m=3"], base="small"), tmp_path,
                  replace(options, tuning=replace(options.tuning, budget=4)), on_event=events.append)
    assert [e.kind for e in events if e.kernel == "softmax"][0] == "resuming"  # a larger budget extends the search
    assert _log(log)[:len(first)] == first and len(_log(log)) > len(first)
    events.clear()
    build_library(resolve(["softmax"], ["softmax.m=4"], base="small"), tmp_path, options, on_event=events.append)
    assert [e.kind for e in events if e.kernel == "softmax"][0] == "tuning"  # another spec: its log starts afresh
    record = json.loads((tmp_path / "kernels" / "softmax.json").read_text())
    assert record["spec_hash"] == text_hash(load(KERNELS["softmax"].generate(m=4, n=5)))
    assert _log(log)[0]["hash"] != first[0]["hash"]


def test_a_pass_record_is_kept_while_the_pass_plays_it_and_rebuilt_once_the_pass_changes(tmp_path: Path) -> None:
    options = BuildOptions(KernelTuneOptions("heuristic", 1, final_min_time_s=0.01), name="lg_pass")
    kernels = resolve(["softmax"], base="small")
    build_library(kernels, tmp_path, options)
    events: list[BuildEvent] = []
    build_library(kernels, tmp_path, options, on_event=events.append)
    assert [e.kind for e in events if e.kernel == "softmax"][0] == "skipped"

    record_path = tmp_path / "kernels" / "softmax.json"
    record = json.loads(record_path.read_text())
    played = record["moves"]
    assert played, "the heuristic pass plays moves on softmax"
    # as an older PerfDojo's pass would have recorded it: one move fewer
    record_path.write_text(json.dumps({**record, "moves": played[:-1]}))
    events.clear()
    build_library(kernels, tmp_path, options, on_event=events.append)
    assert "skipped" not in [e.kind for e in events if e.kernel == "softmax"]
    assert json.loads(record_path.read_text())["moves"] == played


def test_the_command_line_stops_on_ctrl_c_and_goes_on_when_run_again(tmp_path: Path) -> None:
    out = tmp_path / "lib"
    command = [sys.executable, "-m", "server.cli", "library", "build", "softmax", "matmul", "--small", "--method",
               "sa", "--budget", "40", "--min-time", "0", "--out", str(out), "--name", "lg_cli"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = out / "kernels" / "softmax.json"
    deadline = time.monotonic() + 300
    while not record.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "the same command goes on from there" in stderr
    assert record.exists() and not (out / "manifest.json").exists()

    done = dojo(*command[3:], "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["skipped"] == ["softmax"] and summary["tuned"] == ["matmul"]
    assert "softmax: already tuned" in done.stderr and "matmul: resuming from" in done.stderr
    assert (out / "liblg_cli.so").exists() and [k["name"] for k in summary["kernels"]] == ["softmax", "matmul"]
    replayed = dojo("replay", str(out / "kernels" / "softmax.dojo"), str(out / "kernels" / "matmul.dojo"))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_a_file_and_a_derived_file_are_kernels_named_after_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "rows.dojo"
    spec.write_text(KERNELS["softmax"].small())
    derived = tmp_path / "fused.dojo"
    assert dojo("apply", str(spec), "join_scopes(op=m#1, depth=0)", "--record", "-o", str(derived)).returncode == 0
    result = build_library(resolve([str(spec), str(derived)]), tmp_path / "lib",
                           BuildOptions(KernelTuneOptions("naive", 1, final_min_time_s=0.01), name="lg_files"))
    rows, fused = result.manifest["kernels"]
    assert rows["name"] == "rows" and fused["name"] == "fused"
    assert fused["moves"][0] == "join_scopes(op=m#1, depth=0)"  # a derived file keeps its moves
    assert rows["spec_hash"] == fused["spec_hash"] == text_hash(load(spec.read_text()))


def test_a_directory_is_its_kernels_without_the_specs_its_derived_files_name(tmp_path: Path) -> None:
    """An import's directory, or a library's kernels/: every .dojo file in name order, but
    `rows.spec.dojo`, which `fused.dojo` names as its spec, is not a kernel of its own."""
    (tmp_path / "rows.spec.dojo").write_text(KERNELS["softmax"].small())
    (tmp_path / "relu.dojo").write_text(KERNELS["relu"].small())
    derived = tmp_path / "fused.dojo"
    assert dojo("apply", str(tmp_path / "rows.spec.dojo"), "join_scopes(op=m#1, depth=0)", "--record", "-o",
                str(derived)).returncode == 0
    kernels = resolve([str(tmp_path)])
    assert [k.name for k in kernels] == ["fused", "relu"]
    assert kernels[0].prefix == ("join_scopes(op=m#1, depth=0)",)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LibraryError, match="empty: no .dojo files to build"):
        resolve([str(tmp_path / "empty")])


@pytest.mark.parametrize(("names", "shapes", "message"), [
    (["nope"], [], "no kernel `nope`: neither a library kernel"),
    (["softmax"], ["q=3"], "no library kernel named here has a shape parameter `q`"),
    (["softmax"], ["matmul.k=3"], "`matmul` is not a library kernel named here"),
    (["softmax"], ["m=x"], "--shape takes PARAM=SIZE or KERNEL.PARAM=SIZE"),
    (["softmax"], ["m=0"], "shape parameter m must be a positive integer"),
    ([], [], "name at least one kernel"),
])
def test_bad_kernels_or_shapes_are_refused(names: list[str], shapes: list[str], message: str) -> None:
    with pytest.raises(LibraryError, match=message):
        resolve(names, shapes)


def test_bad_files_and_names_are_refused_with_positions(tmp_path: Path) -> None:
    bad = tmp_path / "bad.dojo"
    bad.write_text("kernel bad(x) -> y\n\nx f32 [4] heap\ny f32 [4] heap\n\n4 y[{1}] = x[{0}]\n")
    with pytest.raises(LibraryError, match=r"bad\.dojo:6:\d+: error: "):
        resolve([str(bad)])
    dashed = tmp_path / "my-kernel.dojo"
    dashed.write_text(KERNELS["relu"].small())
    with pytest.raises(LibraryError, match="`my-kernel` cannot name a library function"):
        resolve([str(dashed)])
    same = tmp_path / "softmax.dojo"
    same.write_text(KERNELS["softmax"].small())
    with pytest.raises(LibraryError, match="two kernels would be named `softmax`"):
        resolve(["softmax", str(same)])
    with pytest.raises(LibraryError, match="library's name `my-lib`"):
        build_library(resolve(["relu"], base="small"), tmp_path, BuildOptions(NAIVE, name="my-lib"))
    with pytest.raises(LibraryError, match="a library is C: target cuda"):
        build_library(resolve(["relu"], base="small"), tmp_path, BuildOptions(replace(NAIVE, target="cuda")))
    long = tmp_path / f"{'k' * 240}.dojo"
    long.write_text(KERNELS["relu"].small())
    with pytest.raises(LibraryError, match="of at most 100 characters"):
        resolve([str(long)])


@pytest.mark.parametrize(("name", "clash"), [
    ("stdio", "a system header's name"), ("math", "a system header's name"), ("c", "a system library's name"),
    ("m", "a system library's name"), ("numpy", "a Python module's name"), ("json", "a Python module's name"),
    ("int", "a C keyword"), ("NULL", "a C keyword"), ("x" * 300, "of at most 100 characters"),
])
def test_a_library_name_that_would_stand_for_a_system_one_is_refused(name: str, clash: str, tmp_path: Path) -> None:
    with pytest.raises(LibraryError, match=clash):
        build_library(resolve(["relu"], base="small"), tmp_path, BuildOptions(NAIVE, name=name))
    assert not any(tmp_path.iterdir())


def test_the_command_line_reports_errors_as_people_read_them(tmp_path: Path) -> None:
    done = dojo("library", "build", "nope", "--method", "sa", "--out", str(tmp_path))
    assert done.returncode == 1 and done.stderr.startswith("dojo library build: error: no kernel `nope`")
    bad = tmp_path / "k.dojo"
    bad.write_text("kernel k(x) -> y\n")
    done = dojo("library", "build", str(bad), "--method", "sa", "--out", str(tmp_path))
    assert done.returncode == 1 and done.stderr.startswith(f"{bad}:1:")
    done = dojo("library", "build", "relu", "--method", "sa", "--out", str(tmp_path), "--ray", "local", "--runner",
                "http://localhost:1")
    assert done.returncode == 1 and "--ray and --runner exclude each other" in done.stderr


def test_peers_are_timed_on_request_and_recorded(tmp_path: Path) -> None:
    options = BuildOptions(KernelTuneOptions("naive", 1, final_min_time_s=0.01), name="lg_peers", peers=["numpy"])
    result = build_library(resolve(["softmax"], base="small"), tmp_path, options)
    (softmax,) = result.manifest["kernels"]
    assert set(softmax["peers"]) == {"numpy"} and softmax["peers"]["numpy"] > 0
    record = json.loads((tmp_path / "kernels" / "softmax.json").read_text())
    assert record["peers"] == softmax["peers"]
