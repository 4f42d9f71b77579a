"""Latency of the language server as an editor feels it: a real `dojo-lsp` process over stdio.

The server is started as the editor starts it (`python -m server.lsp`) and driven by pytest-lsp's
client with the captured capabilities of VS Code (code actions resolved lazily, versioned workspace
edits) and `measure.automatic` off, so no background measurement competes. Every figure is the
client-side wall time from sending a message to receiving its answer: JSON-RPC, the server's event
loop and the work itself.

- code actions: each of the 16 library kernels at its default (paper) shape, plus the derived
  examples examples/softmax.dojo and examples/matmul.dojo, is opened, then `textDocument/codeAction`
  is requested with a zero-width range at column 0 of every line, ROUNDS rounds, one request at a
  time. The first request after `didOpen` is sent at once, so it is cold: it pays for parsing,
  checking and listing every legal move of the new version. The others are warm (the version's moves
  are kept). Per file: median and p95 of the warm requests and the cold one; overall p95 over every
  request, cold ones included. The server's process-wide caches (lines, index forms, dependence
  questions) carry over from one file to the next, as in an editing session. Bar: p95 < 100 ms.
- diagnostics after an edit: the 200-line kernel of bench/parse_speed.py is opened, then EDITS
  one-line edits are sent (each a `didChange` with the whole text, as the server asks),
  alternately breaking a body line (an unbalanced parenthesis) and repairing it with another
  constant; each is timed until the
  `publishDiagnostics` carrying its version arrives (the server's 5 ms debounce included), and the
  count of diagnostics is checked (1, then 0). Bar: median and p95 < 50 ms.
- resolve: `codeAction/resolve` (applying the move, printing, diffing into line edits) for the
  actions listed at body lines of the 200-line file, of the library's softmax and of
  examples/softmax.dojo, up to RESOLVES per file; median.
- under load: a 4,004-line kernel (BIG_OPERATIONS operations, seconds to check) is opened, and
  while it is checked (off the event loop) `documentSymbol` of a small kernel is asked
  UNDER_LOAD times; each answer is timed, and whether it came before the big kernel's diagnostics
  is counted.

The sections above run with `agent.rankQuickFixes` off. Then a second server with it on (the
shipped cost model) measures code actions ranked by the cost model, which rates the moves at the
cursor in the request (each applied, featurised and scored):

- each file above is opened and asked, right after `didOpen`, for code actions at its line with the
  most of them (the first request: parse, check, list, load the model for the first file, rate),
  then at every line, ROUNDS rounds; every answer must come ranked. Bar: p95 < 100 ms.
- right after an edit: the 200-line file is opened, then EDITS_THEN_ACTIONS valid one-line edits
  come, each followed at once by a request at the edited line (a new version: listed and rated
  anew) and OTHERS more at other lines; the same on the first server, without the ranking. The
  answers that came ranked are counted.

Percentiles are nearest-rank. The machine's load average is recorded: other work on it is the main
source of noise. Prints the report and writes bench/results/lsp_speed.md.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pytest_lsp import LanguageClient, client_capabilities, make_test_lsp_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.parse_speed import two_hundred_lines  # noqa: E402
from bench.sections import machine  # noqa: E402
from dojo_ir import load  # noqa: E402
from dojo_ir.analysis import Analysis  # noqa: E402
from dojo_ir.library import KERNELS  # noqa: E402
from dojo_ir.moves import find  # noqa: E402
from server.lsp.documents import Snapshot  # noqa: E402
from server.lsp.features.code_actions import FIRST_ANSWER_S  # noqa: E402

ROUNDS = 5
EDITS = 100
BIG_OPERATIONS, UNDER_LOAD = 2000, 10
RESOLVES = 30
EXAMPLES = ("softmax", "matmul")
ACTIONS_BAR_MS, DIAGNOSTICS_BAR_MS = 100.0, 50.0
EDITS_THEN_ACTIONS, OTHERS = 10, 20
UNRANKED = {"measure": {"automatic": False}, "agent": {"rankQuickFixes": False}}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def ranked(found: list[lsp.CodeAction]) -> bool:
    """Whether the cost model's ranking ordered these code actions (the best one is then preferred)."""
    return any(a.is_preferred for a in found)


def legal_moves(text: str) -> int:
    program = load(text)
    return len(find(program, Analysis(program)))


