"""The benchmarks compare contestants round by round: a ratio is the median over the rounds of the
ratio within each round, so that a slow moment of the host weighs on both sides of it alike."""

from __future__ import annotations

import pytest

from bench.matrix_products import best_peer_over, median_time
from bench.pairing import geometric_mean, paired, round_medians


def test_each_rounds_median_comes_from_its_own_calls() -> None:
    times = {"a": [1.0, 3.0, 2.0, 10.0, 12.0, 11.0], "b": [2.0, 2.0, 2.0, 20.0, 20.0, 20.0]}
    assert round_medians(times, 3) == {"a": [2.0, 11.0], "b": [2.0, 20.0]}


def test_a_paired_ratio_ignores_a_round_that_was_slow_for_everyone() -> None:
    assert paired({"peer": [1.0, 1.0, 3.0], "ours": [1.0, 1.0, 3.0]}, "peer", "ours") == 1.0
    assert paired({"peer": [1.0, 1.0, 3.0], "ours": [2.0, 2.0, 6.0]}, "peer", "ours") == 0.5  # ours twice as slow


def test_the_geometric_mean_weighs_a_ratio_and_its_inverse_alike() -> None:
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert geometric_mean([1.0, 4.0, 16.0]) == pytest.approx(4.0)


def test_the_fastest_peer_is_taken_round_by_round() -> None:
    row = {"rounds": {"numpy": [2.0, 2.0, 2.0], "torch": [1.0, 3.0, 1.0], "native": [1.0, 2.0, 2.0]},
           "failures": {"onnxruntime": "timeout"}}
    # fastest peer each round: 1, 2, 1; over ours: 1, 1, 0.5
    assert best_peer_over(row, "native", ["numpy", "torch", "onnxruntime"]) == pytest.approx(1.0)
    assert median_time(row, "native") == 2.0
    assert best_peer_over(row, "x86-avx2", ["numpy", "torch"]) is None  # never ran
    assert median_time(row, "onnxruntime") is None
