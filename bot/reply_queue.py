"""Jobs run one after another per key (a conversation, a party), keys concurrently."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from bot.tasks import finish_within, spawn

log = logging.getLogger("my_agent.replies")


# a job and what it waits for before it takes a slot
_Job = tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]] | None]


class _Slots:
    """At most ``size`` jobs at once; a freed slot goes to a job that yields to no flood
    (submitted without ``wait``: the owner's replies) before one that does.

    A plain semaphore served them in arrival order: under a flood longer than
    ``brain.flood_reply_wait_seconds`` the deferred replies, released together at the
    end of their wait, queued for the slots ahead of the owner's reply, which waited
    out their model calls (bot/arrivals.py)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._first: deque[asyncio.Future[None]] = deque()  # waiting, no wait of theirs
        self._then: deque[asyncio.Future[None]] = deque()  # waiting, after a flood's pause

    async def acquire(self, first: bool) -> None:
        if self._free > 0 and not self._first and (first or not self._then):
            self._free -= 1
            return
        waiters = self._first if first else self._then
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(slot)
        try:
            await slot
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled():
                self.release()  # handed over as it was cancelled: pass it on
            else:
                waiters.remove(slot)
            raise

    def release(self) -> None:
        for waiters in (self._first, self._then):
            while waiters:
                slot = waiters.popleft()
                if not slot.done():
                    slot.set_result(None)  # the slot passes to it as it is
                    return
        self._free += 1


class KeyedSerialQueue:
    """Jobs run strictly one after another per key; different keys run concurrently."""

    def __init__(self, max_running: int = 0) -> None:
        self._queues: dict[str, deque[_Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self.accepting = True
        # At most ``max_running`` jobs at once across keys (0: no limit). Replies wait
        # for a slot; storing incoming messages never does.
        self._slots = _Slots(max_running) if max_running > 0 else None

    def submit(
        self,
        key: str,
        job: Callable[[], Awaitable[None]],
        wait: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Queue ``job`` under ``key``. ``wait``: awaited when the job's turn comes,
        before it takes a slot (a reply that yields to a flood of incoming messages,
        :mod:`bot.arrivals`, holds no slot the owner's replies need meanwhile); a job
        without one takes a free slot before those with one (:class:`_Slots`)."""
        self._queues.setdefault(key, deque()).append((job, wait))
        if key not in self._workers:
            self._workers[key] = spawn(self._run(key), name=f"serial-{key}")

    def busy(self, key: str) -> bool:
        return key in self._workers

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values()) + len(self._workers)

    async def _run(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue and self.accepting:
                job, wait = queue[0]
                if wait is not None:
                    await wait()
                    if not self.accepting:
                        break  # still queued, like the jobs behind it (see drain)
                queue.popleft()
                try:
                    if self._slots is None:
                        await job()
                    else:
                        await self._slots.acquire(first=wait is None)
                        try:
                            await job()
                        finally:
                            self._slots.release()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("job for %s failed", key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def drain(self, timeout: float) -> bool:
        """Stop taking queued jobs, let running ones finish within ``timeout``."""
        self.accepting = False
        return await finish_within(list(self._workers.values()), timeout)
