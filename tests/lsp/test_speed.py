"""The first code action after an edit of the 200-line file of bench/parse_speed.py: the new
version is checked and its moves at the edited line listed in time for the editor (the figure
against its 100 ms, over a real server, is bench/lsp_speed.py's). Counted in CPU time of this
thread, which other processes lengthen only by sharing the core's execution units: on a shared
Intel Xeon the same listing took 73-93 ms of CPU on a quiet core and 120 ms while a sibling
thread of the host was busy. The test's bar is twice the editor's, so that it fails when the
listing grows slower by a factor, not when the host is busy."""

from __future__ import annotations

import time

from bench.parse_speed import two_hundred_lines
from server.lsp.documents import Snapshot

BAR_S = 0.2  # twice the editor's 100 ms (see above)


def test_the_moves_at_an_edited_line_are_listed_within_the_bar():
    lines = two_hundred_lines().splitlines()
    line = next(i for i, text in enumerate(lines) if "0.5" in text)
    # the server's process-wide caches (lines, index forms) are warm in an editing session
    Snapshot("file:///chain.dojo", 1, two_hundred_lines()).moves_at(line + 1, line + 1)
    times = []
    for version in range(2, 5):  # the best of three
        lines[line] = lines[line].replace("0.5", f"0.{version}5", 1)
        started = time.thread_time()
        snapshot = Snapshot("file:///chain.dojo", version, "\n".join(lines) + "\n")
        snapshot.analyse()
        moves = snapshot.moves_at(line + 1, line + 1)
        times.append(time.thread_time() - started)
        assert len(moves) > 100  # the fissions of the scope around the whole body among them
    assert min(times) < BAR_S, f"{min(times) * 1000:.0f} ms of CPU"
