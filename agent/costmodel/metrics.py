"""How well scores rank a group's programs, as TenSet (Zheng et al., NeurIPS 2021) measures it.

- pairwise accuracy: of the pairs of programs whose times differ, the share the scores order as
  the times do;
- top-k recall: whether the truly fastest program is among the k the scores put first.

Each is computed per group and averaged over groups, as TenSet reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def pairwise_accuracy(scores: np.ndarray, times: np.ndarray) -> float:
    """Of the pairs whose times differ, the share whose scores are in the same order (a tie in scores
    counts half)."""
    dt = np.sign(times[:, None] - times[None, :])
    ds = np.sign(scores[:, None] - scores[None, :])
    differ = dt != 0
    if not differ.any():
        return float("nan")
    return float(((dt == ds) + 0.5 * (ds == 0))[differ].mean())


def top_k_recall(scores: np.ndarray, times: np.ndarray, k: int) -> float:
    """1 if the fastest program is among the `k` best scored, else 0."""
    return float(int(np.argmin(times)) in np.argsort(scores, kind="stable")[:k])


@dataclass(frozen=True)
class Ranking:
    """Means over groups: pairwise accuracy, top-1 and top-5 recall; and how many groups."""

    pairwise: float
    top1: float
    top5: float
    groups: int


def ranking(scored: list[tuple[np.ndarray, np.ndarray]]) -> Ranking:
    """The mean figures over groups given as (scores, times)."""
    pairs = [pairwise_accuracy(s, t) for s, t in scored]
    return Ranking(float(np.nanmean(pairs)) if pairs else float("nan"),
                   float(np.mean([top_k_recall(s, t, 1) for s, t in scored])) if scored else float("nan"),
                   float(np.mean([top_k_recall(s, t, 5) for s, t in scored])) if scored else float("nan"),
                   len(scored))
