"""The abbreviation queue: one serial background worker over conversation ids,
deduplicated (seed 000 "Background Abbreviation"), so a reply never waits for notes.

What it runs for each id (a pass: :meth:`bot.lifecycle.passes.AbbreviationPasses._process`)
is given to it; the notes themselves are :mod:`bot.lifecycle.abbreviation`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.tasks import until_done

log = logging.getLogger("my_agent.lifecycle")

Process = Callable[[str], Awaitable[object]]


class AbbreviationQueue:
    """One background worker taking conversation ids in order, each at most once queued.

    A conversation that is queued again while it is being processed is accepted (new
    turns may have arrived); one that is already waiting is not queued twice. The waiting
    ids are an ordered dict alone (no asyncio.Queue beside it): ids taken out in bulk
    (:meth:`take_waiting`) leave no entries behind for the worker to skip, which it did
    15,000 in a row without yielding to the event loop.
    """

    def __init__(self, process: Process) -> None:
        self._process = process
        self._queued: dict[str, None] = {}  # waiting ids, in queue order
        self._current: str | None = None
        self._worker: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()  # set while ids wait
        self._idle = asyncio.Event()  # set while none waits and none is processed
        self._idle.set()

    def start(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name="abbreviation-worker"
            )

    def enqueue(self, conv_id: str) -> bool:
        """Queue ``conv_id``; False when it is already waiting (deduplicated)."""
        if conv_id in self._queued:
            return False
        self._queued[conv_id] = None
        self._idle.clear()
        self._wakeup.set()
        return True

    def take_waiting(self) -> list[str]:
        """Remove every waiting conversation from the queue and return them, in order (the
        model is down: the rest is deferred at once, not one pass each)."""
        taken = list(self._queued)
        self._queued.clear()
        self._settled()
        return taken

    def pending(self) -> list[str]:
        """The conversation being processed, then the waiting ones, in order."""
        return ([self._current] if self._current else []) + list(self._queued)

    @property
    def current(self) -> str | None:
        return self._current

    async def join(self) -> None:
        """Wait until every queued conversation has been processed."""
        while not self._idle.is_set():
            await self._idle.wait()

    async def stop(self, timeout: float, hurry: asyncio.Event | None = None) -> list[str]:
        """Let the worker drain for up to ``timeout`` seconds, or until ``hurry`` is set
        (the owner's second Ctrl-C: with a backlog of notes it waited the whole time),
        then cancel it.

        Returns the conversations left unprocessed (the one interrupted first).
        """
        if self._worker is None:
            return self.pending()
        await until_done(asyncio.ensure_future(self.join()), timeout, hurry)
        left = self.pending()
        self._worker.cancel()
        # return_exceptions: the worker's CancelledError is collected, ours still propagates.
        await asyncio.gather(self._worker, return_exceptions=True)
        self._worker = None
        return left

    def _settled(self) -> None:
        if not self._queued:
            self._wakeup.clear()
            if self._current is None:
                self._idle.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            if not self._queued:  # taken meanwhile
                self._wakeup.clear()
                continue
            conv_id = next(iter(self._queued))
            del self._queued[conv_id]
            self._current = conv_id
            try:
                await self._process(conv_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("abbreviation worker failed on %s", conv_id)
            finally:
                self._current = None
                self._settled()
