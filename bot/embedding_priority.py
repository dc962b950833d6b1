"""Live embeddings first: the vector rebuild gives way to replies and searches.

Every embedding goes through one worker thread (:class:`bot.embedding.EmbeddingService`),
first come, first served. A rebuild after a model change embeds every turn window again
(~9 a second on a loaded 2-core machine): its batches queued ahead of a search's query
and a reply's own windows, which then waited seconds. An embedding asked for inside
:func:`in_background` (the rebuild's task) now sends its batches one at a time, smaller
ones, each only while no other embedding is in flight; the others never wait for more
than the one background batch the worker may be running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# Texts per worker hop of a background embedding: a live one waits for at most one such
# hop (about 1 s at ~9 windows/s under load), where ``embedding.batch_size`` (32) took 3-4 s.
BACKGROUND_BATCH = 8

_IN_BACKGROUND: ContextVar[bool] = ContextVar("embedding_in_background", default=False)


@contextmanager
def in_background() -> Iterator[None]:
    """Embeddings asked for inside this block, by this task, give way to every other one."""
    token = _IN_BACKGROUND.set(True)
    try:
        yield
    finally:
        _IN_BACKGROUND.reset(token)


def embedding_in_background() -> bool:
    """Whether the current task embeds in the background (:func:`in_background`)."""
    return _IN_BACKGROUND.get()


class LiveFirst:
    """Counts the live embeddings in flight; background batches wait until there are none.

    Futures, not an :class:`asyncio.Event`: one embedding service outlives event loops in
    tests, and an Event is bound to the first loop that waits on it.
    """

    def __init__(self) -> None:
        self._live = 0
        self._waiting: list[asyncio.Future[None]] = []

    @property
    def live(self) -> int:
        """Live embeddings in flight now."""
        return self._live

    @contextmanager
    def live_embedding(self) -> Iterator[None]:
        """Around a live embedding (all its batches): background batches wait meanwhile."""
        self._live += 1
        try:
            yield
        finally:
            self._live -= 1
            if not self._live:
                waiting, self._waiting = self._waiting, []
                for waiter in waiting:
                    if not waiter.done():
                        waiter.set_result(None)

    async def give_way(self) -> None:
        """Return once no live embedding is in flight (a background batch may go)."""
        while self._live:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            await waiter
