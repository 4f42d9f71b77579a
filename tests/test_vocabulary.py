"""One source for each word the front doors and reports share: how a time is written, the hash
of a program's text, the names of the tuning methods and graphs."""

from __future__ import annotations

import hashlib

from agent import methods
from agent.evaluate import text_hash, text_key
from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.paths import without_comments
from runner.result import format_time


def test_a_time_is_written_to_three_digits_in_the_largest_unit_below_it() -> None:
    assert [format_time(t) for t in (2.5, 0.0123, 4.56e-6, 7.8e-9, None)] == [
        "2.5 s", "12.3 ms", "4.56 µs", "7.8 ns", "-"]


def test_every_door_writes_times_with_it() -> None:
    from runner.result import RunResult
    from server.commands.run import summary
    from server.lsp.measurements import Measurement

    result = RunResult("native", 4.56e-6, 4e-6, 5e-6, 10, 0.1, True, 0.0, None)
    assert "median 4.56 µs (min 4 µs, max 5 µs" in summary("k", result)
    assert Measurement(result=result).summary().startswith("4.56 µs")


def test_a_program_has_one_hash_of_its_text() -> None:
    from server.lsp.measurements import key
    from server.lsp.settings import Settings

    text = KERNELS["softmax"].small()
    program = load(text)
    canonical = to_text(without_comments(program))
    assert text_hash(program) == text_key(canonical) == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    # what the program computes, not how it is written: comments do not count, the shape does
    assert text_hash(load("# another note\n" + text.replace("# Row-wise", "# Still row-wise"))) == text_hash(program)
    assert text_hash(load(KERNELS["softmax"].generate(m=4, n=5))) != text_hash(program)
    assert key(program, Settings()).endswith(text_hash(program))


def test_the_methods_and_graphs_have_one_source() -> None:
    from server.cli import build_parser
    tune = build_parser()._subparsers._group_actions[0].choices["tune"]
    choices = {a.dest: a.choices for a in tune._actions if a.choices}
    assert tuple(choices["method"]) == methods.METHODS and tuple(choices["graph"]) == methods.GRAPHS
    assert set(methods.METHODS) == {*methods.PASSES, *methods.SEARCHES, methods.AGENT}
    # and each name but the agent's has its implementation, which `tune` runs
    from agent.passes import PASSES
    from agent.search import METHODS
    assert set(methods.METHODS) == {*PASSES, *METHODS, methods.AGENT}
