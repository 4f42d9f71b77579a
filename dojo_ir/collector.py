"""The garbage collector's setting for a process that reads kernels.

A parsed kernel is many small immutable objects (spans, expressions, accesses)
that live as long as the program does. With CPython's default threshold (a
young-generation collection every 700 allocations), collections that find
nothing to free took half the time of parsing and checking a 20,000-line file.
The front doors (`dojo`, `dojo-lsp`, `dojo-runner`) raise the threshold once at
start-up, as mypy does for the same reason. Collections still run, less
often; memory freed by reference counting (all of an immutable tree's) is
freed at once as before.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000


def for_long_kernels() -> None:
    """Collect the young generation every YOUNG_THRESHOLD allocations rather than every 700."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
