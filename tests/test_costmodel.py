"""agent/costmodel: the features describe the loop structure against the machine's limits, the
ranking loss learns an order, a model survives its file, the dataset rebuilds exactly the programs a
log timed, and a program's moves are rated by the model."""

from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.costmodel.data import Group, read_group, read_groups
from agent.costmodel.features import (
    NAMES,
    OP_NAMES,
    REORDER_WINDOW,
    SHARED_NAMES,
    SLOTS,
    WIDTH,
    Host,
    features,
    op_rows,
)
from agent.costmodel.metrics import pairwise_accuracy, ranking, top_k_recall
from agent.costmodel.model import SHIPPED, CostModel, CostModelError, Training
from agent.costmodel.rank import rate_moves
from agent.evaluate import text_hash
from agent.legal import legal_moves
from dojo_ir import Program, load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply
from dojo_ir.tree import walk_ops
from runner.roofline import work

HOST = Host(peak_flops=4e11, bandwidth_Bps=2e10, cores=2, vector_bytes=64, l1d=48 << 10, l2=2 << 20, l3=32 << 20,
            l2_Bps=4e11, l3_Bps=2e11)
SOFTMAX = load(KERNELS["softmax"].quick())


def at(x: np.ndarray, name: str) -> float:
    """A program's entry, or the largest of an operation's entry over its operations (`op.NAME`)."""
    if name.startswith("op."):
        rows = op_rows(x)
        return float(rows[rows[:, 0] > 0.5, OP_NAMES.index(name[3:])].max())
    return float(x[NAMES.index(name)])


def op_row(x: np.ndarray, slot: int, name: str) -> float:
    """An operation's entry: that of the operation in `slot` (by predicted time, most first)."""
    return float(op_rows(x)[slot, OP_NAMES.index(name)])


def played(program, *moves: str):
    for move in moves:
        program = apply(program, move)
    return program


# -- features ---------------------------------------------------------------------------------


def test_features_have_a_fixed_width_whatever_the_program_and_are_finite() -> None:
    for name in ("softmax", "matmul", "conv2", "relu"):
        x = features(load(KERNELS[name].quick()), HOST)
        assert x.shape == (WIDTH,) == (len(NAMES),) and x.dtype == np.float32 and np.isfinite(x).all()


def test_a_program_and_its_reprint_have_the_same_features() -> None:
    program = played(SOFTMAX, "parallelize_scope(op=e, depth=0)", "vectorize_scope(op=e, depth=1)")
    assert np.array_equal(features(program, HOST, ["a"]), features(load(to_text(program)), HOST, ["a"]))


def test_the_compulsory_work_read_is_the_rooflines_for_programs_that_share_operations() -> None:
    # the flops come from each operation's part, kept from one program to the next one move away
    flops_time, bytes_time = NAMES.index("program.flops_time"), NAMES.index("program.bytes_time")
    for spec in (SOFTMAX, load(KERNELS["matmul"].quick())):
        for program in [spec, *(apply(spec, move) for move in legal_moves(spec))]:
            needed, x = work(program), features(program, HOST)
            assert x[flops_time] == np.float32(math.log2(needed.flops / HOST.peak_flops * 1e9) / 30)
            assert x[bytes_time] == np.float32(math.log2(needed.bytes / HOST.bandwidth_Bps * 1e9) / 30)


def test_parallelizing_a_scope_shows_in_the_parallel_features() -> None:
    before = features(SOFTMAX, HOST)
    after = features(played(SOFTMAX, "parallelize_scope(op=e, depth=0)"), HOST)
    assert at(before, "program.share_parallel") == 0 < at(after, "program.share_parallel")
    assert at(before, "program.parallel_regions") == 0 < at(after, "program.parallel_regions")
    assert at(after, "program.compute_s") < at(before, "program.compute_s")  # two cores' peak instead of one's
    # e's nest is 2 deep: its outer scope is level 1 counted from the innermost
    assert at(after, "op.level1.parallel") > at(before, "op.level1.parallel") == 0


def test_vector_lanes_are_read_against_the_targets_vector_width() -> None:
    program = played(SOFTMAX, "split_scope(op=e, depth=1, factor=16)", "vectorize_scope(op=e, depth=2)")
    wide, narrow = features(program, HOST), features(program, replace(HOST, vector_bytes=32))
    assert at(wide, "op.level0.vector") > 0
    # 16 f32 lanes fill a 64-byte vector exactly, and are two 32-byte vectors
    assert at(narrow, "op.level0.lanes_vs_width") > at(wide, "op.level0.lanes_vs_width")


