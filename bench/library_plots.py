"""The library benchmark's plots (bench/library.py): PerfDojo's speed-up over each peer (Figure 1b/14 style)
and best time against evaluations from tuning logs (Figure 13 style)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import geometric_mean
from typing import Any

from agent.evaluate import log_text


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_speedups(rows: list[dict[str, Any]], peers: list[str], out: Path) -> list[Path]:
    """One bar chart per peer: PerfDojo's speedup over it per kernel, log scale, 1x marked (Figure 1b/14); named after
    the results file `out` (library.md: library_speedup_<peer>.png), beside it."""
    directory, stem = out.parent, out.stem
    plt = _pyplot()
    written = []
    for peer in peers:
        kernels, speedups = [], []
        for row in rows:
            t, dojo = row["times"].get(peer), row["times"].get("PerfDojo")
            if t and dojo:
                kernels.append(row["kernel"])
                speedups.append(t / dojo)
        if not kernels:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(kernels) + 2), 3.6))
        colors = ["tab:green" if s >= 1 else "tab:red" for s in speedups]
        ax.bar(range(len(kernels)), [s - 1 for s in speedups], bottom=1, color=colors)  # from 1x up or down
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(kernels)), kernels, rotation=45, ha="right")
        g = geometric_mean(speedups)
        ax.set_title(f"PerfDojo speedup over {peer} (geomean {g:.2f}x)")
        ax.set_ylabel("speedup")
        for i, s in enumerate(speedups):
            ax.text(i, s, f"{s:.2g}", ha="center", va="bottom" if s >= 1 else "top", fontsize=7)
        fig.tight_layout()
        path = directory / f"{stem}_speedup_{peer.replace('.', '_')}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    # all peers in one chart, one bar per peer and kernel (Figure 14)
    kernels = [row["kernel"] for row in rows if row["times"].get("PerfDojo")]
    if kernels:
        fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(kernels) + 2), 4))
        width = 0.8 / len(peers)
        for j, peer in enumerate(peers):
            xs, ys = [], []
            for i, row in enumerate(r for r in rows if r["times"].get("PerfDojo")):
                if row["times"].get(peer):
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(row["times"][peer] / row["times"]["PerfDojo"])
            label = f"{peer} (geomean {geometric_mean(ys):.2f}x)" if ys else peer
            ax.bar(xs, [y - 1 for y in ys], width=width, bottom=1, label=label)
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(kernels)), kernels, rotation=45, ha="right")
        ax.set_ylabel("PerfDojo speedup (peer time / PerfDojo time)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = directory / f"{stem}_speedup.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.insert(0, path)
    return written


def best_so_far(path: Path) -> tuple[list[int], list[float]]:
    """The best-so-far curve of a JSONL tuning log: each line an evaluation with an index (`evaluation`,
    `index`, `eval`, `step` or `i`; else its line number) and `median_s` (null or missing: a failed one)."""
    points = []
    for number, line in enumerate(log_text(path).splitlines()):
        if not line.strip():
            continue
        record = json.loads(line)
        index = next((record[k] for k in ("evaluation", "index", "eval", "step", "i") if k in record), number)
        points.append((int(index), record.get("median_s")))
    points.sort(key=lambda p: p[0])
    xs, ys, best = [], [], math.inf
    for index, median in points:
        if median is not None and median > 0:
            best = min(best, float(median))
        if math.isfinite(best):
            xs.append(index)
            ys.append(best)
    return xs, ys


def plot_convergence(logs: dict[str, Path], path: Path, bound: float | None = None,
                     title: str = "Convergence") -> Path:
    """Best time against evaluations, one line per tuning run (method / graph) (Figure 13 style)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for label, log in logs.items():
        xs, ys = best_so_far(log)
        if xs:
            ax.step(xs, ys, where="post", label=label)
    if bound:
        ax.axhline(bound, color="black", linestyle=":", label="roofline bound")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best time (s)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
