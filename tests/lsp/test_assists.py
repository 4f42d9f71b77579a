"""Quick-fixes as rust-analyzer tests its assists: the text before with `$0`
at the cursor, the move chosen from the ones offered there, the text after.
And the node under the cursor, which hover shows the code of."""

from __future__ import annotations

import pytest

from dojo_ir import to_text
from dojo_ir.derivation import advance
from server.lsp.documents import Snapshot
from server.lsp.features.code_actions import title

MARKER = "$0"


def at_cursor(fixture: str) -> tuple[Snapshot, int, int]:
    """The snapshot of `fixture` without its marker, and the marker's 0-based line and character."""
    before, _, _ = fixture.partition(MARKER)
    line = before.count("\n")
    character = len(before) - (before.rfind("\n") + 1)
    return Snapshot("file:///fixture.dojo", 1, fixture.replace(MARKER, "", 1)), line, character


def check_assist(move: str, before: str, after: str) -> None:
    snapshot, line, _ = at_cursor(before)
    offered = {str(m): m for m in snapshot.moves_at(line + 1, line + 1)}
    assert move in offered, f"`{move}` is not offered at the cursor; offered: {sorted(offered)}"
    assert title(offered[move]).endswith(f" — {move}")
    assert to_text(advance(snapshot.program, [move])) == after


def check_assist_not_applicable(move: str, before: str) -> None:
    snapshot, line, _ = at_cursor(before)
    assert move not in {str(m) for m in snapshot.moves_at(line + 1, line + 1)}


PAIR = """\
kernel pair(x) -> y

x f32 [8] heap
t f32 [8] heap
y f32 [8] heap

8 t[{0}] = x[{0}] * 2
8 y[{0}] = t[{0}] + 1
"""


def test_fuse_from_the_first_scope():
    check_assist("join_scopes(op=t, depth=0)", PAIR.replace("8 t[", "8 t$0["), PAIR.replace(
        "8 t[{0}] = x[{0}] * 2\n8 y", "8 t[{0}] = x[{0}] * 2\n| y"))


def test_fuse_is_not_offered_on_the_last_scope():
    check_assist_not_applicable("join_scopes(op=t, depth=0)", PAIR.replace("8 y[", "8 $0y["))


def test_parallelize_records_the_move_in_a_derived_file():
    derived = PAIR.replace("kernel pair(x) -> y\n", 'kernel pair(x) -> y\n\nspec "pair.spec.dojo"\n')
    after = derived.replace('spec "pair.spec.dojo"\n', 'spec "pair.spec.dojo"\nmove parallelize_scope(op=y, depth=0)\n'
                            ).replace("8 y[", "8:p y[")
    check_assist("parallelize_scope(op=y, depth=0)", derived.replace("8 y[", "$08 y["), after)


def test_buffer_moves_are_offered_on_the_declaration():
    snapshot, line, _ = at_cursor(PAIR.replace("t f32", "$0t f32"))
    assert {m.name for m in snapshot.moves_at(line + 1, line + 1)} <= {"set_location", "reuse_dims", "pad_dim",
                                                                      "swap_dims", "unpad_dim", "unreuse_dims"}
    assert any(m.name == "set_location" for m in snapshot.moves_at(line + 1, line + 1))


NEST = """\
kernel nest(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap

4 8 y[{0},{1}] = x[{0},{1}]
"""


@pytest.mark.parametrize("cursor, path", [
    ("$04 8 y", (0,)),  # on the outer size
    ("4$0 8 y", (0,)),  # just after it: still on it
    ("4 $08 y", (0, 0)),  # on the inner size
    ("4 8 $0y", (0, 0, 0)),  # on the operation
    ("4 8 y[{0},{1}] = x[{0},$0{1}]", (0, 0, 0)),
])
def test_the_node_under_the_cursor(cursor, path):
    snapshot, line, character = at_cursor(NEST.replace("4 8 y[{0},{1}] = x[{0},{1}]", cursor if "=" in cursor
                                                       else cursor + "[{0},{1}] = x[{0},{1}]"))
    assert snapshot.node_at(line, character) == path


def test_no_node_off_the_body():
    snapshot, line, character = at_cursor(NEST.replace("x f32", "x f$032"))
    assert snapshot.node_at(line, character) is None


def test_split_with_a_tail():
    check_assist("split_scope(op=y, depth=0, factor=4)", """\
kernel tail(x) -> y

x f32 [10] heap
y f32 [10] heap

$010 y[{0}] = x[{0}] * 2
""", """\
kernel tail(x) -> y

x f32 [10] heap
y f32 [10] heap

2 4 y[{0}*4+{1}] = x[{0}*4+{1}] * 2
2 y[{0}+8] = x[{0}+8] * 2
""")


MATMUL = """\
kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap

4 16 c[{0},{1}] = 0
$04 8 16 c[{0},{2}] += a[{0},{1}] * b[{1},{2}]
"""


def test_stage_a_row_of_b_before_the_scope_that_reads_it():
    check_assist("stage_reads(op=c#2, depth=2, buffer=b)", MATMUL, """\
kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap
b_s f32 [4:1, 8:1, 16] heap

4 16 c[{0},{1}] = 0
4 8 16 b_s[{0},{1},{2}] = b[{1},{2}]
| | 16 c[{0},{2}] += a[{0},{1}] * b_s[{0},{1},{2}]
""")


def test_staging_b_is_not_offered_where_the_box_would_not_move():
    # around the k scope is i, which b's reads do not use: the copy would be the same each time
    check_assist_not_applicable("stage_reads(op=c#2, depth=1, buffer=b)", MATMUL)
