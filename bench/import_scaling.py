"""`dojo import` on chains of 2,000 to 20,000 elementwise nodes: the import's time per node must
not grow with the model (issue bar: 20,000 nodes in at most 20x the time of 2,000). Medians of 3
runs each; writes bench/results/import_scaling.md."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sections import machine, write_section  # noqa: E402
from libgen.onnx.importer import import_model  # noqa: E402

SIZES = (2_000, 5_000, 10_000, 20_000)
OPERATORS = ("Relu", "Neg", "Abs", "Exp", "Sigmoid")


def chain(length: int) -> onnx.ModelProto:
    """`length` unary nodes one after the other, named like an exporter's, on a 4 x 8 tensor."""
    nodes, previous = [], "x"
    for i in range(length):
        nodes.append(helper.make_node(OPERATORS[i % len(OPERATORS)], [previous], [f"v{i}"], name=f"/layer{i}/op"))
        previous = f"v{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [4, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def seconds(model: onnx.ModelProto, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        import_model(model)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    measured = {size: seconds(chain(size)) for size in SIZES}
    base = measured[SIZES[0]]
    rows = [f"| {size:,} | {time_s:.2f} s | {1e6 * time_s / size:.0f} us | {time_s / base:.1f}x |"
            for size, time_s in measured.items()]
    write_section(Path(__file__).parent / "results" / "import_scaling.md", "\n".join([
        "# `dojo import` against the model's size", "",
        f"`python bench/import_scaling.py` on {machine()}. Chains of unary elementwise nodes; the median of 3 "
        "imports each.", "",
        "| nodes | import | per node | over 2,000 nodes |", "|---|---|---|---|", *rows, ""]))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