def test_footprints_are_read_against_the_machines_caches_and_tasks_against_its_cores() -> None:
    program = played(SOFTMAX, "parallelize_scope(op=e, depth=0)")
    small, big = features(program, HOST), features(program, replace(HOST, l1d=HOST.l1d * 4, cores=8))
    assert at(big, "op.level0.footprint_vs_l1") < at(small, "op.level0.footprint_vs_l1")
    assert at(big, "op.level1.tasks_per_core") < at(small, "op.level1.tasks_per_core")
    assert at(big, "op.level0.footprint_vs_l2") == at(small, "op.level0.footprint_vs_l2")


MATMUL = load(KERNELS["matmul"].quick())
ROWS = "swap_scopes(op=c#2, depth=1)"  # c[i, j] += a[i, k] * b[k, j] in order i, k, j: j runs along rows


def test_an_inner_reduction_waits_on_its_accumulator_and_loops_along_rows_are_vector_code() -> None:
    """What gcc makes of the C without a vector scope (-fopt-info-vec says so): in the spec's order
    it vectorises j around the inner reduction over k, but each lane's FMA waits for its last (no
    -ffast-math to reorder them), and a chain of 128 is longer than a core's reorder window
    overlaps: the latency times the FMAs a core needs under way. Along rows (i, k, j) nothing
    waits. With i inside j, c's column is not contiguous: no lanes either."""
    spec, rows = features(MATMUL, HOST), features(played(MATMUL, ROWS), HOST)
    columns = features(played(MATMUL, "swap_scopes(op=c#2, depth=0)"), HOST)
    product = 0  # the slot of most time: c's reduction, before its zeroing
    assert [op_row(x, product, "log_chain_wait") for x in (spec, rows, columns)] == [1, 0, 1]  # log2(8) / 3
    assert [op_row(x, product, "log_compiler_lanes") for x in (spec, rows, columns)] == [1, 1, 0]  # log2(16) / 4
    seconds = {name: 2.0 ** (40 * at(x, "program.compute_s")) for name, x in
               (("spec", spec), ("rows", rows), ("columns", columns))}
    assert seconds["spec"] / seconds["rows"] == pytest.approx(HOST.fma_in_flight, rel=1e-3)
    assert seconds["columns"] / seconds["rows"] == pytest.approx(HOST.fma_in_flight * 16, rel=1e-3)
    assert at(features(MATMUL, replace(HOST, fma_in_flight=4)), "program.compute_s") < at(spec, "program.compute_s")
    exp = op_rows(features(SOFTMAX, HOST))  # no vector math library: a call (exp, max) stays scalar
    calls = [row for row in exp if row[0] and row[OP_NAMES.index("log_flops_per_iteration")] > 0.25]
    assert calls and all(row[OP_NAMES.index("log_compiler_lanes")] < 1 for row in calls)


def test_short_chains_of_a_small_window_overlap_in_the_reorder_window() -> None:
    """A convolution's 3x3 window is a chain of nine FMAs an output: the core runs the next outputs'
    chains while one waits, so they cost nothing beyond their issue rate; a 5x5's overlap with
    fewer, a 9x9's with none."""
    def conv(window: int) -> Program:
        return load(f"""kernel conv(x, w) -> y
x f32 [{63 + window}, {63 + window}] heap
w f32 [{window}, {window}] heap
y f32 [64, 64] heap

64 64 y[{{0}},{{1}}] = 0
64 64 {window} {window} y[{{0}},{{1}}] += x[{{0}}+{{2}},{{1}}+{{3}}] * w[{{2}},{{3}}]
""")
    waits = [2 ** (3 * op_row(features(conv(k), HOST), 0, "log_chain_wait")) for k in (3, 5, 9)]
    # 9, 25 and 81 iterations of 4 instructions a chain, against a window of REORDER_WINDOW
    assert waits == pytest.approx([1, HOST.fma_in_flight / (REORDER_WINDOW / 100), HOST.fma_in_flight], rel=1e-5)


