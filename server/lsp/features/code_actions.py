"""Code actions: every legal move whose node covers the cursor's lines.

They come best predicted speed-up first (`ratings.py`: the learned cost
model, `dojo.agent.rankQuickFixes`), the best one preferred and its title
showing the prediction; with the setting off, innermost node first. The moves
are rated in the request, after they are listed (a fraction of a millisecond
a move), so every answer is ranked, the first after an edit too.

The moves are listed off the event loop, once per version and range. The
first listing after an edit checks every move around the cursor anew, which
for a big scope's many fissions takes longer than an editor should wait: a
request answers within FIRST_ANSWER_S with the moves found legal by then,
innermost node first, and the listing goes on, so that the next request
(the editor asks again as the cursor moves) has them all. The ratings then
take what is left of ANSWER_S from the request's arrival (at least
`ratings.FLOOR_S`), so the two waits do not add up past it. Every move listed
is legal in the version it is listed for. The edit
is computed only when the client resolves the action, and refused with
ContentModified if the document moved on since the list was made, so an edit
is never applied to a text it was not computed for. Clients that cannot
resolve get the edits in the list.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from dojo_ir import DojoError
from dojo_ir.moves import KINDS, Move

from ..documents import Snapshot
from ..requests import moves_edit, snapshot_of
from ..server import DojoServer

KIND = lsp.CodeActionKind.QuickFix
FIRST_ANSWER_S = 0.05
ANSWER_S = 0.07  # a request's answer, listed and rated, with room for the protocol under 100 ms


def register(server: DojoServer) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION,
                    lsp.CodeActionOptions(code_action_kinds=[KIND], resolve_provider=True))
    async def code_actions(ls: DojoServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        if params.context.only and not any(KIND.value.startswith(k.value) for k in params.context.only):
            return []
        arrived = time.perf_counter()
        snapshot = await snapshot_of(ls, params.text_document.uri)
        start, end = params.range.start, params.range.end
        last = end.line if end.character > 0 or end.line == start.line else end.line - 1
        first, last = start.line + 1, last + 1
        moves = snapshot.moves_listed_at(first, last)  # a cursor that stays: no listing to wait for
        if moves is None:
            listing = ls.off_loop(snapshot.moves_at, f"moves of {snapshot.name}", first, last)
            done, _ = await asyncio.wait([listing], timeout=FIRST_ANSWER_S)
            moves = listing.result() if done else snapshot.moves_known_at(first, last)
        return await ls.off_loop(rated_actions, f"code actions of {snapshot.name}", ls, snapshot, moves,
                                 arrived + ANSWER_S)

    @server.feature(lsp.CODE_ACTION_RESOLVE)
    async def resolve(ls: DojoServer, code_action: lsp.CodeAction) -> lsp.CodeAction:
        data = code_action.data if isinstance(code_action.data, dict) else {}
        if not {"uri", "version", "move"} <= data.keys() or not isinstance(data["uri"], str):
            raise JsonRpcInvalidParams("this code action was not made by dojo-lsp")
        snapshot = await snapshot_of(ls, data["uri"])
        if snapshot.version != data["version"]:
            raise JsonRpcContentModified(f"the document changed (version {data['version']} -> {snapshot.version}) "
                                         "since this action was listed; ask for the actions again")
        if snapshot.program is None:  # no action is listed for a text with errors: not our data
            raise JsonRpcInvalidParams("the document has errors; there is no move to play")
        try:
            code_action.edit = moves_edit(ls, snapshot, [data["move"]])
        except DojoError as error:  # listed legal for this version, so only a client's own data gets here
            raise JsonRpcInvalidParams(error.diagnostics[0].message) from None
        return code_action


def title(move: Move) -> str:
    return f"{KINDS[move.name].TITLE} — {move}"


def rated_actions(ls: DojoServer, snapshot: Snapshot, moves: list[Move], answer_by: float | None = None
                  ) -> list[lsp.CodeAction]:
    """The quick-fixes of `moves`, rated by the cost model if ranking is on (until `answer_by`,
    `time.perf_counter()`, as `Ratings.rate` allows)."""
    return actions(ls, snapshot, moves, ls.ratings.rate(snapshot, moves, ls.settings, answer_by))


def actions(ls: DojoServer, snapshot: Snapshot, moves: list[Move], ratings: Mapping[str, float] | None
            ) -> list[lsp.CodeAction]:
    """The quick-fixes of `moves`, ranked when `ratings` are known."""
    lazy = _resolves_edits(ls)
    if not ratings:
        return [action(ls, snapshot, move, lazy) for move in moves]
    return [action(ls, snapshot, move, lazy, ratings.get(str(move)) if i == 0 else None)
            for i, move in enumerate(ranked(moves, ratings))]


def ranked(moves: list[Move], ratings: Mapping[str, float]) -> list[Move]:
    """`moves` by their rating, best first; the moves not rated (not for the target) after
    them, and ties, in their given order."""
    return sorted(moves, key=lambda move: -ratings.get(str(move), -math.inf))


def action(ls: DojoServer, snapshot: Snapshot, move: Move, lazy: bool, preferred: float | None = None
           ) -> lsp.CodeAction:
    """The quick-fix of `move`; `preferred`, the predicted speed-up of the best-rated move."""
    data: dict[str, Any] = {"uri": snapshot.uri, "version": snapshot.version, "move": str(move)}
    edit = None if lazy else moves_edit(ls, snapshot, [str(move)])
    if preferred is None:
        return lsp.CodeAction(title=title(move), kind=KIND, data=data, edit=edit)
    return lsp.CodeAction(title=f"{title(move)} (predicted ×{preferred:.2f})", kind=KIND, data=data, edit=edit,
                          is_preferred=True)


def _resolves_edits(ls: DojoServer) -> bool:
    document = ls.client_capabilities.text_document
    action = document.code_action if document else None
    support = action.resolve_support if action else None
    return bool(support and "edit" in support.properties)
