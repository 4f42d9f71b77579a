"""`dojo.vocabulary`: the names an editor offers in its pickers, from their one
source, so that no plugin keeps a copy: the targets of code generation
(codegen.targets) and the methods of `dojo.tune` (agent.tune's passes and
searches; the agent plays through `dojo.agent.continue`).

    -> workspace/executeCommand {"command": "dojo.vocabulary"}
    <- {"targets": ["native", ...], "tuneMethods": ["heuristic", ...]}
"""

from __future__ import annotations

from functools import cache
from typing import Any

from codegen.targets import TARGETS

from ..server import DojoServer

VOCABULARY = "dojo.vocabulary"
FIRST_TUNE_METHOD = "heuristic"  # offered first, and the one a client that cannot be asked gets


def register(server: DojoServer) -> None:
    @server.command(VOCABULARY)
    def vocabulary_command(ls: DojoServer, *args: Any) -> dict[str, list[str]]:
        return {"targets": list(TARGETS), "tuneMethods": list(tune_methods())}


@cache
def tune_methods() -> tuple[str, ...]:
    """What `dojo.tune` accepts as its method, `FIRST_TUNE_METHOD` first."""
    from agent.passes import PASSES  # the search's modules, loaded when first asked for
    from agent.search import METHODS

    return FIRST_TUNE_METHOD, *(method for method in (*PASSES, *METHODS) if method != FIRST_TUNE_METHOD)