class Session:
    """One server process and what the bench needs of the client: versioned diagnostics with arrival times."""

    def __init__(self, client: LanguageClient):
        self.client = client
        self.waiting: dict[tuple[str, int], asyncio.Future] = {}
        client.feature(lsp.WORKSPACE_INLAY_HINT_REFRESH)(lambda params: None)
        client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = self._published

    def _published(self, params: lsp.PublishDiagnosticsParams) -> None:
        arrived = time.perf_counter()
        future = self.waiting.pop((params.uri, params.version), None)
        if future is not None and not future.done():
            future.set_result((arrived, list(params.diagnostics)))

    def expect(self, uri: str, version: int) -> asyncio.Future:
        future = self.waiting[(uri, version)] = asyncio.get_running_loop().create_future()
        return future

    async def open(self, path: Path, text: str) -> tuple[str, asyncio.Future]:
        uri = path.as_uri()
        published = self.expect(uri, 1)
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="dojo", version=1, text=text)))
        return uri, published

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(lsp.DidCloseTextDocumentParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri)))

    async def actions(self, uri: str, line: int) -> tuple[float, list[lsp.CodeAction]]:
        at = lsp.Position(line=line, character=0)
        started = time.perf_counter()
        found = await self.client.text_document_code_action_async(lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), range=lsp.Range(start=at, end=at),
            context=lsp.CodeActionContext(diagnostics=[])))
        return time.perf_counter() - started, [a for a in found or [] if isinstance(a, lsp.CodeAction)]

    async def resolve(self, action: lsp.CodeAction) -> float:
        started = time.perf_counter()
        resolved = await self.client.code_action_resolve_async(action)
        elapsed = time.perf_counter() - started
        assert resolved.edit is not None and resolved.edit.document_changes, resolved
        return elapsed


async def code_actions(session: Session, name: str, path: Path, text: str) -> dict:
    uri, published = await session.open(path, text)
    lines = len(text.splitlines())
    cold, _ = await session.actions(uri, 0)  # sent right after didOpen: parse, check, list the moves
    await published
    warm, offered = [], 0
    for _ in range(ROUNDS):
        for line in range(lines):
            elapsed, found = await session.actions(uri, line)
            warm.append(elapsed)
            offered = max(offered, len(found))
    session.close(uri)
    return {"name": name, "lines": lines, "moves": legal_moves(text), "most": offered, "cold": cold,
            "warm": warm, "median": statistics.median(warm), "p95": percentile(warm, 0.95)}


async def diagnostics_after_edits(session: Session, path: Path, text: str) -> tuple[list[float], str]:
    uri, published = await session.open(path, text)
    arrived, found = await published
    assert found == [], found[:3]
    lines = text.splitlines()
    targets = [i for i, line in enumerate(lines) if "0.5" in line]
    base = {i: lines[i] for i in targets}
    samples, version = [], 1
    for k in range(EDITS):
        line = targets[(k // 2) % len(targets)]
        # even: break the line (an unbalanced parenthesis); odd: repair it with another constant
        new = base[line].replace("0.5", "(0.5") if k % 2 == 0 else base[line].replace("0.5", f"0.{k + 100}")
        lines[line] = new
        version += 1
        waiting = session.expect(uri, version)
        started = time.perf_counter()
        session.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text="\n".join(lines) + "\n")]))
        arrived, found = await asyncio.wait_for(waiting, 10)
        samples.append(arrived - started)
        assert len(found) == (1 if k % 2 == 0 else 0), (k, [d.message for d in found])
    session.close(uri)
    return samples, "\n".join(lines) + "\n"


async def actions_after_edits(session: Session, path: Path, text: str) -> dict:
    """After each of EDITS valid one-line edits, a code-action request at once at the edited line (a new
    version: its moves are listed anew), then OTHERS more at other lines; how many answers came ranked."""
    uri, published = await session.open(path, text)
    await published
    lines = text.splitlines()
    targets = [i for i, line in enumerate(lines) if "0.5" in line]
    first, others, answered_ranked, complete = [], [], 0, 0
    for k in range(EDITS_THEN_ACTIONS):
        line = targets[k % len(targets)]
        lines[line] = lines[line].replace("0.5", f"0.{k + 600}", 1)
        session.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=k + 2),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text="\n".join(lines) + "\n")]))
        elapsed, at_once = await session.actions(uri, line)
        first.append(elapsed)
        answered_ranked += ranked(at_once)
        for j in range(1, OTHERS + 1):
            elapsed, found = await session.actions(uri, (line + 9 * j) % len(lines))
            others.append(elapsed)
            answered_ranked += ranked(found)
        _, every = await session.actions(uri, line)  # by now the listing at the edited line is complete
        assert every and {a.data["move"] for a in at_once} <= {a.data["move"] for a in every}, line
        complete += len(at_once) == len(every)
    session.close(uri)
    return {"first": first, "others": others, "ranked": answered_ranked, "complete": complete}


