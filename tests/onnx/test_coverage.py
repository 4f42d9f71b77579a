"""The catalogue accounts for every operator of the default ONNX domain exactly once."""

from __future__ import annotations

import pytest

from libgen.onnx.catalogue import FOLDED, NOT_EXPRESSIBLE, coverage, default_domain, kernel_for
from libgen.onnx.nodes import FEATURES, Node, Unsupported, Value
from libgen.onnx.registry import OPERATORS


def test_every_default_domain_operator_is_in_exactly_one_set():
    report = coverage()
    operators, deprecated = default_domain()
    sets = [set(report.covered), set(report.not_written), {op for op, _, _ in report.not_expressible}]
    for op in operators:
        assert sum(op in s for s in sets) == 1, op
    assert set().union(*sets) == set(operators)
    assert report.total == len(operators) and not set(deprecated) & set(operators)


def test_not_expressible_names_real_operators_with_known_features():
    operators, _ = default_domain()
    for op, (feature, why) in NOT_EXPRESSIBLE.items():
        assert op in operators, op
        assert feature in FEATURES and feature not in ("not written", "dynamic shape"), op
        assert why and "\n" not in why
    assert not set(NOT_EXPRESSIBLE) & (set(OPERATORS) | set(FOLDED))


def test_the_figures_add_up():
    report = coverage()
    assert report.expressible == len(report.covered) + len(report.not_written)
    assert report.percent == pytest.approx(100 * len(report.covered) / report.expressible)
    assert set(report.folded) == set(FOLDED)
    assert {"Relu", "Add", "Pow", "Cast"} <= set(report.covered)


@pytest.mark.parametrize(("op", "feature"), [("Sin", "function"), ("Gather", "indirection"), ("TopK",
                         "data-dependent range"), ("LSTM", "dependent iteration"), ("Where", "control flow"),
                         ("RandomNormal", "random"), ("SequenceAt", "not a tensor"), ("IsNaN", "dtype")])
def test_kernel_for_refuses_a_not_expressible_operator_with_its_feature(op, feature):
    x = Value("x", "f32", (3, 5))
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("n", op, (x,), (Value("y", "f32", (3, 5)),)))
    assert caught.value.feature == feature == NOT_EXPRESSIBLE[op][0]
    assert caught.value.detail == NOT_EXPRESSIBLE[op][1]


def test_an_unwritten_operator_says_so():
    x = Value("x", "f32", (3, 5))
    with pytest.raises(Unsupported) as caught:
        kernel_for(Node("n", "NoSuchOp", (x,), (x,)))
    assert caught.value.feature == "not written" and "NoSuchOp" in caught.value.detail