def test_traffic_between_the_cache_levels_is_timed_at_their_bandwidths() -> None:
    """The roofline of the loop structure counts what a loop order moves between levels. When a
    column of b does not fit level 1, the spec's order fetches a line of b for each FMA from level
    2; along rows, each row of c streams b through level 1 once."""
    small = replace(HOST, l1d=4 << 10)
    spec, rows = features(MATMUL, small), features(played(MATMUL, ROWS), small)
    assert at(spec, "program.traffic_l1_s") - at(rows, "program.traffic_l1_s") > math.log2(8) / 40
    assert at(rows, "program.bound_s") < at(spec, "program.bound_s")
    slower = features(MATMUL, replace(small, l2_Bps=small.l2_Bps / 4))
    assert at(slower, "program.traffic_l1_s") == pytest.approx(at(spec, "program.traffic_l1_s") + 2 / 40)
    assert at(slower, "program.traffic_l2_s") == at(spec, "program.traffic_l2_s")


def test_splitting_a_scope_leaves_the_traffic_of_the_loop_order() -> None:
    """A split runs the same iterations in the same order, so it moves the same lines: what one
    iteration of a scope touches is still held at the next."""
    rows = played(MATMUL, ROWS)
    for depth, factor in ((0, 8), (1, 16), (2, 16)):
        split = played(rows, f"split_scope(op=c#2, depth={depth}, factor={factor})")
        for level in ("traffic_l1_s", "traffic_l2_s", "memory_s"):
            assert at(features(split, HOST), f"program.{level}") == pytest.approx(
                at(features(rows, HOST), f"program.{level}"), abs=1e-3), (depth, level)


def test_the_moves_are_read_as_counts_and_the_last_kinds_in_order() -> None:
    moves = ["split_scope(op=e, depth=1, factor=16)", "vectorize_scope(op=e, depth=2)"]
    x = features(played(SOFTMAX, *moves), HOST, moves)
    assert at(x, "moves.count.split_scope") > 0 and at(x, "moves.count.vectorize_scope") > 0
    assert at(x, "moves.last0.vectorize_scope") == 1 and at(x, "moves.last1.split_scope") == 1
    assert at(x, "moves.last0.split_scope") == 0 and at(features(SOFTMAX, HOST), "program.log_moves") == 0


def test_a_function_call_costs_its_nest_the_operations_of_its_evaluation() -> None:
    """A roofline counts exp as one flop, but scalar, it keeps the FMA pipes as long as a dozen
    multiply-adds: softmax's exp nest is bound by its arithmetic, not its traffic, until it is
    vectorised, which divides that time by the vector's lanes."""
    def exp_row(program: Program) -> np.ndarray:
        rows = op_rows(features(program, HOST))
        return next(r for r in rows if r[0] and r[OP_NAMES.index("log_flops_per_iteration")] > 0.5)

    scalar, vector = exp_row(SOFTMAX), exp_row(played(SOFTMAX, "vectorize_scope(op=e, depth=1)"))
    compute, memory = OP_NAMES.index("compute_s"), OP_NAMES.index("memory_s")
    assert scalar[OP_NAMES.index("log_flops_per_iteration")] == pytest.approx(math.log2(1 + 1 + 18) / 5)
    assert scalar[compute] > scalar[memory] and scalar[OP_NAMES.index("bound_s")] == scalar[compute]
    assert 2.0 ** (40 * (scalar[compute] - vector[compute])) == pytest.approx(HOST.vector_bytes / 4, rel=1e-3)


def test_each_operation_has_its_row_and_a_long_program_keeps_those_of_most_time() -> None:
    rows = op_rows(features(SOFTMAX, HOST))
    assert rows.shape == (SLOTS, len(OP_NAMES)) and rows[:, 0].sum() == 6  # softmax's six operations
    assert rows[:, OP_NAMES.index("work_share")].sum() == pytest.approx(1.0, rel=1e-5)
    bound = OP_NAMES.index("bound_s")
    assert list(rows[:6, bound]) == sorted(rows[:6, bound], reverse=True) and not rows[6:].any()
    long = load(KERNELS["swiglu"].quick())
    x = features(long, HOST)
    assert op_rows(x)[:, 0].sum() == min(SLOTS, sum(1 for _ in walk_ops(long.body)))


def test_features_take_milliseconds() -> None:
    program = load(KERNELS["swiglu"].quick())
    features(program, HOST)
    started = time.perf_counter()
    for _ in range(20):
        features(program, HOST)
    assert (time.perf_counter() - started) / 20 < 0.01


# -- the metrics and the model ----------------------------------------------------------------


def test_tensets_metrics() -> None:
    times = np.array([3.0, 1.0, 2.0, 4.0])
    assert pairwise_accuracy(times, times) == 1.0 and pairwise_accuracy(-times, times) == 0.0
    assert top_k_recall(np.array([0.0, 1.0, 2.0, 3.0]), times, 1) == 0.0
    assert top_k_recall(np.array([0.0, 1.0, 2.0, 3.0]), times, 2) == 1.0
    assert ranking([(times, times), (-times, times)]).pairwise == 0.5


