"""The daemon's background start (bot/daemon_vectors.py): the vector rebuild after a
model change is asked to wait for the notes the last run left owed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from bot.daemon_vectors import _open_vectors
from bot.hooks import EventBus


class _Vectors:
    """Records how the rebuild was asked for (the rebuild itself: test_vector_rebuild)."""

    def __init__(self) -> None:
        self.rebuilt = asyncio.Event()

    async def reindex_all(self, after: Any = None) -> dict[str, int]:
        if after is not None:
            await after
        self.rebuilt.set()
        return {"turns": 0, "abbreviations": 0, "terms": 0}


async def test_the_rebuild_starts_once_the_owed_notes_are_written() -> None:
    # Regression: the start-up rebuild began as soon as the model loaded, beside the
    # abbreviation passes of the owed notes, which then waited behind its embeddings.
    notes_written = asyncio.Event()
    vectors = _Vectors()

    async def start() -> bool:
        return True

    services: Any = SimpleNamespace(
        search=SimpleNamespace(vectors=vectors, start=start),
        lifecycle=SimpleNamespace(owed_notes_written=notes_written.wait),
        bus=EventBus(),
        vectors=None,
    )
    await _open_vectors(services)
    assert services.vectors is vectors
    for _ in range(20):  # turns of the loop: the spawned rebuild runs up to its wait
        await asyncio.sleep(0)
    assert not vectors.rebuilt.is_set()
    notes_written.set()
    await asyncio.wait_for(vectors.rebuilt.wait(), 30)
