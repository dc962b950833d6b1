"""Incoming messages go first: replies to others than the owner wait for a pause.

Under a flood (a busy group, the backlog a channel hands over after an outage, a
stranger sending hundreds of messages a second) every reply written competes with the
messages still arriving: the reply's transcript append, index update and outbox row
take the same writer threads and the same interpreter lock, and the message that must
become durable waits behind them (docs/benchmarks.md "ingest", sessions 12-16 and 20).
So a reply that does not answer the owner waits, before it takes a reply slot, until
no message has arrived for :data:`FLOOD_QUIET_SECONDS`, or ``brain.flood_reply_wait_seconds``
at most. The owner's own replies never wait, and in ordinary traffic (a message every
few tens of milliseconds or slower) no reply waits at all.

A flood longer than the wait (60 s against the default 10 s): a key's (conversation's,
party's) reply goes when its wait is over, and the next one's wait starts when its turn
comes, so each key gets about one reply per wait while it lasts and the rest go at the
first pause; nothing is dropped, nothing here grows per message (the queued jobs are
the replies owed), and the one watcher wakes once per :data:`FLOOD_QUIET_SECONDS`. The
deferred replies then queue for the reply slots, where the owner's go first
(:class:`bot.reply_queue.KeyedSerialQueue`).
"""

from __future__ import annotations

import asyncio
import logging

from bot.tasks import spawn

log = logging.getLogger("my_agent.replies")

# No message for this long: the flood has paused. At 50 messages a second gaps this long
# come every few messages; at 2,000 a second, none.
FLOOD_QUIET_SECONDS = 0.02


class IncomingFlow:
    """When the last message arrived, and a wait for the flow to pause.

    One watcher task, alive only while replies wait, wakes them all at the first pause
    (each waiter polling on its own cost a wake-up per waiter every 20 ms of a flood)."""

    def __init__(self, quiet: float = FLOOD_QUIET_SECONDS, max_wait: float = 0.0) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self.deferred = 0  # replies that waited for later messages (the benchmark reports it)
        self._last = float("-inf")
        self.arrived = 0  # messages noted so far
        self._paused = asyncio.Event()
        self._waiting = 0
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False

    def note(self) -> None:
        """A message arrived now."""
        self.arrived += 1
        self._last = asyncio.get_running_loop().time()
        if self._paused.is_set() and not self._stopping:
            self._paused.clear()

    def stop(self) -> None:
        """The daemon is stopping: every wait ends now (a job that has not started stays
        queued, its turn unanswered on disk, and is answered after the restart)."""
        self._stopping = True
        self._paused.set()

    async def pause(self) -> None:
        """Return once no message arrived for ``quiet`` seconds, or after ``max_wait``
        (a reply to a message that came alone waits ``quiet`` after it)."""
        loop = asyncio.get_running_loop()
        if self.max_wait <= 0 or self._stopping or loop.time() - self._last >= self.quiet:
            return
        seen = self.arrived
        self._waiting += 1
        if self._watcher is None:
            self._watcher = spawn(self._watch(), name="flood-watcher")
        try:
            await asyncio.wait_for(self._paused.wait(), self.max_wait)
        except TimeoutError:
            log.debug("a reply waited %.1f s for a flood to pause; it goes now", self.max_wait)
        finally:
            self._waiting -= 1
            if self.arrived != seen:
                self.deferred += 1  # others came meanwhile: it yielded to a flood

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting and not self._stopping:
                wait = self._last + self.quiet - loop.time()
                if wait <= 0:
                    self._paused.set()  # wakes every waiter; the next message clears it
                    wait = self.quiet
                await asyncio.sleep(wait)
        finally:
            self._watcher = None