def synthetic(seed: int, groups: int) -> list[Group]:
    """Groups of one-operation programs whose log times are a fixed function of two of the operation's
    entries, plus noise: what a model must learn to order, and to order in groups it never saw."""
    rng = np.random.default_rng(seed)
    made = []
    for g in range(groups):
        x = np.zeros((40, WIDTH), np.float32)
        op = len(SHARED_NAMES)
        x[:, op] = 1.0  # present
        x[:, op + 1:op + 17] = rng.normal(0, 1, (40, 16))  # the others constant, as most are within one spec
        log_t = 1.5 * x[:, op + 3] - x[:, op + 7] + 0.5 * np.maximum(x[:, op + 11], 0) + rng.normal(0, 0.05, 40)
        made.append(Group(f"synthetic{g}", f"spec{g}", "k", "native", "", ((),) * 40, x, np.exp(log_t - 10)))
    return made


def test_a_programs_score_sums_its_operations_predicted_times() -> None:
    """The score is the log of the sum of exp(each operation's output): a program of two operations
    scores log(exp(a) + exp(b)), a and b the scores of each alone with the same program entries."""
    model = CostModel.train(synthetic(0, 4), Training(steps=20))
    one = synthetic(5, 1)[0].features[:2]
    both = one[:1].copy()
    slot = len(SHARED_NAMES) + len(OP_NAMES)
    both[0, slot:slot + len(OP_NAMES)] = one[1, len(SHARED_NAMES):slot]
    a, b = model.score_features(one)
    assert model.score_features(both)[0] == pytest.approx(np.logaddexp(a, b), abs=1e-4)


def test_the_ranking_loss_learns_an_order_that_holds_on_groups_it_never_saw() -> None:
    model = CostModel.train(synthetic(0, 20), Training(steps=300))
    held_out = ranking([(model.score_features(g.features), g.times_s) for g in synthetic(1, 10)])
    assert held_out.pairwise > 0.9 and held_out.top5 >= 0.8
    # score differences read as log time ratios
    g = synthetic(2, 1)[0]
    s = model.score_features(g.features)
    assert np.corrcoef(s, np.log(g.times_s))[0, 1] > 0.9


def test_a_model_survives_its_file_and_a_file_that_is_not_one_is_named(tmp_path: Path) -> None:
    model = CostModel.train(synthetic(0, 4), Training(steps=20))
    model.save(tmp_path / "m.npz")
    again = CostModel.load(tmp_path / "m.npz")
    x = synthetic(3, 1)[0].features
    assert np.allclose(model.score_features(x), again.score_features(x)) and again.info == model.info
    (tmp_path / "bad.npz").write_bytes(b"not a model")
    with pytest.raises(CostModelError, match="bad.npz is not a cost model"):
        CostModel.load(tmp_path / "bad.npz")


