"""What the daemon keeps per conversation or party stays bounded (bot.record_cache): it
runs for months over ~10,000 conversations and thousands of parties, and a cache or a
lock per key ever seen only grew (10,000 records read: 17 MB that never went)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from bot.record_cache import RecordCache, keyed_locks
from tests.conftest import settle
from tests.support import inbound


def test_the_least_recently_used_go_except_those_kept() -> None:
    cache: RecordCache[int] = RecordCache(size=3, keep=lambda key: key == "a")
    for key in "abcd":
        cache[key] = ord(key)
    assert list(cache) == ["a", "c", "d"]  # "b" went; "a" is kept though older
    assert cache.get("c") == ord("c")  # used: now the most recent
    cache["e"] = 0
    assert list(cache) == ["a", "c", "e"]


async def test_a_lock_lives_while_held_or_awaited() -> None:
    locks = keyed_locks()
    lock = locks[("k")] = asyncio.Lock()
    async with lock:
        waiter = asyncio.ensure_future(_hold(locks, "k"))
        await asyncio.sleep(0)
        del lock
        gc.collect()
        assert "k" in locks  # its holder and its waiter keep it
    await waiter
    gc.collect()
    assert len(locks) == 0


async def _hold(locks: Any, key: str) -> None:
    async with locks[key]:
        pass


async def test_conversations_read_and_written_are_not_all_kept(services: Any) -> None:
    manager = services.conversations
    manager._cache.size = 8
    ids = [(await manager.create("web")).id for _ in range(20)]
    for conv_id in ids:
        await manager.append_turn(conv_id, "user", f"hello {conv_id}", channel="web")
        assert (await manager.get(conv_id)).turn_count == 1
    assert len(manager._cache) == 8
    assert len(manager._locks) == 0 and len(manager.store._locks) == 0
    again = await manager.get(ids[0])  # read back from the index
    assert again is not None and again.turn_count == 1
    # A record ahead of the index (its write failed) is the only copy: never dropped.
    manager._index_behind.add(ids[1])
    behind = manager._cache[ids[1]] = await manager.index.get(ids[1])
    for conv_id in ids[2:]:
        await manager.get(conv_id)
    assert manager._cache.get(ids[1]) is behind


async def test_a_lock_per_party_is_not_kept(services: Any) -> None:
    for i in range(12):
        await services.router.deliver(inbound(f"hi {i}", sender=str(900 + i)))
    await settle(services)
    assert len(await services.external.list_parties()) == 12
    gc.collect()
    assert len(services.external._party_locks) == 0
    assert len(services.router.resolver._contact_locks) == 0
