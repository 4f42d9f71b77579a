"""A bounded map that forgets the entry used least recently: what a search or the embedder keeps of
the programs, lines and windows it may meet again, without growing with a long run.

    cache = LeastRecentlyUsed(4096)
    found = cache.get_fresh(key)          # None when unknown; a hit counts as a use
    if found is None:
        cache.put(key, compute(key))
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LeastRecentlyUsed(OrderedDict):
    """At most `capacity` entries; a `put` past it drops the entry used least recently."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def get_fresh(self, key: Hashable) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.capacity:
            self.popitem(last=False)
