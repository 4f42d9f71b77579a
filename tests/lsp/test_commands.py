"""The commands, end to end against a real local runner: benchmark with
progress and cancellation, the generated code as a document, and moves
applied as one versioned edit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from dojo_ir import load, to_text
from dojo_ir.library import KERNELS
from dojo_ir.moves import apply
from tests.lsp.fixtures import derived_file


def command(editor, name: str, *arguments):
    return editor.client.workspace_execute_command_async(lsp.ExecuteCommandParams(command=name,
                                                                                  arguments=list(arguments)))


def progress_messages(client) -> list[list[str]]:
    """Per progress token, the kinds of its reports in order."""
    return [[report.kind for report in reports] for reports in client.progress_reports.values()]


async def test_benchmark_measures_verifies_and_reports_progress(editor, tmp_path: Path):
    path = tmp_path / "relu.dojo"
    path.write_text(KERNELS["relu"].small())
    uri = editor.open(path)
    result = await command(editor, "dojo.benchmark", uri)
    assert result["error"] is None and result["verified"] is True and result["median_s"] > 0
    assert result["repeats"] >= 3 and result["summary"].split()[1] in ("s", "ms", "µs", "ns")
    if editor.client.capabilities.window.work_done_progress:
        assert ["begin", "report", "end"] in progress_messages(editor.client)


async def test_benchmark_is_cancelled_from_its_progress(editor, tmp_path: Path):
    if not editor.client.capabilities.window.work_done_progress:
        pytest.skip("this client has no work-done progress to cancel")
    path = tmp_path / "matmul.dojo"
    path.write_text(KERNELS["matmul"].text())  # takes seconds to build, verify and time
    uri = editor.open(path)
    running = asyncio.ensure_future(command(editor, "dojo.benchmark", uri))
    while not editor.client.progress_reports:
        await asyncio.sleep(0.01)
    token = next(iter(editor.client.progress_reports))
    editor.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    with pytest.raises(JsonRpcException, match="cancelled"):
        await asyncio.wait_for(running, 10)
    ends = [p for p in editor.client.progress_reports[token] if isinstance(p, lsp.WorkDoneProgressEnd)]
    assert [end.message for end in ends] == ["cancelled"]
    assert (await command(editor, "dojo.showGeneratedCode", uri))["language"] == "c"  # and the server carries on


async def test_benchmark_of_an_invalid_document_says_where(editor, tmp_path: Path):
    path = tmp_path / "bad.dojo"
    path.write_text("kernel k(x) -> y\nx f32 [4] heap\ny f32 [4] heap\n4 y[{0}] = x[{0}] +\n")
    uri = editor.open(path)
    with pytest.raises(JsonRpcException, match=r"bad.dojo has 1 error.*4:20"):
        await command(editor, "dojo.benchmark", uri)
    with pytest.raises(JsonRpcException, match="needs the document's URI"):
        await command(editor, "dojo.benchmark")


@pytest.mark.parametrize("target, language, marker", [("native", "c", "int main"), ("cuda", "cuda", "__global__"),
                                                      ("hip", "cpp", "__global__")])
async def test_generated_code_opens_as_a_document(editor, tmp_path: Path, target, language, marker):
    path = tmp_path / "add.dojo"
    program = load(KERNELS["add"].small())
    # on the GPU, so that there is device code to see
    path.write_text(to_text(apply(program, "map_gpu(op=z, depth=0, kind=g)") if target != "native" else program))
    uri = editor.open(path)
    result = await command(editor, "dojo.showGeneratedCode", uri, target)
    assert result["language"] == language and marker in result["text"]
    assert Path(result["uri"].removeprefix("file://")).read_text() == result["text"]
    window = editor.client.capabilities.window
    if window.show_document and window.show_document.support:
        assert [d.uri for d in editor.client.shown_documents] == [result["uri"]]


async def test_apply_moves_is_one_versioned_edit_that_records_them(editor, tmp_path: Path):
    path = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    uri = editor.open(path)
    version = editor.versions[uri]
    moves = ["join_scopes(op=m#1, depth=0)", "join_scopes(op=m#1, depth=0)"]
    result = await command(editor, "dojo.applyMoves", uri, version, moves)
    assert result == {"applied": True, "moves": 2}
    assert load(editor.texts[uri]).derivation.moves == tuple(moves)
    assert await editor.diagnostics(uri) == []  # the replay of the new derivation agrees


async def test_apply_moves_refuses_a_stale_version_and_an_illegal_move(editor, tmp_path: Path):
    path = derived_file(tmp_path, "softmax", KERNELS["softmax"].small())
    uri = editor.open(path)
    with pytest.raises(JsonRpcException, match="version"):
        await command(editor, "dojo.applyMoves", uri, editor.versions[uri] + 5, ["join_scopes(op=m#1, depth=0)"])
    illegal = r"move 2 `swap_scopes\(op=nothing, depth=0\)` does not apply: .*no operation"
    with pytest.raises(JsonRpcException, match=illegal):
        await command(editor, "dojo.applyMoves", uri, editor.versions[uri],
                      ["join_scopes(op=m#1, depth=0)", "swap_scopes(op=nothing, depth=0)"])
    assert load(editor.texts[uri]).derivation.moves == ()