def chain(operations: int) -> str:
    """A valid kernel of `operations` operations, each on its own two scopes: 2 lines each."""
    lines = [f"kernel chain(x) -> y{operations - 1}", "", "x f32 [64, 32] heap"]
    lines += [f"y{i} f32 [64, 32] heap" for i in range(operations)]
    lines.append("")
    previous = "x"
    for i in range(operations):
        lines.append(f"64 32 y{i}[{{0}},{{1}}] = exp({previous}[{{0}},{{1}}])")
        previous = f"y{i}"
    return "\n".join(lines) + "\n"


async def under_load(session: Session, scratch: Path) -> dict:
    """`documentSymbol` of a small kernel while a big one is checked: the times, and how many
    answers came before the big kernel's diagnostics."""
    small, published = await session.open(scratch / "relu.dojo", KERNELS["relu"].small())
    await published
    big, checked = await session.open(scratch / "big.dojo", chain(BIG_OPERATIONS))
    opened = time.perf_counter()
    samples, before = [], 0
    for _ in range(UNDER_LOAD):
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        await session.client.text_document_document_symbol_async(lsp.DocumentSymbolParams(
            text_document=lsp.TextDocumentIdentifier(uri=small)))
        samples.append(time.perf_counter() - started)
        before += not checked.done()
    arrived, _ = await checked
    session.close(big)
    session.close(small)
    return {"samples": samples, "before": before, "check_s": arrived - opened}


