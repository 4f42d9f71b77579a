"""The training curve: one record per episode, as JSON lines and as a plot.

    {"episode": 12, "kernel": "softmax", "steps": 8, "ended": "agent", "epsilon": 0.52,
     "start_s": 0.0031, "best_s": 0.0012, "best_speedup": 2.58, "final_speedup": 2.1,
     "loss": 0.031, "updates": 96, "transitions": 412, "wall_s": 4.2}

`best_speedup` is the start's time over the best time met in the episode, `final_speedup` over
the time of the program it ended on (None when that failed), `loss` the mean of the episode's
gradient steps (None before the first). Both files are written whole each time, atomically.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.files import write_atomically

_WINDOW = 20  # episodes in the plot's running mean


def write_jsonl(records: Sequence[dict[str, Any]], path: Path) -> None:
    write_atomically(path, "".join(json.dumps(r) + "\n" for r in records).encode())


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value with the up to `window - 1` before it."""
    means, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        means.append(total / min(i + 1, window))
    return means


def plot(records: Sequence[dict[str, Any]], path: Path) -> None:
    """The best speed-up of each episode with its running mean, and the loss, as a PNG. Drawn on
    an Agg canvas of its own, so that it neither needs a display nor touches pyplot's state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6), tight_layout=True)
    FigureCanvasAgg(figure)
    speed, loss = figure.subplots(2, 1, sharex=True)
    episodes = [r["episode"] for r in records]
    speedups = [r["best_speedup"] or 0.0 for r in records]
    speed.plot(episodes, speedups, ".", alpha=0.4, label="best of the episode")
    speed.plot(episodes, running_mean(speedups, _WINDOW), "-", label=f"mean of the last {_WINDOW}")
    speed.set_ylabel("speed-up over the spec")
    speed.legend(loc="upper left")
    learned = [(r["episode"], r["loss"]) for r in records if r.get("loss")]
    if learned:
        loss.plot(*zip(*learned, strict=True), "-")
        loss.set_yscale("log")
    loss.set_ylabel("loss (mean of the episode)")
    loss.set_xlabel("episode")
    data = io.BytesIO()
    figure.savefig(data, format="png", dpi=100)
    write_atomically(path, data.getvalue())

