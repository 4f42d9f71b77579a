"""`dojo.agent.continue` end to end: the learned agent from the configured
checkpoint plays a few moves with the real local runner, and the best program it
met comes back as one versioned edit that records its moves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from dojo_ir import load
from dojo_ir.library import KERNELS
from tests.lsp.conftest import SETTINGS
from tests.lsp.fixtures import derived_file


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An agent trained for one episode on softmax against a made-up cost (each move 10% faster):
    what matters here is the server's use of a checkpoint, not what it learned."""
    from agent.perfllm.train import TrainOptions, train

    out = tmp_path_factory.mktemp("agent")
    train([("softmax", load(KERNELS["softmax"].small()))], out, TrainOptions(episodes=1, max_steps=2),
          evaluate=lambda name, spec: (lambda moves: 1e-3 * 0.9 ** len(moves)))
    return out


def agent_continue(editor, *arguments):
    return editor.client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="dojo.agent.continue",
                                                                                  arguments=list(arguments)))


async def test_the_users_checkpoint_is_used_and_a_workspaces_is_not(editor, tmp_path: Path):
    uri = editor.open(derived_file(tmp_path, "relu", KERNELS["relu"].small()))
    answer = await agent_continue(editor, uri, {"steps": 2})
    assert answer == {"applied": False, "reason": "the agent cannot play: no agent checkpoint at /nonexistent/agent"}
    # a checkpoint is unpickled, so it is the user's choice (initializationOptions), never a folder's settings
    editor.client.set_configuration({"dojo": {**SETTINGS["dojo"], "agent": {**SETTINGS["dojo"]["agent"],
                                                                     "checkpoint": str(tmp_path / "none")}}})
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    for _ in range(10):  # while the server reads the new settings
        answer = await agent_continue(editor, uri, {"steps": 2})
        assert answer["reason"].endswith("/nonexistent/agent")
        await asyncio.sleep(0.05)


async def test_the_agent_plays_from_the_document_and_applies_the_best_program(editor, tmp_path: Path,
                                                                              checkpoint: Path):
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    answer = await asyncio.wait_for(agent_continue(editor, uri, {"steps": 2, "checkpoint": str(checkpoint)}), 180)
    assert 1 <= len(answer["steps"]) <= 2 and answer["start_s"] > 0
    if answer["moves"]:
        assert answer["applied"] is True
        assert load(editor.texts[uri]).derivation.moves == tuple(answer["moves"])
        assert await editor.diagnostics(uri) == []  # the derivation replays to the edited text
    else:
        assert answer["applied"] is False and answer["reason"] == "no faster program met"