async def resolves(session: Session, path: Path, text: str) -> tuple[float, int]:
    uri, published = await session.open(path, text)
    await published
    body = [i for i, line in enumerate(text.splitlines()) if line[:1].isdigit() or line.startswith("|")]
    picked: list[lsp.CodeAction] = []
    step = max(len(body) // RESOLVES, 1)
    for line in body[::step]:
        _, found = await session.actions(uri, line)
        picked += found[:2]
    samples = [await session.resolve(action) for action in picked[:RESOLVES]]
    session.close(uri)
    return statistics.median(samples), len(samples)


async def ranked_actions(session: Session, name: str, path: Path, text: str) -> dict:
    lines = len(text.splitlines())
    probe = max(range(lines), key=lambda line: len(Snapshot(path.as_uri(), 1, text).moves_at(line + 1, line + 1)))
    uri, published = await session.open(path, text)
    first, found = await session.actions(uri, probe)  # right after didOpen: nothing ready but the text
    await published
    warm, first_ranked, offered = [], ranked(found), len(found)
    answered_ranked = int(first_ranked)
    for _ in range(ROUNDS):
        for line in range(lines):
            elapsed, found = await session.actions(uri, line)
            warm.append(elapsed)
            answered_ranked += ranked(found) or not found
    session.close(uri)
    return {"name": name, "lines": lines, "most": offered, "first": first, "first_ranked": first_ranked,
            "warm": warm, "ranked": answered_ranked, "requests": 1 + len(warm),
            "median": statistics.median(warm), "p95": percentile(warm, 0.95)}


async def start_server(options: dict) -> tuple[LanguageClient, Session]:
    client = make_test_lsp_client()
    session = Session(client)
    await client.start_io(sys.executable, "-m", "server.lsp", cwd=str(ROOT))
    await client.initialize_session(lsp.InitializeParams(
        capabilities=client_capabilities("visual_studio_code"), initialization_options=options,
        workspace_folders=[lsp.WorkspaceFolder(uri=ROOT.as_uri(), name="perfdojo")]))
    return client, session


async def stop_server(client: LanguageClient) -> None:
    await client.shutdown_session()
    await client.stop()


def bench_files(scratch: Path) -> list[tuple[str, Path, str]]:
    """(name, path, text) of the files whose code actions are timed; the library's kernels are named under
    `scratch` (the server reads only what it is sent)."""
    files = [(name, scratch / f"{name}.dojo", kernel.text()) for name, kernel in KERNELS.items()]
    files += [(f"examples/{name}.dojo", ROOT / "examples" / f"{name}.dojo",
               (ROOT / "examples" / f"{name}.dojo").read_text()) for name in EXAMPLES]
    files.append(("200-line file (bench/parse_speed.py)", scratch / "chain200.dojo", two_hundred_lines()))
    return files


async def run() -> dict:
    client, session = await start_server(UNRANKED)
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            files = bench_files(Path(scratch))
            rows = [await code_actions(session, name, path, text) for name, path, text in files]
            big = Path(scratch) / "chain200.dojo"
            edit_samples, edited = await diagnostics_after_edits(session, big, two_hundred_lines())
            after_edits = await actions_after_edits(session, big, two_hundred_lines())
            loaded = await under_load(session, Path(scratch))
            resolve_rows = [("200-line file (bench/parse_speed.py)", *await resolves(session, big, edited)),
                            ("library softmax spec", *await resolves(session, Path(scratch) / "softmax.dojo",
                                                                    KERNELS["softmax"].text())),
                            ("examples/softmax.dojo", *await resolves(session, ROOT / "examples" / "softmax.dojo",
                                                                     (ROOT / "examples" / "softmax.dojo").read_text()))]
    finally:
        await stop_server(client)
    client, session = await start_server({**UNRANKED, "agent": {"rankQuickFixes": True}})
    try:
        with tempfile.TemporaryDirectory() as scratch:
            ranked_rows = [await ranked_actions(session, name, path, text)
                           for name, path, text in bench_files(Path(scratch))]
            # another program than the one rated above, whose ratings the server keeps
            unrated = two_hundred_lines().replace("0.5", "0.25", 1)
            ranked_after = await actions_after_edits(session, Path(scratch) / "chain200.dojo", unrated)
    finally:
        await stop_server(client)
    return {"rows": rows, "edits": edit_samples, "resolves": resolve_rows, "after_edits": after_edits,
            "under_load": loaded,
            "ranked_rows": ranked_rows, "ranked_after": ranked_after,
            "load": (load_before, os.getloadavg())}


def report(figures: dict) -> str:
    rows, edits, first = figures["rows"], figures["edits"], figures["after_edits"]["first"]
    loaded = figures["under_load"]
    every = [r["cold"] for r in rows] + [s for r in rows for s in r["warm"]]
    colds = [r["cold"] for r in rows]
    overall = percentile(every, 0.95) * 1000
    edit_median, edit_p95 = statistics.median(edits) * 1000, percentile(edits, 0.95) * 1000
    before, after = figures["load"]
    out = ["# Language server latency", "",
           "`python bench/lsp_speed.py`: a real `dojo-lsp` process on stdio, driven by pytest-lsp's client with "
           "VS Code's capabilities, the cost model's ranking of the quick-fixes off (it has its own section at the "
           "end); "
           "client-side wall time per request. Code actions: a zero-width range at column 0 "
           f"of every line, {ROUNDS} rounds, one request at a time; cold = the request sent right after `didOpen` "
           "(parse, check and list every legal move); warm = the others. Nearest-rank percentiles.", "",
           f"Load average (1, 5, 15 min) at the start: {before[0]:.2f}, {before[1]:.2f}, {before[2]:.2f}; "
           f"at the end: {after[0]:.2f}, {after[1]:.2f}, {after[2]:.2f} ({os.cpu_count()} CPUs). Machine: "
           f"{machine()}. The machine is shared: other people's builds, tests and benchmarks ran on it meanwhile, "
           "so the times are upper bounds of the server's own.", "",
           "## `textDocument/codeAction`", "",
           "| file | lines | legal moves | most actions at a line | warm median | warm p95 | cold |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['lines']} | {r['moves']} | {r['most']} | {r['median'] * 1000:.2f} ms "
                   f"| {r['p95'] * 1000:.2f} ms | {r['cold'] * 1000:.1f} ms |")
    out += ["", f"Over all {len(every)} requests: median {statistics.median(every) * 1000:.2f} ms, "
                f"p95 **{overall:.2f} ms**, max {max(every) * 1000:.1f} ms; cold requests: median "
                f"{statistics.median(colds) * 1000:.1f} ms, max {max(colds) * 1000:.1f} ms. "
                f"Bar p95 < {ACTIONS_BAR_MS:.0f} ms: **{'met' if overall < ACTIONS_BAR_MS else 'NOT met'}**.", "",
            "## Diagnostics after a one-line edit of a 200-line file", "",
            f"{len(edits)} `didChange`s (whole text) editing one body line, alternately breaking it and repairing it; "
            "time from sending the change to receiving the `publishDiagnostics` of its version (5 ms debounce "
            "included).", "",
            "| edits | median | p95 | max |", "|---|---|---|---|",
            f"| {len(edits)} | {edit_median:.1f} ms | {edit_p95:.1f} ms | {max(edits) * 1000:.1f} ms |", "",
            f"Bar < {DIAGNOSTICS_BAR_MS:.0f} ms (p95): **{'met' if edit_p95 < DIAGNOSTICS_BAR_MS else 'NOT met'}**.",
            "", "## The first `textDocument/codeAction` after a one-line edit of the 200-line file", "",
            f"{len(first)} valid edits (another constant), each followed at once by a code-action "
            "request at the edited line: the new version is checked and its moves at the line listed anew, off "
            "the server's event loop, which answers other requests meanwhile. The answer comes within "
            f"{FIRST_ANSWER_S * 1000:.0f} ms of the check with the moves found legal by then (innermost node first), "
            "and the listing goes on for the next request: "
            f"{figures['after_edits']['complete']} of {len(first)} first answers had every move.", "",
            "| requests | median | p95 | max |", "|---|---|---|---|",
            f"| {len(first)} | {statistics.median(first) * 1000:.0f} ms "
            f"| {percentile(first, 0.95) * 1000:.0f} ms | {max(first) * 1000:.0f} ms |", "",
            f"Bar median < {ACTIONS_BAR_MS:.0f} ms: "
            f"**{'met' if statistics.median(first) * 1000 < ACTIONS_BAR_MS else 'NOT met'}**.",
            "", "## A small document's requests while a big one is checked", "",
            f"A {len(chain(BIG_OPERATIONS).splitlines()):,}-line kernel is opened; while it is parsed and checked "
            f"(its diagnostics came {loaded['check_s']:.1f} s after `didOpen`), `documentSymbol` of the library's "
            f"small relu is asked {len(loaded['samples'])} times, 50 ms apart. The check runs in a thread of its "
            "own and shares the interpreter's lock with the event loop.", "",
            "| requests | median | max | answered before the big kernel's diagnostics |", "|---|---|---|---|",
            f"| {len(loaded['samples'])} | {statistics.median(loaded['samples']) * 1000:.1f} ms "
            f"| {max(loaded['samples']) * 1000:.1f} ms | {loaded['before']} |",
            "", "## `codeAction/resolve` (the edit of one move)", "",
            "| file | resolves | median |", "|---|---|---|"]
    for name, median, count in figures["resolves"]:
        out.append(f"| {name} | {count} | {median * 1000:.1f} ms |")
    return "\n".join(out + ranked_report(figures)) + "\n"


def ranked_report(figures: dict) -> list[str]:
    rows = figures["ranked_rows"]
    every = [r["first"] for r in rows] + [s for r in rows for s in r["warm"]]
    overall = percentile(every, 0.95) * 1000
    requests, answered_ranked = sum(r["requests"] for r in rows), sum(r["ranked"] for r in rows)
    out = ["", "## `textDocument/codeAction` ranked by the cost model", "",
           "A second server with `dojo.agent.rankQuickFixes` on: the shipped cost model rates each move at the "
           "cursor in the request (applied, featurised, scored; ratings kept by program). First: the request sent "
           "right after `didOpen`, at the file's line with the most actions (parse, check, list, rate; the first "
           f"file's loads the model). Then every line, {ROUNDS} rounds, as above.", "",
           "| file | lines | most actions at a line | first (ranked?) | warm median | warm p95 |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['lines']} | {r['most']} | {r['first'] * 1000:.1f} ms "
                   f"({'yes' if r['first_ranked'] else 'no'}) | {r['median'] * 1000:.2f} ms "
                   f"| {r['p95'] * 1000:.2f} ms |")
    out += ["", f"Over all {len(every)} requests, the first ones included: median "
                f"{statistics.median(every) * 1000:.2f} ms, p95 **{overall:.2f} ms**, "
                f"max {max(every) * 1000:.1f} ms; {answered_ranked} of {requests} answers ranked (a line with no "
                "move has nothing to rank). "
                f"Bar p95 < {ACTIONS_BAR_MS:.0f} ms: **{'met' if overall < ACTIONS_BAR_MS else 'NOT met'}**.", "",
            "### Right after an edit", "",
            f"The 200-line file, {EDITS_THEN_ACTIONS} valid one-line edits; after each, a request at once at the "
            f"edited line (its new version's moves listed and rated anew) and {OTHERS} more at other lines, without "
            "the ranking (the first server) and with it.", "",
            "| ranking | requests | median | p95 | max | answers ranked |", "|---|---|---|---|---|---|"]
    for ranking, after in (("off", figures["after_edits"]), ("on", figures["ranked_after"])):
        for which, samples in (("first after the edit", after["first"]), ("the next ones", after["others"]),
                               ("all", after["first"] + after["others"])):
            out.append(f"| {ranking} | {which} ({len(samples)}) | {statistics.median(samples) * 1000:.1f} ms "
                       f"| {percentile(samples, 0.95) * 1000:.1f} ms | {max(samples) * 1000:.1f} ms "
                       f"| {after['ranked'] if which == 'all' else ''} |")
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    text = report(asyncio.run(run()))
    out = Path(__file__).parent / "results" / "lsp_speed.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
