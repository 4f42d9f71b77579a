"""`dojo.tune` end to end: a real search with a real local runner, applied as
one versioned edit that records its moves; cancelled, it keeps the best so far."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from dojo_ir import load
from dojo_ir.library import KERNELS
from tests.lsp.fixtures import derived_file


def tune(editor, *arguments):
    return editor.client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="dojo.tune",
                                                                                  arguments=list(arguments)))


async def test_tune_applies_the_best_program_with_its_derivation(editor, tmp_path: Path):
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    answer = await asyncio.wait_for(tune(editor, uri, {"method": "heuristic", "budget": 3}), 120)
    assert answer["method"] == "heuristic" and answer["evaluations"] >= 1 and answer["spec_s"] > 0
    if answer["moves"]:
        assert answer["applied"] is True
        assert load(editor.texts[uri]).derivation.moves == tuple(answer["moves"])
        assert await editor.diagnostics(uri) == []  # the derivation replays to the edited text
    else:
        assert answer["applied"] is False and answer["reason"] == "no faster program found"
    assert (tmp_path / "softmax.dojo.tune.jsonl").read_text().count("\n") >= answer["evaluations"]


async def test_cancelling_a_tune_stops_it_and_keeps_the_best_so_far(editor, tmp_path: Path):
    if not editor.client.capabilities.window.work_done_progress:
        pytest.skip("this client has no work-done progress to cancel")
    uri = editor.open(derived_file(tmp_path, "relu", KERNELS["relu"].small()))
    running = asyncio.ensure_future(tune(editor, uri, {"method": "random", "budget": 10_000}))
    while not any(isinstance(r, lsp.WorkDoneProgressReport) for reports in editor.client.progress_reports.values()
                  for r in reports):
        await asyncio.sleep(0.05)
    token = next(iter(editor.client.progress_reports))
    editor.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    answer = await asyncio.wait_for(running, 120)
    assert answer["stopped"] is True and 1 <= answer["evaluations"] < 10_000


async def test_tune_refuses_a_bad_method(editor, tmp_path: Path):
    from pygls.exceptions import JsonRpcException

    path = tmp_path / "relu.dojo"
    path.write_text(KERNELS["relu"].small())
    uri = editor.open(path)
    with pytest.raises(JsonRpcException, match="method is one of"):
        await tune(editor, uri, {"method": "magic", "budget": 3})
