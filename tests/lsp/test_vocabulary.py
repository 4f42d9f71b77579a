"""`dojo.vocabulary`: the names the editors' pickers offer, from their sources."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from agent.methods import AGENT, METHODS, PASSES, SEARCHES
from codegen.targets import TARGETS


async def test_the_targets_and_tune_methods_come_from_their_sources(editor):
    answer = await editor.client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="dojo.vocabulary"))
    assert answer["targets"] == list(TARGETS)
    assert answer["tuneMethods"][0] == "heuristic"
    assert sorted(answer["tuneMethods"]) == sorted([*PASSES, *SEARCHES])
    assert AGENT not in answer["tuneMethods"] and set(answer["tuneMethods"]) < set(METHODS)
    commands = editor.client.initialize_result.capabilities.execute_command_provider.commands
    assert "dojo.vocabulary" in commands


async def test_tune_refuses_a_method_outside_the_vocabulary(editor, tmp_path):
    path = tmp_path / "relu.dojo"
    path.write_text("kernel k(x) -> y\nx f32 [4] heap\ny f32 [4] heap\n4 y[{0}] = x[{0}]\n")
    uri = editor.open(path)
    with pytest.raises(JsonRpcException, match="method is one of heuristic, sa, random, greedy, naive,"):
        await editor.client.workspace_execute_command_async(lsp.ExecuteCommandParams(
            command="dojo.tune", arguments=[uri, {"method": "agent", "budget": 1}]))
