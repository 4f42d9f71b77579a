"""The catalogue accounts for every operator of the default ONNX domain exactly once, and
docs/onnx.md says what it accounts."""

from __future__ import annotations

import pytest

from libgen.onnx.catalogue import FOLDED, NOT_EXPRESSIBLE, Coverage, coverage, default_domain, kernel_for
from libgen.onnx.coverage_doc import COMMAND, DOC, begin_marker, end_marker, regenerate
from libgen.onnx.coverage_doc import main as coverage_doc_main
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


def test_docs_onnx_md_states_the_coverage_that_the_catalogue_computes():
    written = DOC.read_text(encoding="utf-8")
    assert written == regenerate(written, coverage()), f"docs/onnx.md is stale: run `{COMMAND}`"
    assert coverage().summary() in written  # the totals `dojo import --coverage` ends with


def test_regenerating_rewrites_only_the_parts_between_the_markers(tmp_path):
    report = Coverage(covered=("Add", "Relu"), folded=(), not_written=("Trilu",),
                      not_expressible=(("Sin", "function", "needs sin"), ("Cos", "function", "needs sin"),
                                       ("Gather", "indirection", "indexes")), deprecated=("Scatter",))
    stale = "\n".join(["# Ops", "hand text", begin_marker("totals"), "1 of 9 covered", end_marker("totals"),
                       "more hand text", begin_marker("not-expressible"), end_marker("not-expressible"), "tail", ""])
    fresh = regenerate(stale, report)
    assert fresh.split("\n")[:3] == ["# Ops", "hand text", begin_marker("totals")]
    assert "1 of 9" not in fresh and report.summary() in fresh
    assert "Covered: `Add`, `Relu`.\n\nNot written yet: `Trilu`.\n" + end_marker("totals") + "\nmore hand text" in fresh
    assert ("| function | Cos, Sin | needs sin |\n| indirection | Gather | indexes |\n"
            + end_marker("not-expressible") + "\ntail\n") in fresh
    assert regenerate(fresh, report) == fresh
    doc = tmp_path / "onnx.md"
    doc.write_text(stale, encoding="utf-8")
    assert coverage_doc_main([str(doc), "--check"]) == 1 and doc.read_text(encoding="utf-8") == stale
    assert coverage_doc_main([str(doc)]) == 0 and coverage_doc_main([str(doc), "--check"]) == 0


def test_a_doc_without_its_markers_is_refused_naming_the_part(tmp_path, capsys):
    with pytest.raises(ValueError, match="`not-expressible`"):
        regenerate(f"{begin_marker('totals')}\n{end_marker('totals')}\n", coverage())
    doc = tmp_path / "onnx.md"
    doc.write_text(f"{end_marker('totals')}\n{begin_marker('totals')}\n", encoding="utf-8")
    assert coverage_doc_main([str(doc)]) == 1
    assert capsys.readouterr().err.startswith(f"{doc}: error: the generated part `totals` needs")
