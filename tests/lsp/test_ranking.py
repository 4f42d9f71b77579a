"""Quick-fixes ranked by the learned agent: in the order of its ratings once they are computed in
the background, the best one preferred with its predicted speed-up in its title; the plain list
(innermost node first) before that, with the setting off, and when the agent cannot be loaded.

The servers here rate with an agent trained on the tests' FakeEmbedder (tests/lsp/fake_agent.py
swaps it in for the transformer), and the test rates the same programs with the same agent to
know the order to expect."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from dojo_ir import load
from dojo_ir.library import KERNELS
from server.lsp.documents import Snapshot
from server.lsp.features.code_actions import title
from tests.lsp.conftest import CLIENTS, SETTINGS
from tests.lsp.editor import Editor
from tests.lsp.fixtures import derived_file
from tests.test_perfllm_fakes import FakeEmbedder

FAKE_AGENT = str(Path(__file__).with_name("fake_agent.py"))
DELAY_S = 3.0  # of each rating by the slow server: long enough that asking at once is surely before it
NOT_RANKED = "the quick-fixes are not ranked"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An agent trained for a few small episodes on softmax, on the fake embedding, where a
    parallel scope halves the time and any other move takes 5% off: enough for its ratings to
    differ from move to move, which is what matters here, not what it learned."""
    from agent.perfllm.learner import LearnerConfig
    from agent.perfllm.train import TrainOptions, train

    def cost(moves: list[str]) -> float:
        return 1e-3 * math.prod(0.5 if m.startswith("parallelize_scope") else 0.95 for m in moves)

    out = tmp_path_factory.mktemp("agent")
    options = TrainOptions(episodes=6, max_steps=3, config=LearnerConfig(batch_size=4, hidden=32))
    train([("softmax", load(KERNELS["softmax"].small()))], out, options, embedder=FakeEmbedder(),
          evaluate=lambda name, spec: cost)
    return out


def settings(checkpoint: Path | str, rank: bool) -> dict:
    return {"dojo": {**SETTINGS["dojo"], "agent": {"checkpoint": str(checkpoint), "rankQuickFixes": rank}}}


async def start(lsp_client: LanguageClient, client: str, chosen: dict) -> None:
    lsp_client.set_configuration(chosen)
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities(client), initialization_options=chosen["dojo"],
        workspace_folders=[lsp.WorkspaceFolder(uri=Path.cwd().as_uri(), name="perfdojo")]))


@pytest_lsp.fixture(name="fast", config=ClientServerConfig(server_command=[sys.executable, FAKE_AGENT]),
                    params=CLIENTS)
async def fast_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """Ranking off at first, rating at once."""
    await start(lsp_client, request.param, settings(request.getfixturevalue("checkpoint"), rank=False))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(name="slow", config=ClientServerConfig(
    server_command=[sys.executable, FAKE_AGENT, "--delay", str(DELAY_S)]), params=CLIENTS)
async def slow_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    await start(lsp_client, request.param, settings(request.getfixturevalue("checkpoint"), rank=True))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(name="broken", config=ClientServerConfig(server_command=[sys.executable, "-m", "server.lsp"]),
                    params=CLIENTS)
async def broken_client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """The real server (the transformer, torch loaded in its worker) with a checkpoint that is not one."""
    bad = request.getfixturevalue("tmp_path") / "bad-agent"
    bad.mkdir()
    (bad / "policy.pt").write_bytes(b"not a checkpoint")
    await start(lsp_client, request.param, settings(bad, rank=True))
    yield
    await lsp_client.shutdown_session()


def configure(editor: Editor, checkpoint: Path, rank: bool) -> None:
    """Change the settings as an editor does: the server asks for them when told they changed."""
    editor.client.set_configuration(settings(checkpoint, rank))
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=settings(checkpoint,
                                                                                                        rank)))


def ratings_of(checkpoint: Path, text: str) -> dict[str, float]:
    """What the agent predicts of each legal move of the program of `text`, rated here as the server does."""
    from agent.legal import legal_moves
    from agent.perfllm.rating import Rater

    program = load(text)
    moves = legal_moves(program)
    return dict(zip(map(str, moves), Rater(checkpoint, FakeEmbedder()).rate(program, moves), strict=True))


def plain(editor: Editor, uri: str, line: int) -> list[str]:
    """The titles of the quick-fixes at 0-based `line` as listed without the agent: innermost node first."""
    return [title(m) for m in Snapshot(uri, editor.versions[uri], editor.texts[uri]).moves_at(line + 1, line + 1)]


def move_of(action: lsp.CodeAction) -> str:
    return action.title.split(" — ")[1].split(" (agent: ")[0]


def body_lines(editor: Editor, uri: str) -> list[int]:
    return [i for i, line in enumerate(editor.texts[uri].splitlines()) if line[:1].isdigit() or line[:1] == "|"]


async def ranked(editor: Editor, uri: str, line: int, timeout: float = 60.0) -> list[lsp.CodeAction]:
    """The quick-fixes at `line` once the agent has rated the document's version."""
    deadline = time.monotonic() + timeout
    while True:
        found = await editor.actions(uri, line)
        if any(a.is_preferred for a in found):
            return found
        assert time.monotonic() < deadline, f"the quick-fixes at line {line + 1} were never ranked"
        await asyncio.sleep(0.1)


def assert_plain(actions: list[lsp.CodeAction], plain_titles: list[str]) -> None:
    assert [a.title for a in actions] == plain_titles and not any(a.is_preferred for a in actions)


