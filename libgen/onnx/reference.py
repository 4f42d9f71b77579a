"""ONNX Runtime's time for the nodes of each kernel, from its own profile of runs taken in turn with
the library's (`dojo model profile --against-onnxruntime`).

    session = profiled_session(runner)
    report = profile_model(runner, feeds, repeats, beside=run_in_turn(session, feeds))
    reference = onnxruntime_reference(report, runner, session, repeats)
    print(format_profile(report, reference))   # the ONNX Runtime and ORT / ours columns

ONNX Runtime profiles every node it runs (`SessionOptions.enable_profiling`), after its own graph
optimisations: one node it runs may stand for several of the model's (a Conv with the
BatchNormalization and Relu after it), named after one of them or after the value it writes with a
suffix of the optimiser's (`r145_nchwc`). Each is credited (`credit`) to the model's node of that
name, else to the node that writes the value its name starts with (the longest such start, cut at
an underscore), and through that node to the kernel or ONNX Runtime part of the library's run that
computes it. The nodes ONNX Runtime adds (layout reorders), any it names otherwise and those of
nodes that the library's run folds into constants are `unmatched`. A node's time is its median over
the timed runs, as a kernel's is; ONNX Runtime runs once after each of the library's runs, so the
machine's other work weighs on both alike.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.affinity import cores, on_cpus

from .profile import ModelProfile
from .run import ModelRunner

_KERNEL_TIME = "_kernel_time"


@dataclass(frozen=True)
class Reference:
    """ONNX Runtime's seconds for what each kernel and each ONNX Runtime part of a profile computes
    (parts in the profile's order), for the nodes it credits to none of them, and in all."""

    kernels: Mapping[str, float]
    parts: tuple[float, ...]
    unmatched: tuple[str, ...]
    unmatched_s: float
    total_s: float

    def to_json(self) -> dict[str, Any]:
        return {"kernels": dict(self.kernels), "parts": list(self.parts), "unmatched": list(self.unmatched),
                "unmatched_s": self.unmatched_s, "total_s": self.total_s}


def onnxruntime_session(model: str | bytes, profile: bool = False) -> Any:
    """An ONNX Runtime session of `model` (a path, or the serialised model) with its default graph
    optimisations and one intra-op thread a core, its threads on every core (though a library's
    OpenMP may have pinned this thread to one); with `profile`, profiling its nodes."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = cores()
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="dojo-ort-profile-")) / "ort")
    with on_cpus():
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def profiled_session(runner: ModelRunner) -> Any:
    """A session of the runner's model (at its input shapes) that profiles its nodes."""
    return onnxruntime_session(runner.onnx_model.SerializeToString(), profile=True)


# ONNX Runtime's idle threads spin for a while after a run, and an OpenMP runtime's after a parallel
# loop: each would take cores from the other's next run (ResNet-50's kernels read 94 ms, against
# 33-37 ms alone in the same half hour). A pause on either side of ONNX Runtime's run lets them stop.
SETTLE_S = 0.05


def run_in_turn(session: Any, feeds: Mapping[str, Any]) -> Callable[[], None]:
    """A run of `session` on `feeds` between two pauses, to take in turn with the library's runs."""
    def run() -> None:
        time.sleep(SETTLE_S)
        session.run(None, dict(feeds))
        time.sleep(SETTLE_S)
    return run


def node_medians(events: Iterable[Mapping[str, Any]], runs: int) -> dict[str, float]:
    """Each profiled node's median seconds over its last `runs` runs (the earlier ones warm up)."""
    durations: dict[str, list[float]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith(_KERNEL_TIME):
            durations.setdefault(name[:-len(_KERNEL_TIME)], []).append(event["dur"] * 1e-6)
    return {name: statistics.median(times[-runs:]) for name, times in durations.items()}


def writers(nodes: Sequence[str], outputs: Sequence[Sequence[str]]) -> dict[str, str]:
    """Each value the model's `nodes` write (`outputs`, node by node), to the node writing it."""
    return {value: node for node, values in zip(nodes, outputs, strict=True) for value in values}


def credit(name: str, nodes: Collection[str], writer: Mapping[str, str]) -> str | None:
    """The model's node (of `nodes`; `writer` from `writers`) that ONNX Runtime's node `name`
    stands for, or None."""
    if name in nodes:
        return name
    start = name
    while "_" in start:
        start = start.rsplit("_", 1)[0]
        if start in nodes:
            return start
        if start in writer:
            return writer[start]
    return None


def onnxruntime_reference(report: ModelProfile, runner: ModelRunner, session: Any, runs: int) -> Reference:
    """The session's profile, ended here, credited to `report`'s kernels and parts."""
    path = Path(session.end_profiling())
    try:
        medians = node_medians(json.loads(path.read_text()), runs)
    finally:
        path.unlink(missing_ok=True)
    nodes = set(runner.node_names)
    writer = writers(runner.node_names, [list(node.output) for node in runner.onnx_model.graph.node])
    computed = {node for row in (*report.kernels, *report.onnxruntime) for node in row.nodes}
    by_node: dict[str, float] = {}
    unmatched: dict[str, float] = {}
    for name, seconds in medians.items():
        node = credit(name, nodes, writer)
        if node in computed:
            by_node[node] = by_node.get(node, 0.0) + seconds
        else:  # a node of its own, or one that the library's run folds to a constant
            unmatched[name] = seconds

    def of(computed: Sequence[str]) -> float:
        return sum(by_node.get(node, 0.0) for node in dict.fromkeys(computed))

    return Reference({k.kernel: of(k.nodes) for k in report.kernels}, tuple(of(p.nodes) for p in report.onnxruntime),
                     tuple(sorted(unmatched)), sum(unmatched.values()), sum(medians.values()))
