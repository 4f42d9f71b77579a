"""The bounded map of agent/lru.py: it keeps the entries used most recently, a hit counting as a use."""

from __future__ import annotations

from agent.lru import LeastRecentlyUsed


def test_a_full_map_forgets_the_entry_used_least_recently() -> None:
    cache = LeastRecentlyUsed(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get_fresh("a") == 1  # now "b" is the least recent
    cache.put("c", 3)
    assert list(cache) == ["a", "c"]
    assert cache.get_fresh("b") is None


def test_putting_a_known_key_replaces_it_without_growing() -> None:
    cache = LeastRecentlyUsed(2)
    cache.put(("moves",), 1)
    cache.put(("moves",), 2)
    assert len(cache) == 1 and cache.get_fresh(("moves",)) == 2
