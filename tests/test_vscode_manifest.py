"""The VS Code extension's manifest (editors/vscode/package.json): what a
workspace may set, what runs in an untrusted one, and the targets it lists."""

from __future__ import annotations

import json
from pathlib import Path

from codegen.targets import TARGETS
from server.lsp.settings import USER_KEYS

MANIFEST = json.loads((Path(__file__).resolve().parents[1] / "editors" / "vscode" / "package.json").read_text())
SETTINGS = MANIFEST["contributes"]["configuration"]["properties"]


def test_a_workspace_cannot_choose_the_runner_its_token_file_or_the_agent():
    # `machine`: user (or remote machine) settings only; the server ignores a workspace's value too
    assert {f"dojo.{key}" for key in USER_KEYS} == {"dojo.runner.url", "dojo.runner.tokenFile",
                                                    "dojo.agent.checkpoint"}
    assert {key: SETTINGS[f"dojo.{key}"]["scope"] for key in USER_KEYS} == dict.fromkeys(USER_KEYS, "machine")


def test_an_untrusted_workspace_gets_limited_support_without_its_server_settings():
    untrusted = MANIFEST["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited"
    assert set(untrusted["restrictedConfigurations"]) == {"dojo.server.path", "dojo.server.python",
                                                          *(f"dojo.{key}" for key in USER_KEYS)}


def test_the_target_setting_lists_the_code_generators_targets():
    # a manifest cannot ask the server (dojo.vocabulary), so its list is checked against the source
    assert SETTINGS["dojo.target"]["enum"] == list(TARGETS)
    assert len(SETTINGS["dojo.target"]["enumDescriptions"]) == len(TARGETS)
