"""Quick-fixes ranked by the learned cost model: every answer, the first after an edit too, in the
order of the model's predicted speed-ups, the best one preferred with its prediction in its title;
the plain list (innermost node first) with the setting off, and when the model cannot be loaded.

The servers rank with the model that comes with PerfDojo (or, for the broken one, a file that is
not a model: tests/lsp/cost_server.py names it), and the test rates the same programs with the same
model and machine facts to know the order to expect."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from agent.costmodel.features import Host
from agent.costmodel.model import SHIPPED, CostModel
from agent.costmodel.rank import rate_moves
from agent.legal import allowed
from codegen.targets import get_target
from dojo_ir import load
from dojo_ir.library import KERNELS
from dojo_ir.moves import find
from runner.roofline import measured_machine
from server.lsp.documents import Snapshot
from server.lsp.features.code_actions import title
from server.lsp.ratings import BUDGET_S, FLOOR_S, rating_deadline
from tests.lsp.conftest import CLIENTS, SETTINGS
from tests.lsp.editor import Editor
from tests.lsp.fixtures import derived_file

COST_SERVER = str(Path(__file__).with_name("cost_server.py"))
NOT_RANKED = "the quick-fixes are not ranked"


def settings(rank: bool) -> dict:
    return {"dojo": {**SETTINGS["dojo"], "agent": {**SETTINGS["dojo"]["agent"], "rankQuickFixes": rank}}}


async def start(lsp_client: LanguageClient, client: str, chosen: dict) -> None:
    lsp_client.set_configuration(chosen)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities(client), initialization_options=chosen["dojo"],
        workspace_folders=[lsp.WorkspaceFolder(uri=Path.cwd().as_uri(), name="perfdojo")]))


@pytest_lsp.fixture(name="ranking", config=ClientServerConfig(server_command=[sys.executable, "-m", "server.lsp"]),
                    params=CLIENTS)
async def ranking_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    await start(lsp_client, request.param, settings(rank=True))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(name="broken", config=ClientServerConfig(server_command=[sys.executable, COST_SERVER]),
                    params=CLIENTS[:1])
async def broken_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """A server whose cost model is a file that is not one."""
    await start(lsp_client, request.param, settings(rank=True))
    yield
    await lsp_client.shutdown_session()


def configure(editor: Editor, rank: bool) -> None:
    """Change the settings as an editor does: the server asks for them when told they changed."""
    editor.client.set_configuration(settings(rank))
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=settings(rank)))


def ratings_of(text: str) -> dict[str, float]:
    """What the shipped cost model predicts of each legal move of the program of `text`, rated here as
    the server rates them."""
    program, target = load(text), get_target("native")
    moves = [m for m in find(program) if allowed(target, m)]
    return rate_moves(CostModel.load(SHIPPED), Host.of(measured_machine(), target), program, moves)


def plain(editor: Editor, uri: str, line: int) -> list[str]:
    """The titles of the quick-fixes at 0-based `line` as listed without ranking: innermost node first."""
    return [title(m) for m in Snapshot(uri, editor.versions[uri], editor.texts[uri]).moves_at(line + 1, line + 1)]


def move_of(action: lsp.CodeAction) -> str:
    return action.title.split(" — ")[1].split(" (predicted ")[0]


def body_lines(editor: Editor, uri: str) -> list[int]:
    return [i for i, line in enumerate(editor.texts[uri].splitlines()) if line[:1].isdigit() or line[:1] == "|"]


def assert_plain(actions: list[lsp.CodeAction], plain_titles: list[str]) -> None:
    assert [a.title for a in actions] == plain_titles and not any(a.is_preferred for a in actions)


def assert_ranked(actions: list[lsp.CodeAction], ratings: dict[str, float], plain_titles: list[str]) -> None:
    """The moves listed without ranking, best rated first (those not rated last), the top one alone
    preferred and titled with its prediction, every other title as without ranking."""
    by_move = {t.split(" — ")[1]: t for t in plain_titles}
    moves = [move_of(a) for a in actions]
    assert sorted(moves) == sorted(by_move)
    rated = [ratings[m] for m in moves if m in ratings]
    assert rated and rated == sorted(rated, reverse=True), list(zip(moves, rated, strict=False))
    assert all(m in ratings for m in moves[:len(rated)]), "a move the model does not rate comes before one it does"
    assert [a.is_preferred for a in actions] == [True] + [None] * (len(actions) - 1)
    assert actions[0].title == f"{by_move[moves[0]]} (predicted ×{ratings[moves[0]]:.2f})"
    assert [a.title for a in actions[1:]] == [by_move[m] for m in moves[1:]]


async def test_the_quick_fixes_follow_the_models_ratings_from_the_first_request(ranking, tmp_path: Path):
    editor = Editor(ranking)
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    ratings = ratings_of(editor.texts[uri])
    assert len(set(ratings.values())) > 1, "a model that rates every move alike cannot show an order"
    reordered = 0
    for line in body_lines(editor, uri):
        actions = await editor.actions(uri, line)
        assert_ranked(actions, ratings, plain(editor, uri, line))
        reordered += [a.title.split(" (predicted ")[0] for a in actions] != plain(editor, uri, line)
    assert reordered, "the ranking changed the order at no line"

    # After a move, the new program's first answer is ranked already, by its own ratings.
    assert await editor.play(uri, (await editor.actions(uri, body_lines(editor, uri)[0]))[0])
    line = body_lines(editor, uri)[0]
    assert_ranked(await editor.actions(uri, line), ratings_of(editor.texts[uri]), plain(editor, uri, line))


async def test_with_the_setting_off_the_quick_fixes_are_in_their_plain_order(ranking, tmp_path: Path):
    editor = Editor(ranking)
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    line = body_lines(editor, uri)[0]
    assert any(a.is_preferred for a in await editor.actions(uri, line))
    configure(editor, rank=False)
    deadline = asyncio.get_running_loop().time() + 30
    while any(a.is_preferred for a in await editor.actions(uri, line)):  # until the server has read the setting
        assert asyncio.get_running_loop().time() < deadline, "the quick-fixes are still ranked with the setting off"
        await asyncio.sleep(0.05)
    assert_plain(await editor.actions(uri, line), plain(editor, uri, line))


async def test_a_model_that_cannot_be_loaded_leaves_the_plain_list_and_says_so_once(broken, tmp_path: Path):
    editor = Editor(broken)
    uris = [editor.open(derived_file(tmp_path, name, KERNELS[name].small())) for name in ("softmax", "relu")]
    for uri in uris:
        for line in body_lines(editor, uri):
            assert_plain(await editor.actions(uri, line), plain(editor, uri, line))
    told = [m for m in broken.log_messages if NOT_RANKED in m.message]
    assert len(told) == 1 and "not-a-model" in told[0].message, told


def test_a_request_rates_for_its_budget_or_until_its_answer_is_due_and_never_less_than_the_floor() -> None:
    assert rating_deadline(10.0, None) == 10.0 + BUDGET_S
    assert rating_deadline(10.0, 11.0) == 10.0 + BUDGET_S  # a warm listing: the whole budget
    assert rating_deadline(10.0, 10.03) == 10.03  # a listing that waited: what is left of the answer's time
    assert rating_deadline(10.0, 9.99) == 10.0 + FLOOR_S  # no time left: still a few ratings, so it comes ranked
