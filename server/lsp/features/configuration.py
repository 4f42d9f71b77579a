"""Settings: `initializationOptions` first, then `workspace/configuration`
whenever the client is ready or says the configuration changed. Only the
first may choose the runner, its token file and the agent's checkpoint (see
settings.py): the others can be a cloned repository's."""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from ..server import DojoServer
from ..settings import SECTION, read_settings

log = logging.getLogger(__name__)


def register(server: DojoServer) -> None:
    @server.feature(lsp.INITIALIZE)
    def initialize(ls: DojoServer, params: lsp.InitializeParams) -> None:
        if params.initialization_options is not None:
            _use(ls, params.initialization_options, from_user=True)

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: DojoServer, params: lsp.InitializedParams) -> None:
        await _pull(ls)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def changed(ls: DojoServer, params: lsp.DidChangeConfigurationParams) -> None:
        if not await _pull(ls) and params.settings is not None:
            _use(ls, params.settings, from_user=False)


async def _pull(ls: DojoServer) -> bool:
    """Ask the client for the `dojo` section; False if it cannot be asked."""
    workspace = ls.client_capabilities.workspace
    if not (workspace and workspace.configuration):
        return False
    try:
        answer = await ls.workspace_configuration_async(
            lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section=SECTION)]))
    except Exception as error:  # a client that cannot answer leaves the settings as they are
        log.warning("workspace/configuration failed: %s", error)
        return False
    if answer and answer[0] is not None:
        _use(ls, answer[0], from_user=False)
    return True


def _use(ls: DojoServer, value: object, *, from_user: bool) -> None:
    settings, problems = read_settings(value, ls.settings, from_user=from_user)
    for problem in problems:
        ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Warning, message=f"PerfDojo: {problem}"))
    if settings != ls.settings:
        ls.settings = settings
        ls.refresh_inlay_hints()
