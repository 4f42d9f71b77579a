"""A move's arguments are resolved once, into the nodes they name (`base.resolve`), before its
`why_not` and `rewrite` see them; and each move declares the targets it serves (`TARGETS`), which is
all `agent.legal` reads to leave a move out for a target."""

from __future__ import annotations

import pytest

from agent.legal import allowed, legal_moves
from codegen.targets import get_target
from dojo_ir import load, moves
from dojo_ir.analysis import Analysis
from dojo_ir.moves import KINDS, TARGETS, IllegalMove, Targets, apply, base, find, parse_move, why_not
from dojo_ir.moves.base import resolve
from dojo_ir.tree import Scope

PROGRAM = load("""kernel k(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
t f32 [4, 8] heap

4 8 t[{0},{1}] = exp(x[{0},{1}])
| 8 y[{0},{1}] = t[{0},{1}] + 1
""")


def resolved(text: str) -> base.Resolved:
    move = parse_move(text)
    return resolve(Analysis(PROGRAM), move, KINDS[move.name].ARGS)


def test_a_scope_argument_resolves_to_the_scope_and_its_operation() -> None:
    at = resolved("split_scope(op=y, depth=1, factor=2)")
    assert at.site.label == "y" and at.path == (0, 1)
    assert isinstance(at.scope, Scope) and at.scope.size == 8 and at.scope.body[0] is at.site.op
    assert at.buffer is None and at.arg("factor") == 2


def test_an_operation_argument_alone_resolves_to_the_operation() -> None:
    at = resolved("swap_ops(op=t)")
    assert at.path == at.site.path == (0, 0, 0) and at.scope is None


def test_a_buffer_argument_resolves_to_its_declaration_and_an_array_to_the_buffer_holding_it() -> None:
    assert resolved("set_location(buffer=t, location=stack)").buffer is PROGRAM.buffers[2]
    at = resolved("stage_reads(op=y, depth=1, buffer=t)")
    assert at.buffer is PROGRAM.buffer_of["t"] and at.scope.size == 8
    # An array the program lacks is the move's reason to refuse, not a malformed move.
    assert resolved("stage_reads(op=y, depth=1, buffer=q)").buffer is None
    assert why_not(PROGRAM, "stage_reads(op=y, depth=1, buffer=q)").startswith("no array `q`")


@pytest.mark.parametrize("text, message", [
    ("split_scope(op=q, depth=0, factor=2)", "no operation `q`; the operations are t, y"),
    ("split_scope(op=y, depth=2, factor=2)", "depth is 0 to 1"),
    ("set_location(buffer=q, location=stack)", "no buffer `q`; the buffers are x, y, t"),
])
def test_a_name_that_names_nothing_is_an_error_naming_the_move(text: str, message: str) -> None:
    with pytest.raises(IllegalMove, match=message) as caught:
        resolved(text)
    assert text in caught.value.diagnostics[0].message
    assert message in why_not(PROGRAM, text)


def test_apply_resolves_the_arguments_once_for_both_the_check_and_the_rewrite(monkeypatch) -> None:
    kind, calls = KINDS["split_scope"], []

    def recorded(name, step):
        def record(*args):
            result = step(*args)
            calls.append((name, args[1], result))
            return result
        return record

    monkeypatch.setattr(moves, "resolve", recorded("resolve", moves.resolve))
    monkeypatch.setattr(kind, "why_not", recorded("why_not", kind.why_not))
    monkeypatch.setattr(kind, "rewrite", recorded("rewrite", kind.rewrite))
    after = apply(PROGRAM, "split_scope(op=y, depth=1, factor=2)")
    (_, _, at), (_, checked, legal), (_, rewritten, _) = calls
    assert [name for name, _, _ in calls] == ["resolve", "why_not", "rewrite"]
    assert checked is at and rewritten is at and legal is None
    assert at.scope.size == 8 and after != PROGRAM


def test_every_move_declares_its_targets() -> None:
    assert set(TARGETS) == set(KINDS)
    assert all(isinstance(kind.TARGETS, Targets) for kind in KINDS.values())
    cpu_only = {name for name, t in TARGETS.items() if not t.gpu}
    gpu_only = {name for name, t in TARGETS.items() if not t.cpu}
    assert cpu_only == {"parallelize_scope", "vectorize_scope"} and gpu_only == {"map_gpu"}
    # docs/moves.md says so, from the same declarations
    assert TARGETS["set_location"].describe() == "CPUs and GPUs (`location=shared` on GPUs only)"
    assert TARGETS["map_gpu"].describe() == "GPUs only"


@pytest.mark.parametrize("move, cpu, gpu", [
    ("map_gpu(op=y, depth=0, kind=g)", False, True),
    ("parallelize_scope(op=y, depth=0)", True, False),
    ("vectorize_scope(op=y, depth=1)", True, False),
    ("set_location(buffer=t, location=shared)", False, True),
    ("set_location(buffer=t, location=stack)", True, True),
    ("split_scope(op=y, depth=0, factor=2)", True, True),
])
def test_a_search_considers_a_move_for_the_targets_it_declares(move: str, cpu: bool, gpu: bool) -> None:
    parsed = parse_move(move)
    assert allowed(get_target("native"), parsed) is cpu
    assert allowed(get_target("cuda"), parsed) is gpu
    assert allowed(get_target("hip"), parsed) is gpu


def test_the_declaration_is_what_a_search_reads(monkeypatch) -> None:
    splits = [m for m in legal_moves(PROGRAM, "native") if m.name == "split_scope"]
    assert splits
    monkeypatch.setitem(TARGETS, "split_scope", Targets(cpu=False))
    assert all(m.name != "split_scope" for m in legal_moves(PROGRAM, "native"))
    assert set(legal_moves(PROGRAM, "native")) == set(find(PROGRAM)) - set(splits) - {
        m for m in find(PROGRAM) if not allowed(get_target("native"), m)}
