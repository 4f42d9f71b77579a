"""Times taken in rounds, every contestant once a round in turn, compared round by round: a shared
host's load comes and goes within seconds, and weighs alike on what runs in the same round."""

from __future__ import annotations

import math
import statistics


def round_medians(times: dict[str, list[float]], repeats: int) -> dict[str, list[float]]:
    """Each run's median in each round, from its times in order, `repeats` a round."""
    return {k: [statistics.median(v[r:r + repeats]) for r in range(0, len(v), repeats)] for k, v in times.items()}


def paired(per_round: dict[str, list[float]], over: str, under: str) -> float:
    """The median over the rounds of run `over`'s time over run `under`'s in the same round."""
    return statistics.median(o / u for o, u in zip(per_round[over], per_round[under], strict=True))


def geometric_mean(values: list[float]) -> float:
    """The geometric mean of positive `values`: the mean of ratios, whichever way up they are taken."""
    return math.exp(statistics.fmean(math.log(v) for v in values))