def test_a_model_for_other_features_is_refused(tmp_path: Path) -> None:
    model = CostModel.train(synthetic(0, 2), Training(steps=5))
    model.save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as saved:
        arrays = dict(saved)
    meta = json.loads(str(arrays.pop("meta")))
    meta["features"] = meta["features"][:-1]
    np.savez(tmp_path / "old.npz", meta=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(CostModelError, match="other features"):
        CostModel.load(tmp_path / "old.npz")


def test_refit_goes_on_from_the_models_weights_and_leaves_it_as_it_was() -> None:
    model = CostModel.train(synthetic(0, 4), Training(steps=5))
    x = synthetic(3, 1)[0].features
    before = model.score_features(x)
    refit = model.refit(synthetic(1, 4), Training(steps=50))
    assert np.array_equal(model.score_features(x), before) and not np.allclose(refit.score_features(x), before)
    assert refit.info["programs"] == model.info["programs"] + 160


def test_the_shipped_model_loads_and_scores_a_thousand_programs_in_well_under_a_second() -> None:
    model = CostModel.load(SHIPPED)
    x = np.random.default_rng(0).normal(0, 1, (1000, WIDTH)).astype(np.float32)
    started = time.perf_counter()
    scores = model.score_features(x)
    assert time.perf_counter() - started < 0.1 and scores.shape == (1000,) and np.isfinite(scores).all()
    assert model.info["programs"] > 5_000 and "swiglu" not in model.info["specs"]


# -- the dataset ------------------------------------------------------------------------------


def write_log(path: Path, header: dict | None, records: list[dict]) -> None:
    lines = ([json.dumps(header)] if header else []) + [json.dumps(r) for r in records]
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def evaluation(index: int, moves: list[str], program, time_s: float | None, ok: bool = True) -> dict:
    return {"index": index, "moves": moves, "hash": text_hash(program), "median_s": time_s, "ok": ok,
            "error": None, "wall_s": 0.1}


def test_a_log_is_read_as_one_group_of_the_programs_that_ran_rebuilt_exactly(tmp_path: Path) -> None:
    spec = load(KERNELS["softmax"].small())
    prefix = ["parallelize_scope(op=e, depth=0)"]
    start = played(spec, *prefix)
    one = ["vectorize_scope(op=e, depth=1)"]
    two = [*one, "split_scope(op=y, depth=1, factor=2)"]
    records = [evaluation(0, [], start, 3e-6), evaluation(1, one, played(start, *one), 2e-6),
               evaluation(2, two, played(start, *two), 1e-6),
               evaluation(3, ["join_scopes(op=s#1, depth=0)"], start, 1e-6),  # a hash that is not its program's
               evaluation(4, ["join_scopes(op=s#1, depth=0)"], start, None, ok=False)]
    records[3]["hash"] = "0" * 32
    log = tmp_path / "softmax.jsonl.gz"
    write_log(log, {"spec": to_text(spec), "prefix": prefix, "target": "native", "method": "sa", "graph": "edges"},
              records)
    group = read_group(log, HOST)
    assert group is not None and group.method == "sa" and group.spec_hash == text_hash(spec)
    assert list(group.times_s) == [3e-6, 2e-6, 1e-6]
    assert group.moves == (tuple(prefix), tuple(prefix + one), tuple(prefix + two))
    assert np.array_equal(group.features[2], features(played(start, *two), HOST, prefix + two))


def test_a_library_log_without_its_first_line_is_read_with_the_spec_beside_the_library(tmp_path: Path) -> None:
    spec = load(KERNELS["relu"].small())
    (tmp_path / "relu.spec.dojo").write_text(to_text(spec))
    (tmp_path / "logs").mkdir()
    moves = ["parallelize_scope(op=y, depth=0)"]
    write_log(tmp_path / "logs" / "relu.sa.heuristic.jsonl.gz", None,
              [evaluation(0, [], spec, 2e-6), evaluation(1, moves, played(spec, *moves), 1e-6)])
    write_log(tmp_path / "logs" / "orphan.sa.heuristic.jsonl.gz", None, [evaluation(0, [], spec, 2e-6)])
    groups = read_groups([tmp_path], HOST)
    assert [(g.name, g.method, len(g)) for g in groups] == [("relu", "sa.heuristic", 2)]


def test_a_log_is_read_against_the_machine_that_timed_it_when_its_first_line_says(tmp_path: Path) -> None:
    spec = load(KERNELS["softmax"].small())
    one = ["parallelize_scope(op=e, depth=0)"]
    records = [evaluation(0, [], spec, 3e-6), evaluation(1, one, played(spec, *one), 1e-6)]
    other = replace(HOST, peak_flops=3e12, cores=64, l1d=32 << 10, l2=1 << 20)
    header = {"spec": to_text(spec), "prefix": [], "target": "native", "method": "sa",
              "machine": {"cpu": "elsewhere", "peak_flops": other.peak_flops, "bandwidth_Bps": other.bandwidth_Bps,
                          "cores": other.cores, "fma_in_flight": 8, "vector_bytes": other.vector_bytes,
                          "l1d": other.l1d, "l2": other.l2, "l3": other.l3, "l2_Bps": other.l2_Bps,
                          "l3_Bps": other.l3_Bps}}
    write_log(tmp_path / "timed_there.jsonl.gz", header, records)
    write_log(tmp_path / "bad_facts.jsonl.gz", {**header, "machine": {"cores": "many"}}, records)
    there, bad = read_group(tmp_path / "timed_there.jsonl.gz", HOST), read_group(tmp_path / "bad_facts.jsonl.gz", HOST)
    assert np.array_equal(there.features[1], features(played(spec, *one), other, one))
    assert not np.array_equal(there.features[1], features(played(spec, *one), HOST, one))
    assert np.array_equal(bad.features[1], features(played(spec, *one), HOST, one))  # read as the reader's


def test_facts_without_the_caches_bandwidth_read_them_as_nominal() -> None:
    """Logs older than the caches' measurement: a byte per peak flop from level 2, half from the last."""
    facts = {"peak_flops": 4e11, "bandwidth_Bps": 2e10, "cores": 2, "vector_bytes": 64, "l1d": 48 << 10,
             "l2": 2 << 20, "l3": 32 << 20}
    old = Host.from_facts(facts)
    assert (old.l2_Bps, old.l3_Bps, old.fma_in_flight) == (4e11, 2e11, 8)
    assert Host.from_facts({**facts, "l2_Bps": 3e11, "l3_Bps": 1e11, "fma_in_flight": 4}) == replace(
        HOST, l2_Bps=3e11, l3_Bps=1e11, fma_in_flight=4)
    with pytest.raises(ValueError, match="not positive"):
        Host.from_facts({**facts, "l2_Bps": -1.0})


def test_a_local_runners_log_records_the_machine_it_timed_on(tmp_path: Path) -> None:
    from agent.evaluate import Evaluator, read_log
    from runner.local import LocalRunner

    log = tmp_path / "relu.jsonl"
    Evaluator(load(KERNELS["relu"].small()), runner=LocalRunner(tmp_path), log=log, budget=0).evaluate([])
    header, _ = read_log(log)
    facts = header["machine"]
    assert Host.from_facts(facts).cores == facts["cores"] >= 1 and facts["peak_flops"] > 0
    assert facts["l1d"] > 0 and facts["vector_bytes"] in (16, 32, 64) and facts["l2_Bps"] > facts["bandwidth_Bps"]


# -- rating moves -----------------------------------------------------------------------------


def test_every_legal_move_is_rated_as_the_predicted_time_before_over_after() -> None:
    model = CostModel.load(SHIPPED)
    moves = legal_moves(SOFTMAX)
    rated = rate_moves(model, HOST, SOFTMAX, moves)
    assert set(rated) == {str(m) for m in moves} and all(v > 0 for v in rated.values())
    move = str(moves[0])
    scores = model.score([SOFTMAX, apply(SOFTMAX, move)], HOST, [(), (move,)])
    assert rated[move] == pytest.approx(math.exp(scores[0] - scores[1]))


def test_a_deadline_rates_the_moves_it_reaches_and_leaves_the_rest() -> None:
    model = CostModel.load(SHIPPED)
    moves = legal_moves(SOFTMAX)
    assert rate_moves(model, HOST, SOFTMAX, moves, deadline=time.perf_counter() - 1) == {}
    some = rate_moves(model, HOST, SOFTMAX, moves, deadline=time.perf_counter() + 0.003)
    assert set(some) <= {str(m) for m in moves}
    everything = rate_moves(model, HOST, SOFTMAX, moves, deadline=time.perf_counter() + 60)
    assert len(everything) == len(moves) and {m: everything[m] for m in some} == pytest.approx(some)


# -- the commands -----------------------------------------------------------------------------


def test_dojo_costmodel_trains_on_logs_holds_out_kernels_and_rates_a_files_moves(tmp_path: Path, capsys) -> None:
    from server.cli import main

    for name in ("relu", "mul"):
        spec = load(KERNELS[name].small())
        moves = [str(m) for m in legal_moves(spec)[:6]]
        write_log(tmp_path / f"{name}.jsonl.gz", {"spec": to_text(spec), "prefix": [], "target": "native"},
                  [evaluation(0, [], spec, 3e-6)] + [evaluation(k + 1, [m], apply(spec, m), (2 + k % 3) * 1e-6)
                                                     for k, m in enumerate(moves)])
    assert main(["costmodel", "train", "--logs", str(tmp_path), "--steps", "5", "--hold-out", "mul",
                 "--out", str(tmp_path / "m.npz")]) == 0
    assert "trained on 7 programs in 1 logs of 1 specs" in capsys.readouterr().err
    (tmp_path / "relu.dojo").write_text(KERNELS["relu"].small())
    assert main(["costmodel", "moves", str(tmp_path / "relu.dojo"), "--model", str(tmp_path / "m.npz"),
                 "--json"]) == 0
    rated = json.loads(capsys.readouterr().out)
    assert {r["move"] for r in rated} == {str(m) for m in legal_moves(load(KERNELS["relu"].small()))}
    assert [r["speedup"] for r in rated] == sorted((r["speedup"] for r in rated), reverse=True)
    assert main(["costmodel", "train", "--logs", str(tmp_path / "none"), "--out", str(tmp_path / "x.npz")]) == 1
    assert "no such log" in capsys.readouterr().err
