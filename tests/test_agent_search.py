"""The evaluator, the searches and `tune` (agent/), with a fake runner whose time is a pure
function of the program's text: a test double for the search logic, so that no test here
depends on this machine's timing."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest

from agent.evaluate import Evaluator, read_log, text_hash
from agent.tune import KernelTuneOptions, TuneProgress, tune
from bench.sections import archive_log
from dojo_ir import interpret, load, random_inputs, to_text
from dojo_ir.derivation import verify
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments
from runner.result import RunResult

ROOT = Path(__file__).resolve().parent.parent


class FakeRunner:
    """Times are 1-2 ms, a hash of the text; a program containing `fail_marker` fails."""

    def __init__(self, fail_marker: str | None = None, interrupt_at: int | None = None):
        self.calls: list[str] = []
        self.fail_marker = fail_marker
        self.interrupt_at = interrupt_at

    def run(self, program, target="native", repeats=10, warmup=2, spec=None) -> RunResult:
        text = to_text(program)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(text)
        if self.fail_marker is not None and self.fail_marker in text:
            return RunResult.failed(target, "it crashed", repeats)
        median = 1e-3 * (1 + int(hashlib.sha256(text.encode()).hexdigest()[:6], 16) / 0xFFFFFF)
        # fewer lines run faster, so that a search has somewhere to go
        median *= 1 + 0.1 * text.count("\n")
        return RunResult(target, median, median, median, repeats, 0.0, True, 0.0, None, (median,) * repeats)


def _spec(name: str = "softmax", **shape: int):
    return load(KERNELS[name].text(**shape) if shape else KERNELS[name].small())


def _same_meaning(spec, program) -> None:
    inputs = random_inputs(spec, 0)
    expected, actual = interpret(spec, inputs), interpret(program, inputs)
    for name in spec.outputs:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-4, atol=1e-5, equal_nan=True)


SEARCHES = [("random", "edges"), ("random", "heuristic"), ("sa", "edges"), ("sa", "heuristic")]


@pytest.mark.parametrize(("method", "graph"), SEARCHES)
def test_a_search_respects_the_budget_and_returns_a_best_that_replays(method: str, graph: str) -> None:
    spec, runner = _spec(m=4, n=16), FakeRunner()
    result = tune(spec, KernelTuneOptions(method, 12, graph=graph, seed=3, final_min_time_s=0.0),
                  spec_path="spec.dojo", runner=runner)
    assert result.evaluations <= 12
    searched = len(runner.calls) - 4  # the final measurement: the spec and at most 3 finalists
    assert searched <= 13  # evaluation 0 (the spec) and 12 more
    assert verify(result.program, spec) == []
    assert result.program.derivation.spec == "spec.dojo"
    assert list(result.program.derivation.moves) == result.moves
    _same_meaning(spec, result.program)
    assert result.time_s is not None and result.spec_s is not None
    assert result.history[0][0] == 0 and [t for _, t in result.history] == sorted((t for _, t in result.history),
                                                                                 reverse=True)


@pytest.mark.parametrize(("method", "graph"), SEARCHES)
def test_a_search_is_deterministic_for_a_seed(method: str, graph: str) -> None:
    spec = _spec(m=4, n=16)
    tried = []
    for _ in range(2):
        runner = FakeRunner()
        tune(spec, KernelTuneOptions(method, 10, graph=graph, seed=7, final_min_time_s=0.0),
             spec_path="s.dojo", runner=runner)
        tried.append(runner.calls)
    assert tried[0] == tried[1]
    other = FakeRunner()
    tune(spec, KernelTuneOptions(method, 10, graph=graph, seed=8, final_min_time_s=0.0),
         spec_path="s.dojo", runner=other)
    assert other.calls != tried[0] or method == "sa"  # another seed goes elsewhere (usually)


def test_a_log_archived_compressed_reads_the_same_by_either_name(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    evaluator = Evaluator(_spec(m=4, n=16), runner=FakeRunner(), log=log)
    evaluator.evaluate([])
    evaluator.evaluate(["join_scopes(op=m#1, depth=0)"])
    plain = read_log(log)
    packed = archive_log(log)
    assert not log.exists() and packed.name == "log.jsonl.gz"
    assert read_log(log) == read_log(packed) == plain and len(plain[1]) == 2


def test_bench_results_keep_runs_compressed_not_as_raw_logs() -> None:
    tracked = subprocess.run(["git", "ls-files", "-z", "bench/results"], cwd=ROOT, capture_output=True, check=True)
    raw = [ROOT / name for name in tracked.stdout.decode().split("\0") if name.endswith(".jsonl")]
    assert sum(path.stat().st_size for path in raw if path.exists()) <= 2**20


def test_the_evaluator_caches_by_canonical_text_and_failures_cost_infinity(tmp_path: Path) -> None:
    spec = _spec(m=4, n=16)
    runner = FakeRunner(fail_marker=":p")
    evaluator = Evaluator(spec, runner=runner, log=tmp_path / "log.jsonl")
    first = evaluator.evaluate([])
    assert evaluator.evaluate([]) == first and len(runner.calls) == 1
    # two orders of the same two independent moves give one program: one evaluation
    a = ["reuse_dims(buffer=m, dim=0)"]
    fused = ["join_scopes(op=m#1, depth=0)"]
    evaluator.evaluate(fused + a)
    calls = len(runner.calls)
    assert evaluator.evaluate(fused + a) is not None and len(runner.calls) == calls
    assert evaluator.evaluate(["parallelize_scope(op=m#1, depth=0)"]) == float("inf")
    lines = [e.to_json() for e in read_log(tmp_path / "log.jsonl")[1]]
    assert [e["index"] for e in lines] == list(range(len(lines)))
    assert lines[-1]["ok"] is False and lines[-1]["median_s"] is None and lines[-1]["error"]
    assert lines[0]["moves"] == [] and lines[0]["hash"] == text_hash(spec)


@pytest.mark.parametrize("method", ["random", "sa"])
def test_the_log_resumes_without_running_anything_again(tmp_path: Path, method: str) -> None:
    spec, log = _spec(m=4, n=16), tmp_path / "out.dojo.jsonl"
    first = FakeRunner()
    tune(spec, KernelTuneOptions(method, 5, seed=2, final_min_time_s=0.0), spec_path="s.dojo", runner=first, log=log)
    searched = first.calls[:6]  # evaluation 0 and five more; then the final measurement
    assert len(read_log(log)[1]) == 6
    second = FakeRunner()
    result = tune(spec, KernelTuneOptions(method, 10, seed=2, resume=True, final_min_time_s=0.0),
                  spec_path="s.dojo", runner=second, log=log)
    entries = [e.to_json() for e in read_log(log)[1]]
    assert [e["index"] for e in entries] == list(range(len(entries))) and len(entries) <= 11
    assert result.evaluations == len(entries) - 1
    new = second.calls[:len(entries) - 6]
    assert not set(new) & set(searched)  # the first five were not run again
    # and the resumed run is the run that would have been: the same programs, in the same order
    whole = FakeRunner()
    tune(spec, KernelTuneOptions(method, 10, seed=2, final_min_time_s=0.0), spec_path="s.dojo", runner=whole)
    assert whole.calls[:len(entries)] == searched + new


def test_resume_restores_the_best_program(tmp_path: Path) -> None:
    spec, log = _spec(m=4, n=16), tmp_path / "log.jsonl"
    tune(spec, KernelTuneOptions("random", 8, seed=1, final_min_time_s=0.0),
         spec_path="s.dojo", runner=FakeRunner(), log=log)
    evaluator = Evaluator(spec, runner=FakeRunner())
    assert evaluator.resume(log) == 9
    entries = [e.to_json() for e in read_log(log)[1]]
    best = min((e for e in entries if e["ok"]), key=lambda e: e["median_s"])
    assert evaluator.best_cost == best["median_s"] and evaluator.best_moves == tuple(best["moves"])
    assert text_hash(evaluator.best_program) == best["hash"]
    with pytest.raises(ValueError):
        Evaluator(_spec(m=4, n=8), runner=FakeRunner()).resume(log)


def test_should_stop_ends_the_search_early_with_the_best_so_far() -> None:
    spec, runner = _spec(m=4, n=16), FakeRunner()
    seen: list[TuneProgress] = []
    result = tune(spec, KernelTuneOptions("sa", 50, final_min_time_s=0.0),
                  spec_path="s.dojo", runner=runner, on_progress=seen.append, should_stop=lambda: len(seen) >= 4)
    assert result.stopped_early and result.evaluations == 3 and len(runner.calls) == 4
    assert verify(result.program, spec) == []
    assert result.time_s == min(t for _, t in result.history)
    assert seen[-1].evaluations == 3 and seen[-1].budget == 50 and seen[-1].best_s == result.time_s
    assert seen[0].spec_s == seen[0].best_s and seen[0].speedup == 1.0


@pytest.mark.parametrize("method", ["naive", "greedy", "heuristic"])
def test_a_pass_spends_one_evaluation(method: str) -> None:
    spec, runner = _spec(m=4, n=16), FakeRunner()
    result = tune(spec, KernelTuneOptions(method, 100, final_min_time_s=0.0), spec_path="s.dojo", runner=runner)
    assert result.evaluations == 1 and len(runner.calls) <= 4
    assert verify(result.program, spec) == [] and result.moves
    _same_meaning(spec, result.program)


def test_a_derived_start_keeps_its_moves_as_the_prefix() -> None:
    spec = _spec(m=4, n=16)
    prefix = ["join_scopes(op=m#1, depth=0)"]
    result = tune(spec, KernelTuneOptions("random", 5, seed=0, final_min_time_s=0.0),
                  spec_path="s.dojo", runner=FakeRunner(), prefix=prefix)
    assert result.moves[:1] == prefix and verify(result.program, spec) == []


def test_the_final_measurement_picks_the_fastest_finalist() -> None:
    """A program that timed fast once but is slow when measured again loses to the runner-up."""
    spec = _spec(m=4, n=16)
    first = tune(spec, KernelTuneOptions("random", 10, seed=4, final_min_time_s=0.0),
                 spec_path="s.dojo", runner=FakeRunner())
    lucky = to_text(without_comments(first.program))

    class Noisy(FakeRunner):
        def run(self, program, target="native", repeats=10, warmup=2, spec=None) -> RunResult:
            result = super().run(program, target, repeats, warmup, spec)
            if self.calls[-1] == lucky and self.calls.count(lucky) > 1:  # measured again, it is slow
                slow = result.median_s * 10
                return RunResult(target, slow, slow, slow, repeats, 0.0, True, 0.0, None, (slow,) * repeats)
            return result

    second = tune(spec, KernelTuneOptions("random", 10, seed=4, final_min_time_s=0.0),
                  spec_path="s.dojo", runner=Noisy())
    assert to_text(without_comments(second.program)) != lucky
    assert second.time_s is not None and second.time_s > first.time_s
    assert verify(second.program, spec) == []


def test_a_search_walks_the_heuristic_graph_unless_told(tmp_path: Path) -> None:
    spec, log = _spec(m=4, n=16), tmp_path / "log.jsonl"
    untold = tune(spec, KernelTuneOptions("sa", 3, final_min_time_s=0.0),
                  spec_path="s.dojo", runner=FakeRunner(), log=log)
    assert untold.graph == "heuristic" and read_log(log)[0]["graph"] == "heuristic"
    told_log = tmp_path / "told.jsonl"
    told = tune(spec, KernelTuneOptions("sa", 3, graph="edges", final_min_time_s=0.0),
                spec_path="s.dojo", runner=FakeRunner(), log=told_log)
    assert told.graph == "edges"
    # and each walked its graph: the heuristic one starts from the heuristic pass's whole sequence,
    # the edges one goes a move at a time
    from agent.passes import heuristic
    assert tuple(heuristic(spec)) in [e.moves for e in read_log(log)[1]]
    walked = [e.moves for e in read_log(told_log)[1]]
    assert walked[0] == () and all(moves[:-1] in walked[:i + 1] for i, moves in enumerate(walked[1:]))


def test_searches_split_by_divisors_and_powers_of_two_only() -> None:
    """The listing offers splits by 3, 5, 6, 7... with a tail too; a search plays those only by a
    divisor of the scope or by a power of two (agent/legal.py says why)."""
    from agent.legal import legal_moves
    from dojo_ir.moves import find

    spec = load("kernel k(x) -> y\n\nx f32 [24] heap\ny f32 [24] heap\n\n24 y[{0}] = x[{0}] * 2\n")
    listed = {m.arg("factor") for m in find(spec) if m.name == "split_scope"}
    searched = {m.arg("factor") for m in legal_moves(spec) if m.name == "split_scope"}
    assert {5, 7, 16} <= listed
    assert searched == {2, 3, 4, 6, 8, 12, 16}


def test_searches_do_not_stage_for_a_scope_that_only_copies_the_array() -> None:
    """After one staging, the listing offers staging `x` again for its own copy nest, which would
    copy the same elements twice; a search plays stagings for scopes that compute only."""
    from agent.legal import legal_moves
    from dojo_ir.moves import apply, find

    spec = load("kernel k(x, w) -> y\n\nx f32 [8, 16] heap\nw f32 [16] heap\ny f32 [8] heap\n\n"
                "8 y[{0}] = 0\n8 16 y[{0}] += x[{0},{1}] * w[{1}]\n")
    staged = apply(spec, "stage_reads(op=y#2, depth=1, buffer=x)")

    def stagings(moves) -> set[str]:
        return {str(m) for m in moves if m.name == "stage_reads"}

    copy_nest = {m for m in stagings(find(staged)) if "op=x_s" in m}
    assert copy_nest and not copy_nest & stagings(legal_moves(staged))
    assert stagings(legal_moves(staged)) == stagings(find(staged)) - copy_nest
    assert stagings(legal_moves(staged))  # the computing scope's stagings are still searched


@pytest.mark.parametrize(("method", "budget", "error"), [("magic", 5, "unknown method `magic`; expected one of"),
                                                        ("sa", -1, "the budget must be at least 0, not -1")])
def test_options_refuse_an_unknown_method_or_a_negative_budget(method: str, budget: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        KernelTuneOptions(method, budget)
