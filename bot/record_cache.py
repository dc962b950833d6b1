"""Bounded in-memory caches for what the daemon keys by conversation or party.

The daemon runs for months and a year of use holds ~10,000 conversations and thousands
of third parties. A cache that keeps every record read (every conversation the
dashboard opened, every search hit) or a lock per key ever seen only grows: 10,000
records were 17 MB (docs/benchmarks.md, "scale (session 19)"). :class:`RecordCache` keeps
the most recently used records; :func:`keyed_locks` keeps a lock only while someone holds
or waits for it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

V = TypeVar("V")

# records kept (~1.7 kB each): far more than the conversations active at once
RECORDS = 2048


class RecordCache(Generic[V]):
    """Key -> value, the least recently used dropped past ``size``, except those
    ``keep`` names (e.g. a record ahead of the index, which cannot be read back)."""

    def __init__(self, size: int = RECORDS, keep: Callable[[str], bool] | None = None) -> None:
        self.size = size
        self._keep = keep or (lambda key: False)
        self._items: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def peek(self, key: str) -> V | None:
        """The value without marking it used: safe from another thread (no reordering)."""
        return self._items.get(key)

    def __getitem__(self, key: str) -> V:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._evict()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())

    def pop(self, key: str, default: V | None = None) -> V | None:
        return self._items.pop(key, default)

    def _evict(self) -> None:
        for key in list(self._items):
            if len(self._items) <= self.size:
                return
            if not self._keep(key):
                del self._items[key]


def keyed_locks() -> weakref.WeakValueDictionary[str, asyncio.Lock]:
    """A lock per key that lives while it is held or waited for (its holder and its
    waiters keep it), so a key used once does not keep one for good. Use it as
    ``locks.get(key)`` or-create; never keep a lock only in the dictionary."""
    return weakref.WeakValueDictionary()