def assert_ranked(actions: list[lsp.CodeAction], ratings: dict[str, float], plain_titles: list[str]) -> None:
    """The moves listed without the agent, best rated first (those it does not rate last), the top
    one alone preferred and titled with its prediction, every other title as without the agent."""
    by_move = {t.split(" — ")[1]: t for t in plain_titles}
    moves = [move_of(a) for a in actions]
    assert sorted(moves) == sorted(by_move)
    rated = [ratings[m] for m in moves if m in ratings]
    assert rated and rated == sorted(rated, reverse=True), list(zip(moves, rated, strict=False))
    assert all(m in ratings for m in moves[:len(rated)]), "a move the agent does not rate comes before one it does"
    assert [a.is_preferred for a in actions] == [True] + [None] * (len(actions) - 1)
    assert actions[0].title == f"{by_move[moves[0]]} (agent: ×{ratings[moves[0]]:.1f})"
    assert [a.title for a in actions[1:]] == [by_move[m] for m in moves[1:]]


async def test_the_quick_fixes_follow_the_agents_ratings_and_the_best_is_preferred(fast, checkpoint: Path,
                                                                                  tmp_path: Path):
    editor = Editor(fast)
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    configure(editor, checkpoint, rank=True)
    ratings = ratings_of(checkpoint, editor.texts[uri])
    assert len(set(ratings.values())) > 1, "an agent that rates every move alike cannot show an order"
    await ranked(editor, uri, body_lines(editor, uri)[0])
    reordered = 0
    for line in body_lines(editor, uri):
        actions = await editor.actions(uri, line)
        assert_ranked(actions, ratings, plain(editor, uri, line))
        reordered += [a.title.split(" (agent: ")[0] for a in actions] != plain(editor, uri, line)
    assert reordered, "the ranking changed the order at no line"


async def plain_then_ranked(editor: Editor, uri: str, line: int, checkpoint: Path) -> None:
    """The quick-fixes at `line` come at once in their plain order, and later ranked."""
    started = time.monotonic()
    first = await editor.actions(uri, line)
    assert time.monotonic() - started < DELAY_S / 2, "the request waited for the agent"
    assert_plain(first, plain(editor, uri, line))
    assert_ranked(await ranked(editor, uri, line), ratings_of(checkpoint, editor.texts[uri]), plain(editor, uri, line))


async def test_the_plain_list_is_answered_before_the_ratings_are_ready(slow, checkpoint: Path, tmp_path: Path):
    editor = Editor(slow)
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    line = body_lines(editor, uri)[0]
    await plain_then_ranked(editor, uri, line, checkpoint)
    # A comment is not the program: its ratings are there at once.
    editor.replace(uri, editor.texts[uri] + "# a comment\n")
    assert any(a.is_preferred for a in await editor.actions(uri, line))

    # Another program is rated anew, and meanwhile listed as it is without the agent.
    top = (await editor.actions(uri, line))[0]
    assert await editor.play(uri, top)
    await plain_then_ranked(editor, uri, body_lines(editor, uri)[0], checkpoint)


async def test_with_the_setting_off_the_quick_fixes_are_as_without_the_agent(fast, checkpoint: Path,
                                                                            tmp_path: Path):
    editor = Editor(fast)
    uri = editor.open(derived_file(tmp_path, "softmax", KERNELS["softmax"].small()))
    line = body_lines(editor, uri)[0]
    assert_plain(await editor.actions(uri, line), plain(editor, uri, line))
    configure(editor, checkpoint, rank=True)
    started = time.monotonic()
    await ranked(editor, uri, line)
    took = time.monotonic() - started

    configure(editor, checkpoint, rank=False)
    deadline = time.monotonic() + 30
    while any(a.is_preferred for a in await editor.actions(uri, line)):  # until the server has read the setting
        assert time.monotonic() < deadline, "the quick-fixes are still ranked with the setting off"
        await asyncio.sleep(0.05)
    assert_plain(await editor.actions(uri, line), plain(editor, uri, line))
    # Nor is another program rated: the agent, loaded now, would have rated it well within that time.
    assert await editor.play(uri, (await editor.actions(uri, line))[0])
    assert await editor.diagnostics(uri) == []
    line = body_lines(editor, uri)[0]
    deadline = time.monotonic() + max(2 * took, 1.0)
    while time.monotonic() < deadline:
        assert_plain(await editor.actions(uri, line), plain(editor, uri, line))
        await asyncio.sleep(0.1)


async def test_an_agent_that_cannot_be_loaded_leaves_the_plain_list_and_says_so_once(broken, tmp_path: Path):
    editor = Editor(broken)
    uris = [editor.open(derived_file(tmp_path, name, KERNELS[name].small())) for name in ("softmax", "relu")]

    async def told() -> None:
        while not any(NOT_RANKED in m.message for m in broken.log_messages):
            await broken.wait_for_notification(lsp.WINDOW_LOG_MESSAGE)

    await asyncio.wait_for(told(), 60)
    for uri in uris:
        for line in body_lines(editor, uri):
            assert_plain(await editor.actions(uri, line), plain(editor, uri, line))
    editor.replace(uris[1], editor.texts[uris[1]] + "# a comment\n")
    await editor.diagnostics(uris[1])
    await editor.actions(uris[1], body_lines(editor, uris[1])[0])
    told_once = [m for m in broken.log_messages if NOT_RANKED in m.message]
    assert len(told_once) == 1 and "bad-agent" in told_once[0].message, told_once
