"""A real `dojo-lsp` process per test, driven by pytest-lsp with the captured
capabilities of VS Code and of Neovim, and a scripted editor around it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.lsp.editor import Editor

CLIENTS = ("visual_studio_code", "neovim")
# The agent's checkpoint is a directory that is not there, so that a test that means to play the
# agent names its own and one that plays by mistake fails at once. The quick-fixes are not ranked
# by the cost model, so that the tests of other features see the plain order their titles are
# written in (test_ranking.py turns it on).
SETTINGS = {"dojo": {"target": "native", "repetitions": 3, "measure": {"automatic": False},
                     "agent": {"checkpoint": "/nonexistent/agent", "rankQuickFixes": False}}}


def server_config() -> ClientServerConfig:
    return ClientServerConfig(server_command=[sys.executable, "-m", "server.lsp"])


@pytest_lsp.fixture(config=server_config(), params=CLIENTS)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    lsp_client.set_configuration(SETTINGS)
    lsp_client.initialize_result = await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities(request.param), initialization_options=SETTINGS["dojo"],
        workspace_folders=[lsp.WorkspaceFolder(uri=Path.cwd().as_uri(), name="perfdojo")]))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    return Editor(client)
