"""Soak: a thousand rapid random edits of a library kernel, with code actions
listed and resolved on the way without waiting for the edits to settle.

The edits replace, insert and delete whole lines (ranges from column 0 to
column 0, so no column depends on the position encoding the client and server
agreed on): a line replaced by a valid variant of itself, a line with garbage
spliced in (printable characters, unbalanced brackets, "λ", "😀", tabs, CRLF,
form feeds and other characters that `str.splitlines` takes for line ends but
LSP does not) or a line of garbage inserted, an empty line inserted, a line
deleted, and the original text restored.

Every ~20 edits a code-action request is sent at a random line, and, when its
answer comes, one action is resolved and applied, while the edits go on. A
resolve that arrives after the document changed must be refused with
ContentModified; an edit that arrives after the editor moved on is refused by
the editor (versioned edits) or not applied (unversioned edits are applied only
to the version the list was made for, as nothing else could be right); an
applied edit must give exactly the text the move gives on the text the list was
made for. At the end the server answers, its diagnostics for the final version
equal `dojo_ir.diagnose` of the editor's text, and formatting a valid text
computed from the server's copy, applied to the editor's, gives the canonical
text: the two copies never diverged.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from dojo_ir import diagnose, load, to_text
from dojo_ir.derivation import advance
from dojo_ir.library import KERNELS
from server.lsp.edits import lines_of
from tests.lsp.editor import apply_text_edits

KERNEL = "layernorm1"
EDITS = 1000
SEED = 20251122
PRINTABLE = string.printable + "\x85\u2028\x1c"
GARBAGE = [*"([{)]}", "λ", "😀", "\t", "\r\n", "", "((", "]]", "{0", "|", "#"]


def errors(text: str) -> list[tuple[int, str]]:
    return [(d.span.line - 1, d.message) for d in diagnose(text)[1] if d.severity == "error"]


def variant(line: str, rng: random.Random) -> str:
    """Another valid form of a line: a trailing comment, another constant, or `+` and `-` swapped."""
    numbers = list(re.finditer(r"(?<![\w{\[,:])\d+\.\d+|1e-5", line))
    choice = rng.randrange(3)
    if choice == 1 and numbers and not line.lstrip().startswith("#"):
        match = rng.choice(numbers)
        return line[: match.start()] + f"{rng.randint(1, 9)}.{rng.randint(0, 99)}" + line[match.end():]
    if choice == 2 and " + " in line and not line.lstrip().startswith("#"):
        return line.replace(" + ", " - ", 1)
    return f"{line} # note {rng.randint(0, 999)}"


def garbage(rng: random.Random) -> str:
    pieces = [rng.choice(GARBAGE) if rng.random() < 0.4 else rng.choice(PRINTABLE) for _ in range(rng.randint(1, 12))]
    return "".join(pieces)


class Soak:
    def __init__(self, editor, uri: str, original: str):
        self.editor, self.uri, self.original = editor, uri, original
        self.counts = {"listed": 0, "no actions": 0, "refused by server": 0, "refused by editor": 0,
                       "stale, not applied": 0, "applied": 0}

    @property
    def text(self) -> str:
        return self.editor.texts[self.uri]

    def lines(self) -> list[str]:
        return lines_of(self.text)

    def replace_line(self, index: int, new_text: str) -> None:
        at = lsp.Range(start=lsp.Position(line=index, character=0), end=lsp.Position(line=index + 1, character=0))
        self.editor.edit(self.uri, [lsp.TextEdit(range=at, new_text=new_text)])

    def random_edit(self, rng: random.Random) -> None:
        lines = self.lines()
        kind = rng.choices(["variant", "splice", "insert", "empty", "delete", "restore"], [35, 20, 12, 5, 13, 15])[0]
        if kind == "restore" or not lines:
            self.editor.replace(self.uri, self.original)
            return
        index = rng.randrange(len(lines))
        body, end = lines[index].rstrip("\r\n"), lines[index][len(lines[index].rstrip("\r\n")):]
        if kind == "variant":
            self.replace_line(index, variant(body, rng) + (end or ""))
        elif kind == "splice":
            cut = rng.randint(0, len(body))
            self.replace_line(index, body[:cut] + garbage(rng) + body[cut:] + end)
        elif kind == "insert":
            self.replace_line(index, garbage(rng) + "\n" + lines[index])
        elif kind == "empty":
            self.replace_line(index, rng.choice(["\n", "\r\n", "\t\n"]) + lines[index])
        else:
            self.replace_line(index, "")

    async def act(self, rng: random.Random, type_meanwhile: bool = False) -> None:
        """List the actions at a random line, then resolve one and apply it, while edits go on;
        `type_meanwhile`: one more edit is sent right after the resolve request, before its answer."""
        version, text = self.editor.versions[self.uri], self.text
        lines = self.lines()
        body = [i for i, each in enumerate(lines) if each[:1].isdigit()]  # where most moves are
        line = rng.choice(body) if body and rng.random() < 0.7 else rng.randrange(max(len(lines), 1))
        actions = await self.editor.actions(self.uri, line)
        if not actions:
            self.counts["no actions"] += 1
            return
        self.counts["listed"] += 1
        action = rng.choice(actions)
        assert action.data["version"] == version, (action.data, version)  # listed for the version it was asked for
        if action.edit is None:
            resolving = asyncio.ensure_future(self.editor.client.code_action_resolve_async(action))
            if type_meanwhile:
                await asyncio.sleep(0)  # the request is sent
                self.random_edit(rng)
            try:
                action = await resolving
            except JsonRpcException as error:
                # pygls's client does not map this code to JsonRpcContentModified: check the code
                if error.code != lsp.LSPErrorCodes.ContentModified:
                    raise
                assert self.editor.versions[self.uri] != version, "refused although the document had not changed"
                self.counts["refused by server"] += 1
                return
        edit = action.edit
        assert edit is not None
        if edit.document_changes:
            assert [c.text_document.version for c in edit.document_changes] == [version]
            if not self.editor.apply(edit):
                assert self.editor.versions[self.uri] != version
                self.counts["refused by editor"] += 1
                return
        else:
            # unversioned edits (Neovim's capabilities): the editor must apply them only to their version
            if self.editor.versions[self.uri] != version:
                self.counts["stale, not applied"] += 1
                return
            assert self.editor.apply(edit)
        self.counts["applied"] += 1
        expected = to_text(advance(load(text), [action.data["move"]]))
        assert self.text == expected, (action.title, text, self.text)
        assert errors(self.text) == []


async def test_soak(editor, tmp_path: Path):
    started = time.perf_counter()
    rng = random.Random(SEED)
    original = KERNELS[KERNEL].small()
    path = tmp_path / f"{KERNEL}.dojo"
    path.write_text(original)
    uri = editor.open(path)
    assert await editor.diagnostics(uri) == []
    soak = Soak(editor, uri, original)
    pending: list[asyncio.Task] = []
    for k in range(1, EDITS + 1):
        soak.random_edit(rng)
        if k % 20 == 0:
            pause = rng.random() < 0.4  # the user pauses: the action is resolved and applied before the next edit
            if pause or rng.random() < 0.5:  # often valid when asked, so that there are actions to race with
                editor.replace(uri, original)
            # the action's own generator: how the answers interleave with the edits must not change the edits
            act = soak.act(random.Random(rng.random()), type_meanwhile=pause and rng.random() < 0.4)
            pending.append(asyncio.ensure_future(act))
            if pause:
                await pending[-1]
        await asyncio.sleep(rng.choice([0, 0, 0, 0.001, 0.002]))
    await asyncio.gather(*pending)  # a failed assertion or an unexpected server error surfaces here

    # The server is alive and its diagnostics of the final version are the checker's of the editor's text.
    final = editor.texts[uri]
    published = await editor.diagnostics(uri)
    assert [(d.range.start.line, d.message) for d in published] == [
        (d.span.line - 1, d.message) for d in diagnose(final)[1]]
    await editor.actions(uri, 0)

    # The server's copy is the editor's: make the text valid by deleting the lines in error (as a user
    # would), un-format one line, and format it with edits computed from the server's copy.
    for _ in range(30):
        wrong = sorted({line for line, _ in errors(editor.texts[uri])}, reverse=True)
        if not wrong:
            break
        for line in wrong:
            soak.replace_line(line, "")
    if errors(editor.texts[uri]):
        editor.replace(uri, original)
    lines = soak.lines()
    body = next(i for i, line in enumerate(lines) if line[:1].isdigit())
    soak.replace_line(body, lines[body].replace(" ", "   ", 1))
    assert await editor.diagnostics(uri) == []
    text = editor.texts[uri]
    edits = await editor.client.text_document_formatting_async(lsp.DocumentFormattingParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), options=lsp.FormattingOptions(tab_size=4,
                                                                                        insert_spaces=True)))
    assert edits, "the un-formatted line was not formatted"
    assert apply_text_edits(text, edits) == to_text(load(text))

    counts = soak.counts
    print(f"{editor.client.capabilities.workspace.workspace_edit.document_changes=} {counts} "
          f"refused by the editor in all: {editor.refused_edits}; {time.perf_counter() - started:.1f} s")
    assert counts["listed"] > 0 and counts["applied"] > 0, counts
    assert editor.refused_edits == counts["refused by editor"]
