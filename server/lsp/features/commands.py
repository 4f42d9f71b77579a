"""Commands: `dojo.benchmark`, `dojo.showGeneratedCode`, `dojo.applyMoves`.

Each runs as its own task with cancellable work-done progress, takes the
document's URI first, and answers with JSON the client (or a script) can use.
They are the plumbing that the search and agent commands reuse: `progress`
for cancellable work, and a result that arrives later is sent with
`requests.apply_edit(ls, label, requests.document_edit(ls, snapshot, new_text))`, one edit for the version it
was computed from, which the client refuses if the document changed meanwhile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from codegen import generate, get_target
from codegen.build import default_cache_dir
from dojo_ir import DojoError, Program

from ..progress import cancellable, progress
from ..requests import LANGUAGE_ID, apply_edit, argument, document_of, moves_edit
from ..server import DojoServer

BENCHMARK = "dojo.benchmark"
SHOW_GENERATED_CODE = "dojo.showGeneratedCode"
APPLY_MOVES = "dojo.applyMoves"
EXTENSION = {"c": ".c", "cuda": ".cu", "hip": ".hip"}


def register(server: DojoServer) -> None:
    @server.command(BENCHMARK)
    @cancellable
    async def benchmark(ls: DojoServer, *args: Any) -> dict[str, Any]:
        snapshot, program = await document_of(ls, args, BENCHMARK)
        async with progress(ls, f"Benchmarking {program.name} on {ls.settings.target}") as report:
            report(f"building and timing on {ls.settings.runner_name}", None)
            measured = await ls.measurements.measure(program, snapshot.spec, ls.settings, ls.settings.repetitions)
        if measured.error is not None:
            return {"error": measured.error, "summary": measured.summary()}
        assert measured.result is not None
        return measured.result.to_json() | {"bound_s": measured.bound_s, "summary": measured.summary()}

    @server.command(SHOW_GENERATED_CODE)
    @cancellable
    async def show_generated_code(ls: DojoServer, *args: Any) -> dict[str, Any]:
        snapshot, program = await document_of(ls, args, SHOW_GENERATED_CODE)
        target = get_target(argument(args, 1, str, SHOW_GENERATED_CODE, "a target name") or ls.settings.target)
        async with progress(ls, f"Generating {target.name} code for {program.name}") as report:
            report("generating", None)
            text = generate(program, target)
        path = _generated_path(program, target.language, target.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        window = ls.client_capabilities.window
        if window and window.show_document and window.show_document.support:
            await ls.window_show_document_async(lsp.ShowDocumentParams(uri=path.as_uri(), take_focus=True))
        return {"uri": path.as_uri(), "language": LANGUAGE_ID[target.language], "text": text}

    @server.command(APPLY_MOVES)
    @cancellable
    async def apply_moves(ls: DojoServer, *args: Any) -> dict[str, Any]:
        snapshot, _ = await document_of(ls, args, APPLY_MOVES)
        version = argument(args, 1, int, APPLY_MOVES, "the document's version")
        moves = argument(args, 2, list, APPLY_MOVES, "a list of moves")
        if version is None or not moves or not all(isinstance(m, str) for m in moves):
            raise JsonRpcInvalidParams(f"{APPLY_MOVES} takes [uri, version, [move, ...]]")
        if version != snapshot.version:
            raise JsonRpcContentModified(f"the document is at version {snapshot.version}, not {version}")
        async with progress(ls, f"Applying {len(moves)} moves") as report:
            report("applying", None)
            try:
                edit = moves_edit(ls, snapshot, moves)
            except DojoError as error:
                raise JsonRpcInvalidParams(f"{APPLY_MOVES}: {error.diagnostics[0].message}") from None
            applied = await apply_edit(ls, f"{len(moves)} moves", edit)
        return {"applied": applied, "moves": len(moves)}


def _generated_path(program: Program, language: str, target: str) -> Path:
    return default_cache_dir() / "generated" / f"{program.name}-{target}{EXTENSION[language]}"
