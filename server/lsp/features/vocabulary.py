"""`dojo.vocabulary`: the names an editor offers in its pickers, from their one
source, so that no plugin keeps a copy: the targets of code generation
(codegen.targets) and the methods of `dojo.tune` (agent.methods; the agent
plays through `dojo.agent.continue`).

    -> workspace/executeCommand {"command": "dojo.vocabulary"}
    <- {"targets": ["native", ...], "tuneMethods": ["heuristic", ...]}
"""

from __future__ import annotations

from typing import Any

from agent.methods import TUNE_METHODS
from codegen.targets import TARGETS

from ..server import DojoServer

VOCABULARY = "dojo.vocabulary"


def register(server: DojoServer) -> None:
    @server.command(VOCABULARY)
    def vocabulary_command(ls: DojoServer, *args: Any) -> dict[str, list[str]]:
        return {"targets": list(TARGETS), "tuneMethods": list(TUNE_METHODS)}
